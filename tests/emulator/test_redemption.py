"""Redemption on the emulators: a checkout looks a code up and redeems it for an order, at most
once and idempotently on the order; Shopify's orders/create webhook does the same for the
discount codes of a signed order."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from devkit.audit import audit_campaign
from shared.container import instance_services
from shared.http.shopify import SIGNATURE_HEADER, TOPIC_HEADER, signature
from tests.support.api import ADMIN, REDEEMER, auth
from tests.support.stack import ROOT, MakeCampaign, Pump

pytestmark = pytest.mark.emulator

ORDER = json.loads((ROOT / "tests" / "fixtures" / "shopify_order_created.json").read_text())
WEBHOOK = "/v1/webhooks/shopify/orders"


def claim(client: FlaskClient, campaign_id: str, user: str) -> dict[str, Any]:
    response = client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth(user))
    assert response.status_code == 201
    body: dict[str, Any] = response.get_json()
    return body


def redeem(client: FlaskClient, campaign_id: str, code: str, order_id: str, headers: Any = None):  # type: ignore[no-untyped-def]
    return client.post(
        f"/v1/campaigns/{campaign_id}/redemptions",
        json={"code": code, "order_id": order_id},
        headers=REDEEMER if headers is None else headers,
    )


def status(client: FlaskClient, campaign_id: str, code: str) -> Any:
    return client.get(f"/v1/campaigns/{campaign_id}/codes/{code}", headers=REDEEMER)


def test_a_code_is_looked_up_in_each_of_its_states(
    claim_client: FlaskClient, admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=["LOOK-1", "LOOK-2"])
    held = make_campaign(codes=["HOLD-1"], hold_seconds=600)
    final = claim(claim_client, campaign_id, "finn")["code"]
    free = ({"LOOK-1", "LOOK-2"} - {final}).pop()
    holder = claim(claim_client, held, "hana")

    available = status(admin_client, campaign_id, free).get_json()
    claimed = status(admin_client, campaign_id, final).get_json()
    on_hold = status(admin_client, held, "HOLD-1").get_json()
    redeem(admin_client, campaign_id, final, "order-9")
    redeemed = status(admin_client, campaign_id, final).get_json()
    missing = status(admin_client, campaign_id, "NO-SUCH")

    assert available == {
        "code": free,
        "state": "available",
        "user_id": None,
        "claimed_at": None,
        "expires_at": None,
        "redeemed_at": None,
        "order_id": None,
    }
    assert (claimed["state"], claimed["user_id"], claimed["expires_at"]) == (
        "claimed",
        "finn",
        None,
    )
    assert claimed["claimed_at"].endswith("Z")
    assert (on_hold["state"], on_hold["user_id"]) == ("held", "hana")
    assert on_hold["expires_at"] == holder["expires_at"]
    assert (redeemed["state"], redeemed["order_id"]) == ("redeemed", "order-9")
    assert redeemed["redeemed_at"].endswith("Z")
    assert missing.status_code == 404
    assert missing.get_json()["error_code"] == "CODE_NOT_FOUND"


def test_redemption_is_idempotent_on_the_order_and_refuses_another(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    pump_events: Pump,
) -> None:
    campaign_id = make_campaign(codes=2, hold_seconds=600)
    code = claim(claim_client, campaign_id, "rosa")["code"]

    first = redeem(admin_client, campaign_id, code, "order-1")
    again = redeem(admin_client, campaign_id, code, "order-1")
    other = redeem(admin_client, campaign_id, code, "order-2")
    by_admin = redeem(admin_client, campaign_id, code, "order-1", headers=ADMIN)
    events = pump_events()

    assert first.status_code == 201
    body = first.get_json()
    assert set(body) == {"code", "order_id", "user_id", "redeemed_at"}
    assert (body["code"], body["order_id"], body["user_id"]) == (code, "order-1", "rosa")
    assert again.status_code == 200
    assert again.get_json() == body
    assert by_admin.status_code == 200
    assert other.status_code == 409
    assert other.get_json()["error_code"] == "CODE_ALREADY_REDEEMED"
    redeemed = [e for e in events if e["type"] == "coupon.redeemed"]
    assert [(e["order_id"], e["user_id"], e["was_held"]) for e in redeemed] == [
        ("order-1", "rosa", True)
    ]
    mine = claim_client.get(f"/v1/campaigns/{campaign_id}/claims/me", headers=auth("rosa"))
    (listed,) = mine.get_json()["claims"]
    assert (listed["state"], listed["expires_at"]) == ("redeemed", None)
    report = audit_campaign(db, campaign_id=campaign_id)
    assert report.ok, report.violations
    assert report.redeemed == 1


def test_a_code_nobody_holds_is_not_redeemed(
    admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=["FREE-1"])

    free = redeem(admin_client, campaign_id, "FREE-1", "order-1")
    unknown = redeem(admin_client, campaign_id, "NOPE-1", "order-1")

    assert free.status_code == 409
    assert free.get_json()["error_code"] == "CODE_NOT_CLAIMED"
    assert unknown.status_code == 404
    assert unknown.get_json()["error_code"] == "CODE_NOT_FOUND"
    assert status(admin_client, campaign_id, "FREE-1").get_json()["state"] == "available"


@pytest.mark.parametrize(
    "body",
    [
        {"code": "X"},
        {"order_id": "o"},
        {"code": "", "order_id": "o"},
        {"code": "X", "order_id": "has spaces"},
        {"code": "X", "order_id": "o", "extra": 1},
        {"code": "X" * 65, "order_id": "o"},
    ],
)
def test_an_invalid_redemption_is_400(
    admin_client: FlaskClient, make_campaign: MakeCampaign, body: dict[str, object]
) -> None:
    campaign_id = make_campaign(codes=1)
    response = admin_client.post(
        f"/v1/campaigns/{campaign_id}/redemptions", json=body, headers=REDEEMER
    )
    assert response.status_code == 400
    assert response.get_json()["error_code"] == "REQUEST_VALIDATION_FAILED"


def test_checkout_routes_need_the_redeemer_or_admin_claim(
    admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=1)
    path = f"/v1/campaigns/{campaign_id}/codes/X"

    assert admin_client.get(path, headers=auth("shopper")).status_code == 403
    assert admin_client.get(path).status_code == 401
    assert admin_client.get(path, headers=ADMIN).status_code == 404
    assert admin_client.get(path, headers=REDEEMER).status_code == 404
    assert admin_client.get(f"/v1/campaigns/{campaign_id}", headers=REDEEMER).status_code == 403


# --- Shopify -----------------------------------------------------------------------------------
def signed(order: dict[str, Any], *, key: bytes | None = None) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(order, indent=2).encode()  # Shopify's exact bytes are what gets signed
    key = key or instance_services().settings.shopify_webhook_key
    assert key is not None
    return body, {
        SIGNATURE_HEADER: signature(body, key),
        TOPIC_HEADER: "orders/create",
        "Content-Type": "application/json",
        "X-Shopify-Shop-Domain": "example-outdoor.myshopify.com",
    }


def order_with(codes: list[str], order_id: int = 5843917602883) -> dict[str, Any]:
    order = dict(ORDER, id=order_id)
    order["discount_codes"] = [{"code": c, "amount": "18.00", "type": "percentage"} for c in codes]
    return order


def test_a_signed_shopify_order_redeems_its_discount_codes(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
) -> None:
    fixture_code = ORDER["discount_codes"][0]["code"]
    campaign_id = make_campaign(codes=[fixture_code], hold_seconds=600)
    other_id = make_campaign(codes=["BF26-OTHER-1"])
    claim(claim_client, campaign_id, "jordan")
    claim(claim_client, other_id, "jordan")
    order = dict(ORDER, discount_codes=[*ORDER["discount_codes"], {"code": "BF26-OTHER-1"}])
    body, headers = signed(order)

    response = admin_client.post(WEBHOOK, data=body, headers=headers)
    redelivered = admin_client.post(WEBHOOK, data=body, headers=headers)

    assert response.status_code == 200
    assert response.get_json() == {
        "order_id": "5843917602883",
        "results": [
            {"code": fixture_code, "campaign_id": campaign_id, "outcome": "redeemed"},
            {"code": "BF26-OTHER-1", "campaign_id": other_id, "outcome": "redeemed"},
        ],
        "ignored_topic": None,
    }
    assert redelivered.status_code == 200
    assert {r["outcome"] for r in redelivered.get_json()["results"]} == {"already_redeemed"}
    looked_up = status(admin_client, campaign_id, fixture_code).get_json()
    assert (looked_up["state"], looked_up["order_id"], looked_up["user_id"]) == (
        "redeemed",
        "5843917602883",
        "jordan",
    )
    assert audit_campaign(db, campaign_id=campaign_id).ok


def test_shopify_codes_nobody_holds_or_redeemed_elsewhere_are_reported_not_failed(
    claim_client: FlaskClient, admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=["SH-FREE", "SH-TAKEN"])
    holder = claim(claim_client, campaign_id, "kim")["code"]
    redeem(admin_client, campaign_id, holder, "first-order")
    body, headers = signed(order_with([holder, "SH-NOBODY-HAS-THIS"], order_id=42))
    free = ({"SH-FREE", "SH-TAKEN"} - {holder}).pop()
    free_body, free_headers = signed(order_with([free], order_id=43))

    response = admin_client.post(WEBHOOK, data=body, headers=headers)
    free_response = admin_client.post(WEBHOOK, data=free_body, headers=free_headers)

    assert response.status_code == 200
    assert [r["outcome"] for r in response.get_json()["results"]] == [
        "CODE_ALREADY_REDEEMED",
        "CODE_NOT_FOUND",
    ]
    assert free_response.get_json()["results"][0]["outcome"] == "CODE_NOT_CLAIMED"


def claimed_and_ordered(
    claim_client: FlaskClient, make_campaign: MakeCampaign, code: str
) -> tuple[str, bytes, dict[str, str]]:
    """A campaign whose one code a shopper claimed, and Shopify's signed order using it."""
    campaign_id = make_campaign(codes=[code])
    claim(claim_client, campaign_id, "sam")
    return campaign_id, *signed(order_with([code]))


