"""Who a per-user limit counts: the account (uid), or a verified phone number or email.

A shopper's claim slots live at `claims/{identity_key}-{slot}`, so two accounts behind one
phone number share the same slots and the same atomic `create()` refuses the second code. Bulk
assignments key their recipients the same way, so a recipient who also claims on the landing
page as that identity never gets a second code.
"""

from __future__ import annotations

import hashlib

from shared.types import IdentityKind

__all__ = ["IdentityKind", "identity_key", "normalized"]


def normalized(kind: IdentityKind, value: str) -> str:
    """The form two spellings of one identity share (emails are case-insensitive in practice;
    phone numbers come as E.164 from Firebase, spaces and dashes from spreadsheets)."""
    value = value.strip()
    if kind is IdentityKind.EMAIL:
        return value.lower()
    if kind is IdentityKind.PHONE:
        return "".join(ch for ch in value if ch.isdigit() or ch == "+")
    return value


def identity_key(kind: IdentityKind, value: str) -> str:
    """A fixed-length document-id-safe key; a uid keeps the key claims have always had."""
    text = normalized(kind, value)
    if kind is not IdentityKind.UID:
        text = f"{kind.value}:{text}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
