"""claim_api's HTTP contract, through the real functions-framework app and Firestore emulator."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from devkit import codes as fixture_codes
from devkit.audit import audit_campaign
from shared.campaigns import store as campaign_store
from shared.clock import utcnow
from shared.container import Services
from shared.coupons import store as coupon_store
from shared.gcp.firestore import announcement_ref, campaign_ref
from shared.http import claim_api as claim_routes
from shared.settings import Settings
from tests.support.api import ADMIN, auth, router_client
from tests.support.stack import CORS_ORIGIN, MakeCampaign

pytestmark = pytest.mark.emulator


def claim(client: FlaskClient, campaign_id: str, user: str, **headers: str):  # type: ignore[no-untyped-def]
    return client.post(f"/v1/campaigns/{campaign_id}/claims", headers={**auth(user), **headers})


def test_public_campaign_shows_status_and_remaining(
    claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=3, title="Cyber Monday")

    response = claim_client.get(f"/v1/campaigns/{campaign_id}")

    assert response.status_code == 200
    body = response.get_json()
    assert body["campaign_id"] == campaign_id
    assert body["title"] == "Cyber Monday"
    assert body["status"] == "active"
    assert body["remaining"] == 3
    assert body["starts_at"].endswith("Z")
    assert body["ends_at"].endswith("Z")


@pytest.mark.parametrize("campaign_id", ["no-such-campaign", "__reserved__", "UPPER"])
def test_unknown_or_malformed_campaign_is_404(claim_client: FlaskClient, campaign_id: str) -> None:
    response = claim_client.get(f"/v1/campaigns/{campaign_id}")

    assert response.status_code == 404
    assert response.get_json()["error_code"] == "CAMPAIGN_NOT_FOUND"
    assert response.get_json()["error_message"]


def test_claim_gives_a_code_and_a_repeat_gets_the_same_one(
    claim_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    campaign_id = make_campaign(codes=5)

    first = claim(claim_client, campaign_id, "alice")
    again = claim(claim_client, campaign_id, "alice")

    assert first.status_code == 201
    body = first.get_json()
    assert set(body) == {
        "claim_id",
        "campaign_id",
        "user_id",
        "code",
        "claimed_at",
        "state",
        "expires_at",
        "valid_until",
    }
    assert (body["state"], body["expires_at"]) == ("claimed", None)  # final: no hold_seconds
    assert body["valid_until"] is None  # the campaign's codes never expire
    assert body["user_id"] == "alice"
    assert body["campaign_id"] == campaign_id
    assert body["claimed_at"].endswith("Z")
    assert again.status_code == 200
    assert again.get_json() == body
    coupon = (
        campaign_ref(db, campaign_id)
        .collection("coupons")
        .document(coupon_store.coupon_id_for(body["code"]))
        .get()
        .to_dict()
    )
    assert coupon is not None
    assert coupon["assigned"] is True
    assert coupon["assigned_to"] == "alice"
    assert coupon["claim_id"] == body["claim_id"]


def test_my_claims_lists_what_i_hold(
    claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=5)
    code = claim(claim_client, campaign_id, "bob").get_json()["code"]

    mine = claim_client.get(f"/v1/campaigns/{campaign_id}/claims/me", headers=auth("bob"))
    nothing = claim_client.get(f"/v1/campaigns/{campaign_id}/claims/me", headers=auth("carol"))
    anonymous = claim_client.get(f"/v1/campaigns/{campaign_id}/claims/me")
    unknown = claim_client.get("/v1/campaigns/nope/claims/me", headers=auth("bob"))

    assert mine.status_code == 200
    assert [c["code"] for c in mine.get_json()["claims"]] == [code]
    assert set(mine.get_json()["claims"][0]) == {
        "claim_id",
        "code",
        "claimed_at",
        "state",
        "expires_at",
        "valid_until",
    }
    assert nothing.status_code == 404
    assert nothing.get_json()["error_code"] == "CLAIM_NOT_FOUND"
    assert anonymous.status_code == 401
    assert unknown.get_json()["error_code"] == "CAMPAIGN_NOT_FOUND"


def all_claimed(client: FlaskClient, make_campaign: MakeCampaign, *holders: str) -> str:
    """A campaign with a code for each of `holders`, each of whom has claimed theirs."""
    campaign_id = make_campaign(codes=len(holders))
    for holder in holders:
        assert claim(client, campaign_id, holder).status_code == 201
    return campaign_id


def test_sold_out_is_410_and_recorded_on_the_campaign(
    claim_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    campaign_id = all_claimed(claim_client, make_campaign, "u1", "u2")

    late = claim(claim_client, campaign_id, "u3")
    holder = claim(claim_client, campaign_id, "u1")

    assert late.status_code == 410
    assert late.get_json()["error_code"] == "SOLD_OUT"
    # The holder of a code still gets it back after the sale sold out.
    assert holder.status_code == 200
    campaign = campaign_store.get_campaign(db, campaign_id=campaign_id)
    assert campaign.sold_out is True
    # Announced by the claim that proved it, before count_usage sees any claim.
    marker = announcement_ref(db, campaign_id, f"sold_out.{campaign_id}.2").get()
    assert (marker.get("type"), marker.get("event")["campaign_id"]) == (
        "campaign.sold_out",
        campaign_id,
    )
    public = claim_client.get(f"/v1/campaigns/{campaign_id}").get_json()
    assert public["status"] == "sold_out"
    assert public["remaining"] == 0


def test_new_codes_reopen_a_sold_out_campaign(
    claim_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    campaign_id = all_claimed(claim_client, make_campaign, "u1")
    assert claim(claim_client, campaign_id, "u2").status_code == 410

    fixture_codes.add_codes(db, campaign_id=campaign_id, codes=["FRESH-1"], now=utcnow())

    again = claim(claim_client, campaign_id, "u2")
    assert again.status_code == 201
    assert again.get_json()["code"] == "FRESH-1"


@pytest.mark.parametrize(
    ("window", "paused", "status"),
    [
        ((timedelta(hours=1), timedelta(hours=2)), False, "scheduled"),
        ((-timedelta(hours=2), -timedelta(hours=1)), False, "ended"),
        ((-timedelta(hours=1), timedelta(hours=1)), True, "paused"),
    ],
)
def test_claims_outside_the_window_or_while_paused_are_409(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    window: tuple[timedelta, timedelta],
    paused: bool,
    status: str,
) -> None:
    now = utcnow()
    campaign_id = make_campaign(codes=3, starts_at=now + window[0], ends_at=now + window[1])
    if paused:
        patch = admin_client.patch(
            f"/v1/campaigns/{campaign_id}", json={"paused": True}, headers=ADMIN
        )
        assert patch.status_code == 200

    response = claim(claim_client, campaign_id, "early-bird")

    assert response.status_code == 409
    assert response.get_json()["error_code"] == "CAMPAIGN_NOT_ACTIVE"
    assert claim_client.get(f"/v1/campaigns/{campaign_id}").get_json()["status"] == status


def test_resume_reopens_a_paused_campaign(
    claim_client: FlaskClient, admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=1)
    admin_client.patch(f"/v1/campaigns/{campaign_id}", json={"paused": True}, headers=ADMIN)
    assert claim(claim_client, campaign_id, "u").status_code == 409

    admin_client.patch(f"/v1/campaigns/{campaign_id}", json={"paused": False}, headers=ADMIN)

    assert claim(claim_client, campaign_id, "u").status_code == 201


def test_unknown_campaign_claim_is_404(claim_client: FlaskClient) -> None:
    response = claim(claim_client, "missing-campaign", "u")
    assert response.status_code == 404
    assert response.get_json()["error_code"] == "CAMPAIGN_NOT_FOUND"


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("not json", "text/plain"),
        ("[1, 2]", "application/json"),
        ('{"code": "X"}', "application/json"),
    ],
)
def test_malformed_claim_request_is_400_and_claims_nothing(
    claim_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    body: str,
    content_type: str,
) -> None:
    campaign_id = make_campaign(codes=2)

    response = claim_client.post(
        f"/v1/campaigns/{campaign_id}/claims",
        data=body,
        content_type=content_type,
        headers=auth("mallory"),
    )

    assert response.status_code == 400
    assert response.get_json()["error_code"] == "REQUEST_VALIDATION_FAILED"
    assert audit_campaign(db, campaign_id=campaign_id).claims == 0


def test_bad_idempotency_key_is_400(claim_client: FlaskClient, make_campaign: MakeCampaign) -> None:
    campaign_id = make_campaign(codes=2)
    response = claim(claim_client, campaign_id, "u", **{"Idempotency-Key": "x" * 300})
    assert response.status_code == 400
    assert response.get_json()["error_code"] == "REQUEST_VALIDATION_FAILED"


def test_idempotency_key_replays_the_first_response(
    claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=5, max_per_user=3)

    first = claim(claim_client, campaign_id, "dora", **{"Idempotency-Key": "order-1"})
    retry = claim(claim_client, campaign_id, "dora", **{"Idempotency-Key": "order-1"})
    second = claim(claim_client, campaign_id, "dora", **{"Idempotency-Key": "order-2"})

    assert first.status_code == retry.status_code == 201
    assert retry.get_json() == first.get_json()
    assert second.status_code == 201
    assert second.get_json()["code"] != first.get_json()["code"]


def test_per_user_limit_then_200_with_the_latest_code(
    claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=5, max_per_user=2)

    answers = [claim(claim_client, campaign_id, "erin") for _ in range(3)]

    assert [a.status_code for a in answers] == [201, 201, 200]
    codes = {a.get_json()["code"] for a in answers}
    assert len(codes) == 2
    assert answers[2].get_json() == answers[1].get_json()
    mine = claim_client.get(f"/v1/campaigns/{campaign_id}/claims/me", headers=auth("erin"))
    assert {c["code"] for c in mine.get_json()["claims"]} == codes


def test_contended_is_503_with_retry_after_and_loses_nothing(
    claim_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A commit that keeps failing transiently (here: a transaction elsewhere holds the
    coupon's lock, so the write times out on it) ends in 503 CONTENDED once the attempts are
    spent; the coupon stays free and the shopper's retry gets it."""
    campaign_id = make_campaign(codes=1)
    (coupon,) = list(campaign_ref(db, campaign_id).collection("coupons").stream())
    services = Services(Settings(claim_attempts=1), db=db)
    one_attempt = router_client(claim_routes.router, services)
    holder = db.transaction()
    holder._begin()  # the client has no public "begin"; the read below takes the lock
    coupon.reference.get(transaction=holder)
    try:
        response = claim(one_attempt, campaign_id, "unlucky")
    finally:
        holder._rollback()

    assert response.status_code == 503
    assert response.get_json()["error_code"] == "CONTENDED"
    assert response.headers["Retry-After"] == "1"
    assert audit_campaign(db, campaign_id=campaign_id).claims == 0
    assert claim(claim_client, campaign_id, "unlucky").status_code == 201
    assert audit_campaign(db, campaign_id=campaign_id).ok


