"""Bot defense through both APIs: what a campaign counts as a person (account, verified phone or
email), which sign-in providers may claim, and App Check with real signed tokens."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from devkit.standins.app_check import DevAppCheckKeys, DevAppCheckServer
from shared.claims.identity import IdentityKind, identity_key
from shared.clock import utcnow
from shared.gcp.firestore import claims_collection
from tests.support.api import ADMIN, auth
from tests.support.stack import CORS_ORIGIN, PROJECT, MakeCampaign

pytestmark = pytest.mark.emulator

PHONE = "+15555550100"


def by_phone(user: str, phone: str = PHONE) -> dict[str, str]:
    return auth(user, sign_in_provider="phone", phone_number=phone)


def by_email(user: str, email: str, *, verified: bool = True) -> dict[str, str]:
    return auth(user, sign_in_provider="password", email=email, email_verified=verified)


def anonymous(user: str) -> dict[str, str]:
    return auth(user, sign_in_provider="anonymous")


def claim(client: FlaskClient, campaign_id: str, headers: dict[str, str]) -> Any:
    return client.post(f"/v1/campaigns/{campaign_id}/claims", headers=headers)


def held_by(db: firestore.Client, campaign_id: str) -> dict[str, str]:
    """claim id -> code, as Firestore holds them."""
    return {s.id: (s.to_dict() or {})["code"] for s in claims_collection(db, campaign_id).stream()}


# --- the campaign fields --------------------------------------------------------------------


def _window(start: timedelta = -timedelta(minutes=1)) -> dict[str, str]:
    now = utcnow()
    return {
        "starts_at": (now + start).isoformat(),
        "ends_at": (now + timedelta(hours=1)).isoformat(),
    }


def test_the_fields_go_through_the_admin_api_and_show_on_the_public_page(
    admin_client: FlaskClient, claim_client: FlaskClient, new_id: str
) -> None:
    body = {
        "campaign_id": new_id,
        "title": "Drop",
        "identity": "phone",
        "allowed_sign_in_providers": ["phone", "password"],
        "require_app_check": True,
        **_window(),
    }

    created = admin_client.post("/v1/campaigns", json=body, headers=ADMIN)
    read = admin_client.get(f"/v1/campaigns/{new_id}", headers=ADMIN)
    public = claim_client.get(f"/v1/campaigns/{new_id}")
    patched = admin_client.patch(
        f"/v1/campaigns/{new_id}",
        json={"allowed_sign_in_providers": None, "require_app_check": False},
        headers=ADMIN,
    )

    fields = ("identity", "allowed_sign_in_providers", "require_app_check")
    expected = {"identity": "phone", "allowed_sign_in_providers": ["password", "phone"]}
    assert created.status_code == 201
    for response in (created, read, public):
        assert {k: response.get_json()[k] for k in fields} == {
            **expected,
            "require_app_check": True,
        }
    assert patched.status_code == 200
    assert {k: patched.get_json()[k] for k in fields} == {
        "identity": "phone",
        "allowed_sign_in_providers": None,
        "require_app_check": False,
    }


def test_defaults_count_the_account_accept_every_provider_and_need_no_app_check(
    admin_client: FlaskClient, new_id: str
) -> None:
    created = admin_client.post(
        "/v1/campaigns", json={"campaign_id": new_id, "title": "Plain", **_window()}, headers=ADMIN
    )

    body = created.get_json()
    assert (body["identity"], body["allowed_sign_in_providers"], body["require_app_check"]) == (
        "uid",
        None,
        False,
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"identity": "ip_address"},
        {"identity": None},
        {"allowed_sign_in_providers": []},
        {"allowed_sign_in_providers": ["Not A Provider"]},
        {"allowed_sign_in_providers": "phone"},
        {"require_app_check": None},
    ],
)
def test_bad_values_are_400(
    admin_client: FlaskClient, make_campaign: MakeCampaign, fields: dict[str, Any]
) -> None:
    campaign_id = make_campaign()

    response = admin_client.patch(f"/v1/campaigns/{campaign_id}", json=fields, headers=ADMIN)

    assert response.status_code == 400
    assert response.get_json()["error_code"] == "REQUEST_VALIDATION_FAILED"


def test_identity_changes_only_until_the_sale_starts(
    admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    later = utcnow() + timedelta(hours=1)
    scheduled = make_campaign(starts_at=later, ends_at=later + timedelta(hours=1))
    running = make_campaign()

    before = admin_client.patch(
        f"/v1/campaigns/{scheduled}", json={"identity": "email"}, headers=ADMIN
    )
    during = admin_client.patch(
        f"/v1/campaigns/{running}", json={"identity": "phone"}, headers=ADMIN
    )
    unchanged = admin_client.patch(
        f"/v1/campaigns/{running}", json={"identity": "uid", "title": "Renamed"}, headers=ADMIN
    )

    assert before.status_code == 200
    assert before.get_json()["identity"] == "email"
    assert during.status_code == 400
    assert "identity" in during.get_json()["error_message"]
    assert unchanged.status_code == 200
    assert unchanged.get_json()["title"] == "Renamed"


# --- identity -------------------------------------------------------------------------------


def test_two_accounts_with_one_phone_get_one_code_between_them(
    claim_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    campaign_id = make_campaign(codes=5, identity="phone")

    first = claim(claim_client, campaign_id, by_phone("phone-acct-1"))
    second = claim(claim_client, campaign_id, by_phone("phone-acct-2"))
    mine = claim_client.get(
        f"/v1/campaigns/{campaign_id}/claims/me", headers=by_phone("phone-acct-2")
    )
    other = claim(claim_client, campaign_id, by_phone("phone-acct-3", "+15555550199"))
    no_phone = claim(claim_client, campaign_id, anonymous("anon-1"))

    assert first.status_code == 201
    assert second.status_code == 200
    assert second.get_json()["code"] == first.get_json()["code"]
    assert mine.status_code == 200
    assert [c["code"] for c in mine.get_json()["claims"]] == [first.get_json()["code"]]
    assert other.status_code == 201
    assert no_phone.status_code == 403
    assert no_phone.get_json()["error_code"] == "IDENTITY_REQUIRED"
    assert held_by(db, campaign_id) == {
        f"{identity_key(IdentityKind.PHONE, PHONE)}-0": first.get_json()["code"],
        f"{identity_key(IdentityKind.PHONE, '+15555550199')}-0": other.get_json()["code"],
    }


def test_a_verified_email_is_one_person_and_an_unverified_one_is_refused(
    claim_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    campaign_id = make_campaign(codes=5, identity="email", max_per_user=2)

    first = claim(claim_client, campaign_id, by_email("mail-1", "Ann@Shop.Example"))
    second = claim(claim_client, campaign_id, by_email("mail-2", "ann@shop.example"))
    third = claim(claim_client, campaign_id, by_email("mail-3", "ann@shop.example"))
    unverified = claim(
        claim_client, campaign_id, by_email("mail-4", "bob@shop.example", verified=False)
    )

    assert [first.status_code, second.status_code, third.status_code] == [201, 201, 200]
    assert unverified.status_code == 403
    assert unverified.get_json()["error_code"] == "IDENTITY_REQUIRED"
    key = identity_key(IdentityKind.EMAIL, "ann@shop.example")
    assert sorted(held_by(db, campaign_id)) == [f"{key}-0", f"{key}-1"]


def test_by_default_each_account_is_a_person(
    claim_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    campaign_id = make_campaign(codes=5)

    first = claim(claim_client, campaign_id, by_phone("uid-acct-1"))
    second = claim(claim_client, campaign_id, by_phone("uid-acct-2"))

    assert [first.status_code, second.status_code] == [201, 201]
    assert sorted(held_by(db, campaign_id)) == sorted(
        [f"{identity_key(IdentityKind.UID, f'uid-acct-{n}')}-0" for n in (1, 2)]
    )


def test_a_retry_with_the_same_key_replays_across_the_identity(
    claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=5, identity="phone", max_per_user=2)
    headers = {**by_phone("replay-1"), "Idempotency-Key": "k-1"}

    first = claim(claim_client, campaign_id, headers)
    retry = claim(claim_client, campaign_id, headers)
    other_account = claim(
        claim_client, campaign_id, {**by_phone("replay-2"), "Idempotency-Key": "k-2"}
    )

    assert [first.status_code, retry.status_code, other_account.status_code] == [201, 201, 201]
    assert retry.get_json() == first.get_json()
    assert other_account.get_json()["code"] != first.get_json()["code"]


# --- sign-in providers ----------------------------------------------------------------------


def test_only_allowed_sign_in_providers_may_claim(
    claim_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    campaign_id = make_campaign(codes=5, allowed_sign_in_providers=["phone", "password"])

    refused = [
        claim(claim_client, campaign_id, anonymous("anon-2")),
        claim(claim_client, campaign_id, auth("custom-1")),  # a custom-token sign-in
    ]
    allowed = claim(claim_client, campaign_id, by_phone("allowed-1"))

    for response in refused:
        assert response.status_code == 403
        assert response.get_json()["error_code"] == "SIGN_IN_PROVIDER_NOT_ALLOWED"
    assert allowed.status_code == 201
    assert len(held_by(db, campaign_id)) == 1


# --- App Check ------------------------------------------------------------------------------

APP_CHECK = "X-Firebase-AppCheck"
BAD_APP_CHECK: dict[str, Callable[[DevAppCheckKeys], str | None]] = {
    "missing": lambda keys: None,
    "forged": lambda keys: DevAppCheckKeys(key_id=keys.key_id).token(project=PROJECT),
    "expired": lambda keys: keys.token(project=PROJECT, lifetime_seconds=-60),
    "other project": lambda keys: keys.token(project="demo-other-shop"),
    "no expiry": lambda keys: keys.token(project=PROJECT, expires=False),
}


def test_a_valid_app_check_token_claims(
    claim_client: FlaskClient, make_campaign: MakeCampaign, app_check_keys: DevAppCheckServer
) -> None:
    campaign_id = make_campaign(codes=2, require_app_check=True)
    token = app_check_keys.keys.token(project=PROJECT)

    response = claim(claim_client, campaign_id, {**auth("checked-1"), APP_CHECK: token})

    assert response.status_code == 201


@pytest.mark.parametrize("make", BAD_APP_CHECK.values(), ids=BAD_APP_CHECK.keys())
def test_claims_without_a_valid_app_check_token_are_401(
    claim_client: FlaskClient,
    make_campaign: MakeCampaign,
    app_check_keys: DevAppCheckServer,
    db: firestore.Client,
    make: Callable[[DevAppCheckKeys], str | None],
) -> None:
    campaign_id = make_campaign(codes=2, require_app_check=True)
    token = make(app_check_keys.keys)
    headers = auth("unchecked-1") | ({APP_CHECK: token} if token is not None else {})

    response = claim(claim_client, campaign_id, headers)

    assert response.status_code == 401
    assert response.get_json()["error_code"] == "APP_CHECK_REQUIRED"
    assert held_by(db, campaign_id) == {}


def test_a_campaign_without_app_check_ignores_the_header(
    claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=2)

    response = claim(claim_client, campaign_id, {**auth("plain-1"), APP_CHECK: "junk"})

    assert response.status_code == 201


def test_browsers_may_send_the_app_check_header(claim_client: FlaskClient) -> None:
    response = claim_client.options(
        "/v1/campaigns/any/claims",
        headers={"Origin": CORS_ORIGIN, "Access-Control-Request-Headers": APP_CHECK},
    )

    assert APP_CHECK in response.headers["Access-Control-Allow-Headers"]
