"""App Check tokens through firebase-admin's App Check module, against the run's development key
set served on 127.0.0.1: real signed tokens, good and bad."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from devkit.standins.app_check import DevAppCheckKeys, DevAppCheckServer
from shared.errors import AppCheckRequired
from shared.gcp.app_check import AppCheckVerifier
from shared.settings import Settings
from tests.support.stack import PROJECT


@pytest.fixture
def verifier(app_check_keys: DevAppCheckServer) -> AppCheckVerifier:
    settings = Settings(
        GOOGLE_CLOUD_PROJECT=PROJECT, CODEDROP_APP_CHECK_JWKS_URL=app_check_keys.jwks_url
    )
    return AppCheckVerifier(settings)


def test_a_token_signed_by_the_key_set_for_this_project_passes(
    verifier: AppCheckVerifier, app_check_keys: DevAppCheckServer
) -> None:
    verifier.verify(app_check_keys.keys.token(project=PROJECT))


def _forged(keys: DevAppCheckKeys) -> str:
    # The served key id, signed by another key.
    return DevAppCheckKeys(key_id=keys.key_id).token(project=PROJECT)


FIXED_ANSWERS = {
    AppCheckRequired.default_message,
    "Invalid App Check token.",
    "Invalid App Check token: it has no expiry.",
}
# Each bad token, and the reason the refusal gives (in its answer, or its log line).
BAD_TOKENS: dict[str, tuple[Callable[[DevAppCheckKeys], str | None], str]] = {
    "missing": (lambda keys: None, "needs a valid Firebase App Check token"),
    "empty": (lambda keys: "", "needs a valid Firebase App Check token"),
    "not a JWT": (lambda keys: "not-a-token", "Not enough segments"),
    "forged": (_forged, "invalid signature"),
    "unknown key": (lambda keys: DevAppCheckKeys().token(project=PROJECT), "signing key"),
    "expired": (lambda keys: keys.token(project=PROJECT, lifetime_seconds=-60), "expired"),
    "other project": (lambda keys: keys.token(project="demo-other-shop"), "audience"),
    "no expiry": (lambda keys: keys.token(project=PROJECT, expires=False), "no expiry"),
}


@pytest.mark.parametrize(("make", "reason"), BAD_TOKENS.values(), ids=BAD_TOKENS.keys())
def test_bad_tokens_are_refused_with_a_fixed_answer_and_the_reason_in_the_log(
    verifier: AppCheckVerifier,
    app_check_keys: DevAppCheckServer,
    make: Callable[[DevAppCheckKeys], str | None],
    reason: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO), pytest.raises(AppCheckRequired) as refused:
        verifier.verify(make(app_check_keys.keys))

    assert refused.value.error_code == "APP_CHECK_REQUIRED"
    # The library's reason quotes the token's own fields (an attacker's `kid`): never answered.
    assert refused.value.message in FIXED_ANSWERS
    logged = [str(getattr(r, "reason", "")) for r in caplog.records]
    assert reason in refused.value.message or any(reason in text for text in logged)
