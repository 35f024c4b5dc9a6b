"""The signature every delivery carries, and how each webhook's secret is kept.

`X-Codedrop-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>" with the secret>`
(docs/contract.md). The timestamp is signed with the body, so a receiver can refuse old replays.

The secret has to be usable again at every delivery, so it cannot be hashed: it is sealed with
AES-GCM under a key derived from CODEDROP_WEBHOOK_KEY (Secret Manager in production), the webhook
id as associated data. A copy of the database (an export, a read-only viewer) reveals no
secret, and a sealed secret moved to another webhook does not open.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SIGNATURE_HEADER = "X-Codedrop-Signature"
DEFAULT_TOLERANCE_SECONDS = 300
_NONCE_BYTES = 12


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def signature(secret: str, body: bytes, *, timestamp: int) -> str:
    """The header value for `body` signed at `timestamp` (unix seconds)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(
    secret: str,
    header: str,
    body: bytes,
    *,
    now: float,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
) -> bool:
    """What a receiver checks: a v1 signature of this body, made within `tolerance` of now."""
    parts: dict[str, list[str]] = {}
    for item in header.split(","):
        key, sep, value = item.strip().partition("=")
        if sep:
            parts.setdefault(key, []).append(value)
    try:
        timestamp = int(parts["t"][0])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance:
        return False
    expected = signature(secret, body, timestamp=timestamp).rpartition("v1=")[2]
    return any(hmac.compare_digest(expected, given) for given in parts.get("v1", []))


class SecretBox:
    """Seals and opens webhook secrets (AES-256-GCM, key from HKDF-SHA256 of the configured
    key material)."""

    def __init__(self, key_material: str) -> None:
        key = HKDF(
            algorithm=SHA256(), length=32, salt=None, info=b"codedrop webhook secrets v1"
        ).derive(key_material.encode())
        self._aead = AESGCM(key)

    def seal(self, secret: str, *, webhook_id: str) -> str:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, secret.encode(), webhook_id.encode())
        return base64.urlsafe_b64encode(nonce + sealed).decode()

    def open(self, sealed: str, *, webhook_id: str) -> str:
        """The secret; ValueError if it was sealed under another key or for another webhook."""
        raw = base64.urlsafe_b64decode(sealed.encode())
        try:
            opened = self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], webhook_id.encode())
        except InvalidTag as exc:
            raise ValueError(f"webhook {webhook_id}: secret does not open with this key") from exc
        return opened.decode()