def test_cors_for_configured_origins_only(
    claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=1)
    path = f"/v1/campaigns/{campaign_id}/claims"

    preflight = claim_client.options(
        path, headers={"Origin": CORS_ORIGIN, "Access-Control-Request-Method": "POST"}
    )
    stranger = claim_client.options(
        path, headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    )
    actual = claim_client.post(path, headers={**auth("u"), "Origin": CORS_ORIGIN})

    assert preflight.status_code == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == CORS_ORIGIN
    assert "POST" in preflight.headers["Access-Control-Allow-Methods"]
    allowed = {h.strip() for h in preflight.headers["Access-Control-Allow-Headers"].split(",")}
    # What web/codedrop.js sends.
    assert {
        "Authorization",
        "Content-Type",
        "Idempotency-Key",
        "X-Waiting-Room-Ticket",
        "X-Firebase-AppCheck",
    } <= allowed
    assert "Access-Control-Allow-Origin" not in stranger.headers
    assert actual.status_code == 201
    assert actual.headers["Access-Control-Allow-Origin"] == CORS_ORIGIN
    assert "Retry-After" in actual.headers["Access-Control-Expose-Headers"]


def test_unknown_route_and_method_use_the_error_body(claim_client: FlaskClient) -> None:
    missing = claim_client.get("/v2/whatever")
    wrong_method = claim_client.delete("/v1/campaigns/some-campaign")

    assert missing.status_code == 404
    assert missing.get_json()["error_code"] == "NOT_FOUND"
    assert wrong_method.status_code == 405
    assert wrong_method.get_json()["error_code"] == "METHOD_NOT_ALLOWED"
