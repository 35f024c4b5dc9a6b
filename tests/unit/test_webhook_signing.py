"""The webhook signature (docs/contract.md's scheme), the docs' verification snippet, and the
sealed secrets."""

from __future__ import annotations

import hashlib
import hmac
import re

import pytest

from shared.webhooks.signing import SecretBox, new_secret, signature, verify
from tests.support.stack import ROOT

SECRET = "whsec_unit-test-secret"
BODY = b'{"event_id":"claimed.c.1","type":"coupon.claimed","campaign_id":"c"}'
NOW = 1_790_000_000


def test_the_header_is_t_and_the_hex_hmac_of_t_dot_body() -> None:
    header = signature(SECRET, BODY, timestamp=NOW)

    expected = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert header == f"t={NOW},v1={expected}"


def test_a_fresh_signature_verifies() -> None:
    assert verify(SECRET, signature(SECRET, BODY, timestamp=NOW), BODY, now=NOW + 30)


@pytest.mark.parametrize(
    ("secret", "body", "signed_at"),
    [
        ("whsec_another-secret", BODY, NOW),  # not this webhook's secret
        (SECRET, BODY.replace(b"c.1", b"c.2"), NOW),  # body changed after signing
        (SECRET, BODY, NOW - 301),  # older than the 5-minute tolerance: a replay
    ],
    ids=["other-secret", "tampered-body", "replayed"],
)
def test_what_a_receiver_must_refuse(secret: str, body: bytes, signed_at: int) -> None:
    header = signature(secret, BODY, timestamp=signed_at)

    assert not verify(SECRET, header, body, now=NOW)


@pytest.mark.parametrize("header", ["", "v1=abc", "t=soon,v1=abc", f"t={NOW}", "garbage"])
def test_malformed_headers_never_verify(header: str) -> None:
    assert not verify(SECRET, header, BODY, now=NOW)


def test_the_documented_snippet_verifies_what_deliveries_sign() -> None:
    """docs/architecture.md's few lines are the receivers' reference: they must agree with the
    sender."""
    readme = (ROOT / "docs" / "architecture.md").read_text()
    match = re.search(r"```python\n(# Verifying a codedrop webhook.*?)```", readme, re.DOTALL)
    assert match, "docs/architecture.md has no verification snippet"
    namespace: dict[str, object] = {}
    exec(compile(match.group(1), "architecture.md", "exec"), namespace)  # noqa: S102 (our docs)
    check = namespace["verify_codedrop_signature"]
    assert callable(check)
    header = signature(SECRET, BODY, timestamp=NOW)

    assert check(SECRET, header, BODY, now=NOW + 10) is True
    assert check(SECRET, header, BODY + b" ", now=NOW + 10) is False
    assert check(SECRET, header, BODY, now=NOW + 3600) is False


def test_a_sealed_secret_opens_only_for_its_webhook_and_key() -> None:
    secret = new_secret()
    box = SecretBox("k" * 40)
    sealed = box.seal(secret, webhook_id="wh_0000000000000001")

    assert secret not in sealed
    assert box.open(sealed, webhook_id="wh_0000000000000001") == secret
    with pytest.raises(ValueError, match="does not open"):
        box.open(sealed, webhook_id="wh_0000000000000002")
    with pytest.raises(ValueError, match="does not open"):
        SecretBox("z" * 40).open(sealed, webhook_id="wh_0000000000000001")


def test_secrets_are_new_each_time() -> None:
    assert len({new_secret() for _ in range(100)}) == 100
