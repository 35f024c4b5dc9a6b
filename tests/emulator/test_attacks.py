"""The attacks of the hardening review (issue 30), replayed through HTTP on every run: each test
is one attack as an adversary ran it against the local stack, and asserts what the service now
answers and stores (docs/security.md lists the defences)."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from devkit.cleanup import delete_tree
from devkit.codes import add_codes
from devkit.receiver import Receiver
from devkit.standins.push_auth import DevPushKeys
from shared.claims.identity import IdentityKind, identity_key
from shared.clock import utcnow
from shared.container import Services, instance_services
from shared.gcp.firestore import (
    campaign_ref,
    claims_collection,
    coupons_collection,
    deliveries_collection,
    room_instances_collection,
    webhook_ref,
)
from shared.http import admin
from shared.http.shopify import SIGNATURE_HEADER, signature
from shared.settings import get_settings
from shared.types import rfc3339
from tests.support.api import ADMIN, REDEEMER, auth, function_client, router_client
from tests.support.cloudevents import PUSH_KEYS, deliver, published_event
from tests.support.stack import MakeCampaign, Pump

pytestmark = pytest.mark.emulator


@pytest.fixture
def new_campaign_id(db: firestore.Client, cleanup: list[Callable[[], object]]) -> str:
    campaign_id = f"atk-{uuid.uuid4().hex[:10]}"
    cleanup.append(lambda: delete_tree(db, campaign_ref(db, campaign_id)))
    return campaign_id


def claim(client: FlaskClient, campaign_id: str, headers: dict[str, str]) -> Any:
    return client.post(f"/v1/campaigns/{campaign_id}/claims", headers=headers)


# --- 1. one inbox, many verified identities ---------------------------------------------------

GMAIL_ALIASES = (
    "john.doe.sec@gmail.com",
    "johndoesec@gmail.com",
    "johndoesec+1@gmail.com",
    "JohnDoeSec+2@googlemail.com",
)


def test_four_spellings_of_one_gmail_inbox_get_one_code(
    claim_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    campaign_id = make_campaign(codes=5, identity="email", max_per_user=1)

    answers = [
        claim(
            claim_client,
            campaign_id,
            auth(f"alias-{i}", sign_in_provider="password", email=email, email_verified=True),
        )
        for i, email in enumerate(GMAIL_ALIASES)
    ]

    assert [a.status_code for a in answers] == [201, 200, 200, 200]
    assert len({a.get_json()["code"] for a in answers}) == 1
    key = identity_key(IdentityKind.EMAIL, "johndoesec@gmail.com")
    assert [s.id for s in claims_collection(db, campaign_id).stream()] == [f"{key}-0"]


def test_a_campaign_counting_addresses_as_written_keeps_aliases_apart(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    db: firestore.Client,
    new_campaign_id: str,
) -> None:
    created = admin_client.post(
        "/v1/campaigns",
        headers=ADMIN,
        json={
            "campaign_id": new_campaign_id,
            "title": "Tagged inboxes welcome",
            "starts_at": rfc3339(utcnow() - timedelta(minutes=1)),
            "ends_at": rfc3339(utcnow() + timedelta(hours=1)),
            "identity": "email",
            "email_canonicalization": "address",
        },
    )
    campaign_id = new_campaign_id
    add_codes(db, campaign_id=campaign_id, codes=["TAG-1", "TAG-2"], now=utcnow())

    answers = [
        claim(
            claim_client,
            campaign_id,
            auth(f"addr-{i}", sign_in_provider="password", email=email, email_verified=True),
        )
        for i, email in enumerate(GMAIL_ALIASES[:2])
    ]

    assert created.status_code == 201
    assert created.get_json()["email_canonicalization"] == "address"
    assert [a.status_code for a in answers] == [201, 201]


@pytest.mark.parametrize(
    "phone",
    [
        "+\u0661\u0665\u0665\u0665\u0665\u0665\u0665\u0660\u0661\u0660\u0660",  # Arabic-Indic
        "+015555550100",  # a leading zero where the country code goes
    ],
)
def test_a_phone_identity_outside_e164_is_refused(
    claim_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client, phone: str
) -> None:
    campaign_id = make_campaign(codes=2, identity="phone")

    refused = claim(
        claim_client, campaign_id, auth("odd-phone", sign_in_provider="phone", phone_number=phone)
    )

    assert refused.status_code == 403
    assert refused.get_json()["error_code"] == "IDENTITY_INVALID"
    assert list(claims_collection(db, campaign_id).stream()) == []


# --- 2. events pushed to the event functions ----------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as started:
        yield started


def redeemed_sale(claim_client: FlaskClient, admin_client: FlaskClient, campaign_id: str) -> str:
    code = claim(claim_client, campaign_id, auth("buyer-1")).get_json()["code"]
    redeemed = admin_client.post(
        f"/v1/campaigns/{campaign_id}/redemptions",
        json={"code": code, "order_id": "order-1"},
        headers=REDEEMER,
    )
    assert redeemed.status_code == 201
    assert isinstance(code, str)
    return code


def test_a_forged_event_pushed_to_deliver_webhooks_is_sent_nowhere(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    receiver: Receiver,
    pump_events: Pump,
    cleanup: list[Callable[[], object]],
) -> None:
    campaign_id = make_campaign(codes=2)
    created = admin_client.post(
        f"/v1/campaigns/{campaign_id}/webhooks",
        json={"url": receiver.url(), "events": ["coupon.redeemed", "campaign.sold_out"]},
        headers=ADMIN,
    ).get_json()
    cleanup.append(lambda: delete_tree(db, webhook_ref(db, created["webhook_id"])))
    redeemed_sale(claim_client, admin_client, campaign_id)
    (real,) = [e for e in pump_events() if e["type"] == "coupon.redeemed"]
    forged = [
        {**real, "order_id": "attacker-order"},
        {**real, "event_id": real["event_id"] + "x"},
        {
            "event_id": f"sold_out.{campaign_id}.2",
            "type": "campaign.sold_out",
            "campaign_id": campaign_id,
            "occurred_at": real["occurred_at"],
        },
    ]
    client = function_client("deliver_webhooks")

    forged_statuses = [deliver(client, published_event(encode(e))) for e in forged]
    real_status = deliver(client, published_event(encode(real)))
    drain_until_quiet(receiver)

    assert set(forged_statuses) | {real_status} <= {200, 204}
    assert [json.loads(r.body) for r in receiver.received] == [real]
    assert set(deliveries_of(db, created["webhook_id"])) == {real["event_id"]}


def encode(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def drain_until_quiet(receiver: Receiver, seconds: float = 1.0) -> None:
    """deliver_webhooks sends before it answers; a short look for stragglers."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not receiver.received:
        time.sleep(0.05)