def test_shopify_deliveries_without_a_valid_signature_are_401_and_redeem_nothing(
    claim_client: FlaskClient, admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id, body, headers = claimed_and_ordered(claim_client, make_campaign, "SIG-1")
    missing = {k: v for k, v in headers.items() if k != SIGNATURE_HEADER}
    wrong_key = signed(order_with(["SIG-1"]), key=b"someone-elses-secret-key")[1]
    tampered = body.replace(b"5843917602883", b"5843917602884")

    answers = [
        admin_client.post(WEBHOOK, data=body, headers=missing),
        admin_client.post(WEBHOOK, data=body, headers=wrong_key),
        admin_client.post(WEBHOOK, data=tampered, headers=headers),
        admin_client.post(WEBHOOK, data=body, headers={**headers, SIGNATURE_HEADER: "%%%"}),
    ]

    assert [a.status_code for a in answers] == [401, 401, 401, 401]
    assert {a.get_json()["error_code"] for a in answers} == {"INVALID_SIGNATURE"}
    assert status(admin_client, campaign_id, "SIG-1").get_json()["state"] == "claimed"


def test_other_shopify_topics_are_acknowledged_and_ignored(
    claim_client: FlaskClient, admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id, body, headers = claimed_and_ordered(claim_client, make_campaign, "TOPIC-1")

    response = admin_client.post(
        WEBHOOK, data=body, headers={**headers, TOPIC_HEADER: "orders/updated"}
    )

    assert response.status_code == 200
    assert response.get_json() == {
        "order_id": "5843917602883",
        "results": [],
        "ignored_topic": "orders/updated",
    }
    assert status(admin_client, campaign_id, "TOPIC-1").get_json()["state"] == "claimed"


def test_a_signed_body_that_is_not_an_order_is_400(admin_client: FlaskClient) -> None:
    body, headers = signed({"id": 1, "discount_codes": "BF26"})
    response = admin_client.post(WEBHOOK, data=body, headers=headers)
    assert response.status_code == 400
    assert response.get_json()["error_code"] == "REQUEST_VALIDATION_FAILED"
