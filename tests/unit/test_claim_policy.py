"""Who may claim and as whom: the identity a campaign counts, its allowed sign-in providers, and
the App Check gate, decided before the engine."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.campaigns.models import CampaignCreate, CampaignRecord, CampaignUpdate
from shared.claims.identity import IdentityKind, identity_key
from shared.claims.policy import Shopper, admit, holder_key
from shared.errors import AppCheckRequired, IdentityRequired, SignInProviderNotAllowed

NOW = datetime(2026, 11, 27, 10, tzinfo=UTC)
PHONE = "+15555550100"


def campaign(**fields: Any) -> CampaignRecord:
    return CampaignRecord(
        campaign_id="sale",
        title="Sale",
        starts_at=NOW,
        ends_at=NOW.replace(hour=12),
        created_at=NOW,
        updated_at=NOW,
        **fields,
    )


class Gate:
    """App Check as the policy sees it: the tokens it was asked about, and its verdict."""

    def __init__(self, valid: set[str]) -> None:
        self.valid = valid
        self.asked: list[str | None] = []

    def verify(self, token: str | None) -> None:
        self.asked.append(token)
        if token not in self.valid:
            raise AppCheckRequired()


def test_by_default_the_account_is_counted_as_it_always_was() -> None:
    key = holder_key(campaign(), Shopper("acct-1", "phone", phone_number=PHONE))

    assert key == identity_key(IdentityKind.UID, "acct-1")


def test_accounts_behind_one_phone_share_one_key_and_others_do_not() -> None:
    sale = campaign(identity=IdentityKind.PHONE)

    first = holder_key(sale, Shopper("acct-1", "phone", phone_number=PHONE))
    second = holder_key(sale, Shopper("acct-2", "phone", phone_number=PHONE))
    other = holder_key(sale, Shopper("acct-3", "phone", phone_number="+15555550101"))

    assert first == second == identity_key(IdentityKind.PHONE, PHONE)
    assert other != first


def test_a_verified_email_is_counted_whatever_its_case() -> None:
    sale = campaign(identity=IdentityKind.EMAIL)

    first = holder_key(
        sale, Shopper("a", "password", email="Ann@Shop.Example", email_verified=True)
    )
    second = holder_key(
        sale, Shopper("b", "google.com", email="ann@shop.example", email_verified=True)
    )

    assert first == second == identity_key(IdentityKind.EMAIL, "ann@shop.example")


@pytest.mark.parametrize(
    ("identity", "shopper"),
    [
        (IdentityKind.PHONE, Shopper("anon", "anonymous")),
        (IdentityKind.PHONE, Shopper("mail", "password", email="a@b.example", email_verified=True)),
        (IdentityKind.EMAIL, Shopper("anon", "anonymous")),
        (IdentityKind.EMAIL, Shopper("unverified", "password", email="a@b.example")),
        (IdentityKind.EMAIL, Shopper("phone", "phone", phone_number=PHONE)),
    ],
)
def test_a_token_without_the_identity_is_refused(identity: IdentityKind, shopper: Shopper) -> None:
    with pytest.raises(IdentityRequired) as refused:
        holder_key(campaign(identity=identity), shopper)

    assert refused.value.error_code == "IDENTITY_REQUIRED"


def test_only_the_allowed_providers_may_claim() -> None:
    sale = campaign(allowed_sign_in_providers=["password", "phone"])
    gate = Gate(set())

    key = admit(
        sale, Shopper("p", "phone", phone_number=PHONE), app_check=gate, app_check_token=None
    )
    with pytest.raises(SignInProviderNotAllowed) as anonymous:
        admit(sale, Shopper("anon", "anonymous"), app_check=gate, app_check_token=None)
    with pytest.raises(SignInProviderNotAllowed):
        admit(sale, Shopper("unknown", None), app_check=gate, app_check_token=None)

    assert key == identity_key(IdentityKind.UID, "p")
    assert anonymous.value.error_code == "SIGN_IN_PROVIDER_NOT_ALLOWED"
    assert gate.asked == []  # a campaign without require_app_check never asks


def test_app_check_is_asked_first_when_the_campaign_requires_it() -> None:
    sale = campaign(require_app_check=True, allowed_sign_in_providers=["phone"])
    gate = Gate({"good"})

    with pytest.raises(AppCheckRequired) as missing:
        admit(sale, Shopper("anon", "anonymous"), app_check=gate, app_check_token=None)
    key = admit(sale, Shopper("p", "phone"), app_check=gate, app_check_token="good")

    assert missing.value.error_code == "APP_CHECK_REQUIRED"
    assert key == identity_key(IdentityKind.UID, "p")
    assert gate.asked == [None, "good"]


def _json(body: dict[str, Any]) -> str:
    return json.dumps(body, default=lambda at: at.isoformat())


def test_campaign_fields_are_validated() -> None:
    """As the API validates them: strictly, from the JSON body."""
    window = {"title": "t", "starts_at": NOW, "ends_at": NOW.replace(hour=12)}

    created = CampaignCreate.model_validate_json(
        _json(
            {
                **window,
                "identity": "phone",
                "allowed_sign_in_providers": ["phone", "password", "phone"],
            }
        )
    )
    reset = CampaignUpdate.model_validate_json(_json({"allowed_sign_in_providers": None}))

    assert created.identity is IdentityKind.PHONE
    assert created.allowed_sign_in_providers == ["password", "phone"]
    assert reset.model_fields_set == {"allowed_sign_in_providers"}
    bad_fields: list[dict[str, Any]] = [
        {"identity": "ip_address"},
        {"allowed_sign_in_providers": []},
        {"allowed_sign_in_providers": ["Pass Word"]},
        {"require_app_check": "sometimes"},
    ]
    for bad in bad_fields:
        with pytest.raises(ValueError, match="validation error"):
            CampaignCreate.model_validate_json(_json({**window, **bad}))
    with pytest.raises(ValueError, match="identity cannot be null"):
        CampaignUpdate.model_validate_json(_json({"identity": None}))