def deliveries_of(db: firestore.Client, webhook_id: str) -> list[str]:
    return [s.id for s in deliveries_collection(db, webhook_id).stream()]


@pytest.mark.parametrize("function", ["count_usage", "deliver_webhooks"])
@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer not-a-jwt"},
        PUSH_KEYS.authorization(email="someone-else@demo-codedrop.iam.gserviceaccount.com"),
        PUSH_KEYS.authorization(audience="https://another-function.example"),
        DevPushKeys().authorization(),  # the attacker's own key: same claims, other signature
    ],
    ids=["unsigned", "not-a-jwt", "other-account", "other-audience", "other-key"],
)
def test_a_push_not_signed_as_the_subscription_is_refused(
    emulators: object, make_campaign: MakeCampaign, function: str, headers: dict[str, str]
) -> None:
    campaign_id = make_campaign(codes=1)
    event = {
        "event_id": f"sold_out.{campaign_id}.1",
        "type": "campaign.sold_out",
        "campaign_id": campaign_id,
        "occurred_at": rfc3339(utcnow()),
    }

    answer = function_client(function).post(
        "/",
        data=json.dumps(published_event(encode(event))),
        content_type="application/cloudevents+json",
        headers=headers,
    )

    assert answer.status_code == 401
    assert answer.get_json()["error_code"] == "UNAUTHENTICATED"


