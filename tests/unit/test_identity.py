"""Identity keys: one key per person whatever the spelling, the old key for account ids."""

from __future__ import annotations

import hashlib

from shared.claims.identity import IdentityKind, identity_key


def test_an_account_keeps_the_key_its_claims_have_always_had() -> None:
    assert identity_key(IdentityKind.UID, "abc") == hashlib.sha256(b"abc").hexdigest()[:32]


def test_spellings_of_one_email_or_phone_share_a_key() -> None:
    assert identity_key(IdentityKind.EMAIL, " Ann@Shop.Example ") == identity_key(
        IdentityKind.EMAIL, "ann@shop.example"
    )
    assert identity_key(IdentityKind.PHONE, "+1 555-0100") == identity_key(
        IdentityKind.PHONE, "+15550100"
    )


def test_kinds_never_share_a_key() -> None:
    keys = {identity_key(kind, "+15550100") for kind in IdentityKind}
    assert len(keys) == 3
