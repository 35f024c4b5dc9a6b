"""Identity keys: one key per person whatever the spelling, the old key for account ids."""

from __future__ import annotations

import hashlib

import pytest

from shared.claims.identity import EmailCanonicalization, IdentityKind, canonical, identity_key
from shared.errors import IdentityInvalid


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
    keys = {
        identity_key(kind, "15550100@x.example") for kind in (IdentityKind.UID, IdentityKind.EMAIL)
    }
    assert len(keys) == 2
    assert identity_key(IdentityKind.PHONE, "+15550100") != identity_key(
        IdentityKind.UID, "+15550100"
    )


GMAIL_ALIASES = (
    "john.doe.sec@gmail.com",
    "johndoesec@gmail.com",
    "johndoesec+1@gmail.com",
    "JohnDoeSec+2@googlemail.com",
)


def test_one_gmail_inbox_is_one_identity_however_it_is_spelled() -> None:
    assert {canonical(IdentityKind.EMAIL, a) for a in GMAIL_ALIASES} == {"johndoesec@gmail.com"}
    assert len({identity_key(IdentityKind.EMAIL, a) for a in GMAIL_ALIASES}) == 1


def test_tags_go_everywhere_but_dots_only_where_the_provider_ignores_them() -> None:
    assert canonical(IdentityKind.EMAIL, "Ann.Lee+sale@Shop.Example.") == "ann.lee@shop.example"
    assert canonical(IdentityKind.EMAIL, "ann.lee@outlook.com") == "ann.lee@outlook.com"


def test_a_campaign_may_count_addresses_as_written() -> None:
    rule = EmailCanonicalization.ADDRESS
    keys = {identity_key(IdentityKind.EMAIL, a, email_rule=rule) for a in GMAIL_ALIASES}
    assert len(keys) == 4
    assert canonical(IdentityKind.EMAIL, " Ann@Shop.Example ", email_rule=rule) == (
        "ann@shop.example"
    )


@pytest.mark.parametrize("address", ["+tag@gmail.com", "...@gmail.com", "no-at-sign", "a@"])
def test_an_address_without_a_mailbox_is_refused(address: str) -> None:
    with pytest.raises(IdentityInvalid):
        canonical(IdentityKind.EMAIL, address)


@pytest.mark.parametrize(
    "number",
    [
        "+\u0661\u0665\u0665\u0665\u0665\u0665\u0665\u0660\u0661\u0660\u0660",  # Arabic-Indic
        "+\uff11\uff15\uff15\uff15\uff15\uff15\uff15\uff10\uff11\uff10\uff10",  # full-width
        "+015555550100",  # no country code starts with 0
        "15555550100",  # no +
        "+12345",  # too short
        "+1234567890123456",  # too long
        "+1 555 CALL NOW",
    ],
)
def test_a_phone_number_outside_e164_is_refused(number: str) -> None:
    with pytest.raises(IdentityInvalid) as refused:
        identity_key(IdentityKind.PHONE, number)
    assert refused.value.error_code == "IDENTITY_INVALID"


def test_a_phone_number_keeps_its_digits_without_separators() -> None:
    assert canonical(IdentityKind.PHONE, " +1 (555) 555-0100 ") == "+15555550100"