# --- 6. webhook targets, titles, App Check, Shopify ---------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://[64:ff9b::a9fe:a9fe]/hook",  # NAT64 of the metadata server
        "http://[::a9fe:a9fe]/hook",  # IPv4-compatible form of it
        "http://[::ffff:a9fe:a9fe]/hook",  # IPv4-mapped form of it
        "http://[2002:a9fe:a9fe::1]/hook",  # 6to4 of it
        "http://[fec0::1]/hook",  # site-local
        "http://[64:ff9b::a00:1]/hook",  # NAT64 of 10.0.0.1
    ],
)
def test_a_webhook_to_a_private_address_in_disguise_is_refused(
    admin_client: FlaskClient, make_campaign: MakeCampaign, url: str
) -> None:
    """Even in a demo- project (which allows loopback receivers) these reach private networks."""
    campaign_id = make_campaign()

    refused = admin_client.post(
        f"/v1/campaigns/{campaign_id}/webhooks",
        json={"url": url, "events": ["coupon.claimed"]},
        headers=ADMIN,
    )

    assert refused.status_code == 400
    assert refused.get_json()["error_code"] == "WEBHOOK_URL_NOT_ALLOWED"


@pytest.mark.parametrize(
    "title",
    [
        "Line\u2028separator",  # Zl
        "Paragraph\u2029separator",  # Zp
        "Zero\u200bwidth",  # Cf
        "Soft\u00adhyphen",  # Cf
        "Word\u2060joiner",  # Cf
        "Private\ue000use",  # Co
        "Unassigned\u0378",  # Cn
    ],
)
def test_a_title_with_invisible_or_line_breaking_characters_is_refused(
    admin_client: FlaskClient, new_campaign_id: str, title: str
) -> None:
    body = {
        "campaign_id": new_campaign_id,
        "title": title,
        "starts_at": rfc3339(utcnow()),
        "ends_at": rfc3339(utcnow() + timedelta(hours=1)),
    }

    refused = admin_client.post("/v1/campaigns", json=body, headers=ADMIN)

    assert refused.status_code == 400
    assert refused.get_json()["error_code"] == "REQUEST_VALIDATION_FAILED"
    assert admin_client.get(f"/v1/campaigns/{new_campaign_id}", headers=ADMIN).status_code == 404


def test_an_app_check_refusal_never_echoes_the_attackers_token(
    claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=1, require_app_check=True)
    marker = "EVIL-KID-<img src=x>"
    header = base64.urlsafe_b64encode(json.dumps({"alg": "RS256", "kid": marker}).encode())
    token = header.decode().rstrip("=") + ".e30.c2ln"

    refused = claim_client.post(
        f"/v1/campaigns/{campaign_id}/claims",
        headers={**auth("app-check-attacker"), "X-Firebase-AppCheck": token},
    )

    assert refused.status_code == 401
    assert refused.get_json() == {
        "error_code": "APP_CHECK_REQUIRED",
        "error_message": "Invalid App Check token.",
    }


SHOP = "codedrop-attacks.myshopify.com"


def shopify_order(
    client: FlaskClient, key: bytes, codes: list[str], *, shop: str | None, order_id: int = 7001
) -> Any:
    body = json.dumps({"id": order_id, "discount_codes": [{"code": c} for c in codes]}).encode()
    headers = {
        SIGNATURE_HEADER: signature(body, key),
        "X-Shopify-Topic": "orders/create",
        "Content-Type": "application/json",
    }
    if shop is not None:
        headers["X-Shopify-Shop-Domain"] = shop
    return client.post("/v1/webhooks/shopify/orders", data=body, headers=headers)


@pytest.fixture
def one_shop(db: firestore.Client) -> tuple[FlaskClient, bytes]:
    """admin_api of a deployment configured for one shop (the routes of the function, with
    this setting)."""
    settings = get_settings().model_copy(update={"shopify_shop_domain": SHOP})
    key = settings.shopify_webhook_key
    assert key is not None
    return router_client(admin.router, Services(settings, db=db)), key


