"""A secret mounted as a file is read on use: a version added after the deploy (the Shopify
webhook secret, shown by the shop once the app exists) reaches a warm instance without a
restart. scripts/deploy mounts it (`--set-secrets=/etc/secrets/shopify/webhook-secret=…:latest`)
and names the file in CODEDROP_SHOPIFY_WEBHOOK_SECRET_FILE."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.firestore import Client

from shared import settings as settings_module
from shared.container import Services
from shared.http import admin
from shared.http.shopify import SHOP_HEADER, SIGNATURE_HEADER, signature
from shared.settings import SecretFiles, Settings
from tests.support.api import router_client

WEBHOOK = "/v1/webhooks/shopify/orders"
FIRST = b"first-shopify-secret-0123456789"
ROTATED = b"rotated-shopify-secret-987654321"

# Production settings: none of the emulator tier's local switches.
pytestmark = pytest.mark.usefixtures("production_env")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(settings_module, "SECRET_FILES", SecretFiles(max_age=10, clock=clock))
    return clock


def test_a_warm_instance_verifies_with_the_rotated_secret(tmp_path: Path, clock: Clock) -> None:
    mounted = tmp_path / "webhook-secret"
    mounted.write_bytes(FIRST + b"\n")
    settings = Settings(
        project_id="shop-prod",
        ticket_secret="t" * 32,
        shopify_webhook_secret_file=mounted,
        shopify_shop_domain="codedrop-test.myshopify.com",
    )
    offline = Client(project="shop-prod", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    client = router_client(admin.router, Services(settings, db=offline, publisher=object()))
    body = b'{"id": 1, "discount_codes": []}'

    def post(key: bytes) -> Any:
        return client.post(
            WEBHOOK,
            data=body,
            headers={
                SIGNATURE_HEADER: signature(body, key),
                SHOP_HEADER: "codedrop-test.myshopify.com",
            },
            content_type="application/json",
        )

    assert post(FIRST).status_code == 200
    mounted.write_bytes(ROTATED)  # Secret Manager's new latest version, as the mount shows it
    clock.now += 10

    assert post(ROTATED).status_code == 200
    refused = post(FIRST)
    assert refused.status_code == 401
    assert refused.get_json()["error_code"] == "INVALID_SIGNATURE"


def test_the_file_is_read_at_most_once_per_max_age(tmp_path: Path, clock: Clock) -> None:
    files = settings_module.SECRET_FILES
    mounted = tmp_path / "secret"
    mounted.write_bytes(FIRST)
    assert files.read(mounted, min_length=16) == FIRST
    mounted.write_bytes(ROTATED)
    clock.now += 9.9
    assert files.read(mounted, min_length=16) == FIRST
    clock.now += 0.1
    assert files.read(mounted, min_length=16) == ROTATED


@pytest.mark.parametrize("content", [None, b"", b"short\n"], ids=["missing", "empty", "short"])
def test_a_missing_or_short_file_refuses_every_delivery(
    tmp_path: Path, clock: Clock, content: bytes | None
) -> None:
    mounted = tmp_path / "secret"
    if content is not None:
        mounted.write_bytes(content)
    settings = Settings(
        project_id="shop-prod",
        ticket_secret="t" * 32,
        shopify_webhook_secret_file=mounted,
        shopify_shop_domain="codedrop-test.myshopify.com",
    )
    assert settings.shopify_webhook_key is None
