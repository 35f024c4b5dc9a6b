"""The settings object fails fast on configurations that must never run."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.settings import Settings


def test_emulator_tokens_are_refused_outside_demo_projects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "acme-prod")
    monkeypatch.setenv("FIREBASE_AUTH_EMULATOR_HOST", "127.0.0.1:9099")

    with pytest.raises(ValidationError, match="demo-"):
        Settings()


def test_demo_project_may_use_emulator_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "demo-anything")
    monkeypatch.setenv("FIREBASE_AUTH_EMULATOR_HOST", "127.0.0.1:9099")

    assert Settings().is_local


@pytest.mark.usefixtures("production_env")
def test_production_project_without_emulators_is_fine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "acme-prod")
    monkeypatch.setenv("CODEDROP_TICKET_SECRET", "s" * 40)

    assert not Settings().is_local


@pytest.mark.usefixtures("production_env")
@pytest.mark.parametrize(("secret", "message"), [(None, "required"), ("short", "32 characters")])
def test_production_needs_a_real_ticket_secret(
    monkeypatch: pytest.MonkeyPatch, secret: str | None, message: str
) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "acme-prod")
    if secret is None:
        monkeypatch.delenv("CODEDROP_TICKET_SECRET", raising=False)
    else:
        monkeypatch.setenv("CODEDROP_TICKET_SECRET", secret)

    with pytest.raises(ValidationError, match=message):
        Settings()


def test_development_app_check_keys_are_refused_outside_demo_projects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "acme-prod")
    monkeypatch.setenv("CODEDROP_TICKET_SECRET", "s" * 40)
    monkeypatch.delenv("FIREBASE_AUTH_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("CODEDROP_APP_CHECK_JWKS_URL", "http://127.0.0.1:8123/jwks.json")

    with pytest.raises(ValidationError, match="demo-"):
        Settings()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CODEDROP_APP_CHECK_CONSUME_TOKENS", "true", "cannot consume"),
        ("CODEDROP_APP_CHECK_JWKS_URL", "file:///tmp/jwks.json", "https?://"),
    ],
)
def test_development_app_check_keys_are_served_over_http_and_never_consumed(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "demo-anything")
    monkeypatch.setenv("CODEDROP_APP_CHECK_JWKS_URL", "http://127.0.0.1:8123/jwks.json")
    monkeypatch.setenv(name, value)

    with pytest.raises(ValidationError, match=message):
        Settings()


def test_cors_origins_are_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "demo-anything")
    monkeypatch.setenv("CODEDROP_CORS_ORIGINS", "https://a.example, https://b.example,")

    assert Settings().cors_origins == ("https://a.example", "https://b.example")


def test_project_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)

    with pytest.raises(ValidationError, match="GOOGLE_CLOUD_PROJECT"):
        Settings()


@pytest.mark.parametrize(
    ("name", "value"),
    [("GOOGLE_CLOUD_PROJECT", "Bad Project"), ("CODEDROP_POOL_REFILL_SIZE", "0")],
)
def test_invalid_values_fail_at_start(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    monkeypatch.delenv("FIREBASE_AUTH_EMULATOR_HOST", raising=False)

    with pytest.raises(ValidationError):
        Settings()


def test_the_pools_tuning_must_hang_together() -> None:
    demo = "demo-codedrop-test"
    with pytest.raises(ValidationError, match="at least CODEDROP_POOL_REFILL_SECONDS"):
        Settings(project_id=demo, pool_max_refill_seconds=0.5)
    with pytest.raises(ValidationError, match="shorter than CODEDROP_POOL_LEASE_SECONDS"):
        Settings(project_id=demo, pool_idle_holder_seconds=60)
    assert Settings(project_id=demo, pool_refill_seconds=0.5, pool_max_refill_seconds=0.5)
    assert Settings(project_id=demo, pool_idle_holder_seconds=60, pool_lease_seconds=120)


@pytest.mark.parametrize(
    "origins", ["null", "https://shop.example/landing", "shop.example", "https://a.example,null"]
)
def test_cors_origins_must_be_origins(monkeypatch: pytest.MonkeyPatch, origins: str) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "demo-anything")
    monkeypatch.setenv("CODEDROP_CORS_ORIGINS", origins)

    with pytest.raises(ValidationError, match="CODEDROP_CORS_ORIGINS"):
        Settings()


def test_a_wildcard_origin_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "demo-anything")
    monkeypatch.setenv("CODEDROP_CORS_ORIGINS", "*")

    assert Settings().cors_origins == ("*",)