@pytest.mark.parametrize("shop", ["another-shop.myshopify.com", None])
def test_a_signed_order_of_another_shop_redeems_nothing(
    claim_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    one_shop: tuple[FlaskClient, bytes],
    shop: str | None,
) -> None:
    client, key = one_shop
    campaign_id = make_campaign(codes=1)
    code = claim(claim_client, campaign_id, auth("shop-buyer")).get_json()["code"]

    refused = shopify_order(client, key, [code], shop=shop)
    accepted = shopify_order(client, key, [code], shop=SHOP.upper())

    assert refused.status_code == 401
    assert refused.get_json()["error_code"] == "INVALID_SIGNATURE"
    assert accepted.status_code == 200
    assert [r["outcome"] for r in accepted.get_json()["results"]] == ["redeemed"]


def test_a_code_held_in_two_campaigns_is_redeemed_in_one_only(
    claim_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    one_shop: tuple[FlaskClient, bytes],
) -> None:
    """The same code text in two campaigns, claimed by two shoppers: one order burns one."""
    client, key = one_shop
    code = f"DUP-{uuid.uuid4().hex[:8].upper()}"
    first, second = make_campaign(codes=[code]), make_campaign(codes=[code])
    assert claim(claim_client, first, auth("early-shopper")).status_code == 201
    assert claim(claim_client, second, auth("later-shopper")).status_code == 201

    answers = [shopify_order(client, key, [code], shop=SHOP) for _ in range(2)]

    results = [a.get_json()["results"] for a in answers]
    assert results[0] == [{"code": code, "campaign_id": first, "outcome": "redeemed"}]
    assert results[1] == [{"code": code, "campaign_id": first, "outcome": "already_redeemed"}]
    states = {
        c: [(s.to_dict() or {}).get("state") for s in coupons_collection(db, c).stream()]
        for c in (first, second)
    }
    assert states == {first: ["redeemed"], second: ["claimed"]}


# --- 5. early birds at the start of a sale --------------------------------------------------------


def test_tries_before_the_start_earn_no_place_ahead_of_the_starts_arrivals(
    admin_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    """Four accounts try before the start (the attack tried 23 s early), four arrive once it
    has started; the early ones then try again. The early tries spent no admission and earned
    no ticket; everyone's place is drawn in the start window's range, whoever polled first."""
    campaign_id = make_campaign(
        codes=20,
        waiting_room_enabled=True,
        admissions_per_second=0.1,
        starts_at=utcnow() + timedelta(seconds=23),
    )
    early = [f"early-{i}" for i in range(4)]
    late = [f"late-{i}" for i in range(4)]
    browsers = {user: function_client("claim_api") for user in early + late}

    def try_claim(user: str) -> Any:
        return browsers[user].post(f"/v1/campaigns/{campaign_id}/claims", headers=auth(user))

    before = [try_claim(user) for user in early]
    rooms_before = [s.id for s in room_instances_collection(db, campaign_id).stream()]
    start = utcnow().replace(microsecond=0)
    started = admin_client.patch(
        f"/v1/campaigns/{campaign_id}", json={"starts_at": rfc3339(start)}, headers=ADMIN
    )
    after = {user: try_claim(user) for user in late + early}

    assert {b.status_code for b in before} == {409}
    assert {b.get_json()["error_code"] for b in before} == {"CAMPAIGN_NOT_ACTIVE"}
    assert not any("ticket" in b.get_json() or b.headers.get("Set-Cookie") for b in before)
    assert rooms_before == []  # no instance of the room exists: it admitted nobody
    assert started.status_code == 200
    signer = instance_services().room.signer
    places = {}
    for user, answer in after.items():
        assert answer.status_code == 429, answer.get_json()  # the window's places are to come
        ticket = signer.verify(answer.get_json()["ticket"], campaign_id=campaign_id, user_id=user)
        places[user] = ticket.first_attempt
    window = get_settings().waiting_room_start_window_seconds
    # Nobody's place is their try before the start, nor earlier than the window's draw.
    assert min(places.values()) >= start.timestamp() + window
