"""Shopify webhooks: the signature check on the raw body.

Shopify signs each delivery with the app's secret: `X-Shopify-Hmac-Sha256` is the base64 HMAC-
SHA256 of the body exactly as sent, so it is checked on the raw bytes before any parsing (a
re-serialised JSON body would not match), and compared in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from shared.errors import InvalidSignature

SIGNATURE_HEADER = "X-Shopify-Hmac-Sha256"
TOPIC_HEADER = "X-Shopify-Topic"
SHOP_HEADER = "X-Shopify-Shop-Domain"


def signature(body: bytes, key: bytes) -> str:
    return base64.b64encode(hmac.new(key, body, hashlib.sha256).digest()).decode()


def verify(body: bytes, header: str | None, key: bytes | None) -> None:
    """Raise InvalidSignature unless `header` is the body's signature under `key`."""
    if key is None:
        raise InvalidSignature("No Shopify webhook secret is configured here.")
    if not header:
        raise InvalidSignature(f"Missing {SIGNATURE_HEADER}.")
    expected = signature(body, key).encode()
    if not hmac.compare_digest(expected, header.strip().encode()):
        raise InvalidSignature(f"{SIGNATURE_HEADER} does not match the body.")


def verify_shop(header: str | None, expected: str | None, *, required: bool) -> None:
    """Raise InvalidSignature unless the delivery names the configured shop: an app's secret
    signs every shop's webhooks, so a valid signature alone may be another shop's order."""
    if expected is None:
        if required:
            raise InvalidSignature("No Shopify shop domain is configured here.")
        return
    if (header or "").strip().lower() != expected:
        raise InvalidSignature("This webhook comes from another shop.")
