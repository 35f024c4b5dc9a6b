"""Webhooks against a receiver in the test process: subscriptions through admin_api, the
signature, retries after 500s and timeouts, deduplication by event_id, the per-endpoint
throttle, an endpoint down for a while, private addresses refused, and a sale's worth of events.

Most tests drive the webhook service of a container with short timings (retries after ~0.1 s,
0.5 s timeouts) so a day of retries fits in seconds; the first and the last go through
functions/main.py's deliver_webhooks as Pub/Sub push calls it.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.api_core.exceptions import DeadlineExceeded
from google.cloud import firestore
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient
from pydantic import SecretStr

from devkit.cleanup import delete_tree
from devkit.firestore_rpcs import RpcCounter
from devkit.pubsub import pull_all
from devkit.receiver import Received, Receiver
from scripts.localstack.message_filter import MessageFilter, passes
from shared.claims.policy import Shopper
from shared.claims.redemption import order_key
from shared.clock import utcnow
from shared.container import Services, instance_services
from shared.coupons.store import coupon_id_for
from shared.errors import TooManyWebhooks, WebhookUrlNotAllowed
from shared.events import models as events
from shared.events.bus import EventBus
from shared.events.models import (
    CouponClaimed,
    CouponReversed,
    CouponVoided,
    EventType,
    claimed_event_id,
    encode_event,
    reversed_event_id,
    voided_event_id,
)
from shared.gcp.firestore import (
    campaign_webhooks_ref,
    claims_collection,
    deliveries_collection,
    redeemed_order_ref,
    reversals_collection,
    webhook_ref,
)
from shared.settings import get_settings
from shared.types import OnCancel
from shared.webhooks import marking
from shared.webhooks.guard import resolve_host
from shared.webhooks.models import (
    MAX_WEBHOOKS_PER_CAMPAIGN,
    DeliveryState,
    WebhookCreate,
    WebhookCreated,
)
from shared.webhooks.service import WebhookService
from shared.webhooks.signing import verify
from tests.support.api import ADMIN, auth, function_client
from tests.support.cloudevents import deliver, published_event
from tests.support.stack import EVENTS_TOPIC, PROJECT, MakeCampaign, reset_instance

pytestmark = pytest.mark.emulator

FAST = {
    "webhook_timeout_seconds": 0.5,
    "webhook_retry_base_seconds": 0.2,
    "webhook_drain_seconds": 10.0,
    "webhook_linger_seconds": 0.0,
}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as started:
        yield started


def _services(db: firestore.Client, **settings: Any) -> Services:
    return Services(get_settings().model_copy(update={**FAST, **settings}), db=db)


@pytest.fixture
def webhooks(db: firestore.Client) -> WebhookService:
    return _services(db).webhooks


@pytest.fixture
def forget_webhook(
    db: firestore.Client, cleanup: list[Callable[[], object]]
) -> Callable[[str], None]:
    def forget(webhook_id: str) -> None:
        cleanup.append(lambda: delete_tree(db, webhook_ref(db, webhook_id)))

    return forget


Subscribe = Callable[..., WebhookCreated]


@pytest.fixture
def subscribe(forget_webhook: Callable[[str], None]) -> Subscribe:
    def make(service: WebhookService, campaign_id: str, url: str, **fields: Any) -> WebhookCreated:
        fields.setdefault("events", [EventType.COUPON_CLAIMED])
        created = service.subscribe(campaign_id=campaign_id, data=WebhookCreate(url=url, **fields))
        forget_webhook(created.webhook_id)
        return created

    return make


@dataclass(frozen=True)
class Endpoint:
    """The receiver, subscribed to a new campaign's claims: where a delivery test starts."""

    db: firestore.Client
    webhooks: WebhookService
    receiver: Receiver
    campaign_id: str
    webhook: WebhookCreated

    def deliveries(self) -> dict[str, dict[str, Any]]:
        return deliveries(self.db, self.webhook.webhook_id)


MakeEndpoint = Callable[..., Endpoint]


@pytest.fixture
def endpoint(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    receiver: Receiver,
    webhooks: WebhookService,
    subscribe: Subscribe,
) -> MakeEndpoint:
    def make(**limits: int) -> Endpoint:
        campaign_id = make_campaign()
        webhook = subscribe(webhooks, campaign_id, receiver.url(), **limits)
        return Endpoint(db, webhooks, receiver, campaign_id, webhook)

    return make


StoredBeforeTheList = Callable[[str, int], list[str]]


@pytest.fixture
def stored_before_the_list(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    receiver: Receiver,
    webhooks: WebhookService,
    subscribe: Subscribe,
    forget_webhook: Callable[[str], None],
) -> StoredBeforeTheList:
    """`count` webhooks of a campaign stored as they all were before its list existed: the
    document a subscription writes, without the campaign's list naming it. Their ids."""

    def make(campaign_id: str, count: int) -> list[str]:
        model = subscribe(webhooks, make_campaign(), receiver.url())
        stored = webhook_ref(db, model.webhook_id).get().to_dict() or {}
        legacy = [f"wh_legacy{uuid.uuid4().hex[:8]}" for _ in range(count)]
        for webhook_id in legacy:
            forget_webhook(webhook_id)
            webhook_ref(db, webhook_id).create({**stored, "campaign_id": campaign_id})
        return legacy

    return make


def claimed(campaign_id: str, n: int) -> CouponClaimed:
    """A claim's event, its claim written as the engine commits it: deliver_webhooks sends only
    events their records back (cleaned up with the campaign)."""
    claim_id, now = f"c{n}", utcnow()
    record = {
        "campaign_id": campaign_id,
        "user_id": f"shopper-{n}",
        "coupon_id": f"coupon-{n}",
        "code": f"CODE-{n}",
        "slot": 0,
        "claimed_at": now,
    }
    claims_collection(instance_services().db, campaign_id).document(claim_id).set(record)
    return CouponClaimed(
        event_id=claimed_event_id(campaign_id, claim_id, now, hold=False),
        campaign_id=campaign_id,
        occurred_at=now,
        coupon_id=record["coupon_id"],
        user_id=record["user_id"],
        claim_id=claim_id,
    )


def deliveries(db: firestore.Client, webhook_id: str) -> dict[str, dict[str, Any]]:
    return {s.id: s.to_dict() or {} for s in deliveries_collection(db, webhook_id).stream()}


def drain_until(service: WebhookService, done: Callable[[], bool], *, timeout: float = 20) -> None:
    """Run the scheduled drain (as the sweep does) until `done`, as retries come due."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "deliveries did not complete in time"
        service.drain_due()
        time.sleep(0.05)


def answers(*script: tuple[int, float]) -> Callable[[Received, int], tuple[int, float]]:
    """The n-th request for an event gets script[n] (the last one once the script runs out)."""

    def answer(request: Received, earlier: int) -> tuple[int, float]:
        return script[min(earlier, len(script) - 1)]

    return answer


# --- subscriptions ------------------------------------------------------------------------------


def test_a_marketer_subscribes_lists_and_deletes_a_webhook(
    admin_client: FlaskClient,
    db: firestore.Client,
    make_campaign: MakeCampaign,
    forget_webhook: Callable[[str], None],
) -> None:
    campaign_id = make_campaign()
    base = f"/v1/campaigns/{campaign_id}/webhooks"
    body = {"url": "http://127.0.0.1:9/hook", "events": ["coupon.claimed", "campaign.sold_out"]}

    created = admin_client.post(base, json=body, headers=ADMIN)
    assert created.status_code == 201
    webhook = created.get_json()
    forget_webhook(webhook["webhook_id"])
    listed = admin_client.get(base, headers=ADMIN).get_json()["webhooks"]
    stored = webhook_ref(db, webhook["webhook_id"]).get().to_dict() or {}
    log = admin_client.get(f"{base}/{webhook['webhook_id']}/deliveries", headers=ADMIN)
    deleted = admin_client.delete(f"{base}/{webhook['webhook_id']}", headers=ADMIN)
    again = admin_client.delete(f"{base}/{webhook['webhook_id']}", headers=ADMIN)

    assert webhook["secret"].startswith("whsec_")
    assert webhook["events"] == ["campaign.sold_out", "coupon.claimed"]
    assert (webhook["max_per_second"], webhook["max_in_flight"]) == (10, 4)
    assert [w["webhook_id"] for w in listed] == [webhook["webhook_id"]]
    assert "secret" not in listed[0]
    # Stored sealed: the database never holds the secret itself.
    assert webhook["secret"] not in json.dumps(stored, default=str)
    assert log.status_code == 200
    assert log.get_json() == {"webhook_id": webhook["webhook_id"], "deliveries": []}
    assert deleted.status_code == 204
    assert admin_client.get(base, headers=ADMIN).get_json() == {"webhooks": []}
    assert again.status_code == 404
    assert again.get_json()["error_code"] == "WEBHOOK_NOT_FOUND"


@pytest.mark.parametrize(
    ("body", "status", "error_code"),
    [
        (
            {"url": "https://169.254.169.254/computeMetadata/v1/", "events": ["coupon.claimed"]},
            400,
            "WEBHOOK_URL_NOT_ALLOWED",
        ),
        (
            {"url": "https://10.0.0.8/hook", "events": ["coupon.claimed"]},
            400,
            "WEBHOOK_URL_NOT_ALLOWED",
        ),
        (
            {"url": "ftp://127.0.0.1/hook", "events": ["coupon.claimed"]},
            400,
            "WEBHOOK_URL_NOT_ALLOWED",
        ),
        ({"url": "http://127.0.0.1:9/", "events": []}, 400, "REQUEST_VALIDATION_FAILED"),
        (
            {"url": "http://127.0.0.1:9/", "events": ["coupon.stolen"]},
            400,
            "REQUEST_VALIDATION_FAILED",
        ),
        (
            {"url": "http://127.0.0.1:9/", "events": ["coupon.claimed"], "max_per_second": 0},
            400,
            "REQUEST_VALIDATION_FAILED",
        ),
        (
            {"url": "http://127.0.0.1:9/", "events": ["coupon.claimed"], "secret": "mine"},
            400,
            "REQUEST_VALIDATION_FAILED",
        ),
    ],
)
def test_bad_subscriptions_are_refused(
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    body: dict[str, Any],
    status: int,
    error_code: str,
) -> None:
    campaign_id = make_campaign()

    response = admin_client.post(f"/v1/campaigns/{campaign_id}/webhooks", json=body, headers=ADMIN)

    assert response.status_code == status
    assert response.get_json()["error_code"] == error_code


def test_webhooks_of_another_or_an_unknown_campaign_are_not_found(
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    webhooks: WebhookService,
    subscribe: Subscribe,
) -> None:
    mine, other = make_campaign(), make_campaign()
    webhook = subscribe(webhooks, mine, "http://127.0.0.1:9/")
    body = {"url": "http://127.0.0.1:9/", "events": ["coupon.claimed"]}

    foreign = admin_client.get(
        f"/v1/campaigns/{other}/webhooks/{webhook.webhook_id}/deliveries", headers=ADMIN
    )
    unknown = admin_client.post("/v1/campaigns/no-such-sale/webhooks", json=body, headers=ADMIN)
    shopper = admin_client.get(f"/v1/campaigns/{mine}/webhooks", headers=auth("shopper-1"))

    assert foreign.status_code == 404
    assert foreign.get_json()["error_code"] == "WEBHOOK_NOT_FOUND"
    assert unknown.get_json()["error_code"] == "CAMPAIGN_NOT_FOUND"
    assert shopper.status_code == 403


def test_a_campaign_never_has_more_webhooks_than_allowed_however_many_subscribe_at_once(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    webhooks: WebhookService,
    forget_webhook: Callable[[str], None],
) -> None:
    campaign_id = make_campaign()

    def attempt(n: int) -> str | None:
        data = WebhookCreate(url=f"http://127.0.0.1:9/{n}", events=[EventType.COUPON_CLAIMED])
        try:
            created = webhooks.subscribe(campaign_id=campaign_id, data=data)
        except TooManyWebhooks:
            return None
        forget_webhook(created.webhook_id)
        return created.webhook_id

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(attempt, range(MAX_WEBHOOKS_PER_CAMPAIGN + 4)))

    created = {w for w in results if w is not None}
    assert len(created) == MAX_WEBHOOKS_PER_CAMPAIGN
    listed = webhooks.list_webhooks(campaign_id=campaign_id).webhooks
    assert {w.webhook_id for w in listed} == created
    listing = campaign_webhooks_ref(db, campaign_id).get().to_dict() or {}
    assert set(listing["webhooks"]) == created


def test_an_event_finds_its_webhooks_by_reference_not_by_a_query(endpoint: MakeEndpoint) -> None:
    """The campaign's list is one read whatever the database holds; the emulator answers a
    query by scanning every document."""
    hooked = endpoint()
    campaign_id, webhook = hooked.campaign_id, hooked.webhook
    counted_db = firestore.Client(project=PROJECT)
    service = _services(counted_db).webhooks

    with RpcCounter(counted_db) as rpcs:
        matched = [
            service.record(event, encode_event(event))
            for event in (
                claimed(campaign_id, 1),
                claimed(campaign_id, 2),
            )
        ]
        counts = rpcs.snapshot()

    assert matched == [[webhook.webhook_id], [webhook.webhook_id]]
    assert "run_query" not in counts.calls
    assert counts.reads_by_collection == {"campaign_webhooks": 2}
    assert set(hooked.deliveries()) == {
        "claimed." + campaign_id + ".c1",
        "claimed." + campaign_id + ".c2",
    }


def test_webhooks_from_before_the_campaign_list_still_get_their_events(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    receiver: Receiver,
    webhooks: WebhookService,
    subscribe: Subscribe,
    stored_before_the_list: StoredBeforeTheList,
) -> None:
    """A webhook stored without its campaign's list (as they all were before it): the first
    event writes the list from a query, and later changes keep it."""
    campaign_id = make_campaign()
    [legacy_id] = stored_before_the_list(campaign_id, 1)

    first = webhooks.record(claimed(campaign_id, 1), encode_event(claimed(campaign_id, 1)))
    added = subscribe(webhooks, campaign_id, receiver.url())
    webhooks.unsubscribe(campaign_id=campaign_id, webhook_id=legacy_id)
    later = webhooks.record(claimed(campaign_id, 2), encode_event(claimed(campaign_id, 2)))

    assert first == [legacy_id]
    assert later == [added.webhook_id]
    listing = campaign_webhooks_ref(db, campaign_id).get().to_dict() or {}
    assert listing == {"webhooks": {added.webhook_id: ["coupon.claimed"]}}


def test_a_webhook_from_before_the_list_counts_toward_the_limit_and_can_be_deleted(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    receiver: Receiver,
    webhooks: WebhookService,
    subscribe: Subscribe,
    stored_before_the_list: StoredBeforeTheList,
) -> None:
    campaign_id = make_campaign()
    legacy = stored_before_the_list(campaign_id, MAX_WEBHOOKS_PER_CAMPAIGN)

    with pytest.raises(TooManyWebhooks):
        subscribe(webhooks, campaign_id, receiver.url())
    webhooks.unsubscribe(campaign_id=campaign_id, webhook_id=legacy[0])
    added = subscribe(webhooks, campaign_id, receiver.url())

    listing = campaign_webhooks_ref(db, campaign_id).get().to_dict() or {}
    assert set(listing["webhooks"]) == {*legacy[1:], added.webhook_id}
    assert not webhook_ref(db, legacy[0]).get().exists


# --- delivery -----------------------------------------------------------------------------------


def test_an_event_is_posted_signed_once_however_often_it_is_pushed(
    admin_client: FlaskClient,
    db: firestore.Client,
    make_campaign: MakeCampaign,
    receiver: Receiver,
    forget_webhook: Callable[[str], None],
) -> None:
    """Through deliver_webhooks as Pub/Sub push calls it; the message comes three times."""
    campaign_id = make_campaign()
    created = admin_client.post(
        f"/v1/campaigns/{campaign_id}/webhooks",
        json={"url": receiver.url(), "events": ["coupon.claimed"]},
        headers=ADMIN,
    ).get_json()
    forget_webhook(created["webhook_id"])
    event = claimed(campaign_id, 1)
    payload = encode_event(event)
    envelope = published_event(payload)
    client = function_client("deliver_webhooks")

    statuses = [deliver(client, envelope) for _ in range(2)]
    statuses.append(deliver(client, published_event(payload)))  # published twice, too

    assert statuses == [200, 200, 200]
    (request,) = receiver.received
    assert request.body == payload
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-codedrop-event-id"] == event.event_id
    assert verify(
        created["secret"], request.headers["x-codedrop-signature"], request.body, now=time.time()
    )
    assert not verify(
        "whsec_other", request.headers["x-codedrop-signature"], request.body, now=time.time()
    )
    log = admin_client.get(
        f"/v1/campaigns/{campaign_id}/webhooks/{created['webhook_id']}/deliveries", headers=ADMIN
    ).get_json()["deliveries"]
    assert len(log) == 1
    assert log[0]["event_id"] == event.event_id
    assert (log[0]["state"], log[0]["attempts"], log[0]["last_status"]) == ("delivered", 1, 200)
    assert log[0]["next_attempt_at"] is None


def test_only_the_listed_event_types_of_the_campaign_are_delivered(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    receiver: Receiver,
    webhooks: WebhookService,
    subscribe: Subscribe,
) -> None:
    campaign_id, other = make_campaign(), make_campaign()
    subscribe(webhooks, campaign_id, receiver.url(), events=[EventType.SOLD_OUT])

    for event in (claimed(campaign_id, 1), claimed(other, 2)):
        webhooks.handle(event, encode_event(event))

    assert receiver.received == []


def test_reversals_and_voids_are_delivered_to_the_webhooks_listing_them(
    db: firestore.Client,
    cleanup: list[Callable[[], object]],
    make_campaign: MakeCampaign,
    receiver: Receiver,
    webhooks: WebhookService,
    subscribe: Subscribe,
) -> None:
    """A real reversal and a real void (webhooks send only events their records back)."""
    campaign_id = make_campaign(codes=["WH-ONE", "WH-TWO"], on_cancel="return_to_pool")
    events = [EventType.COUPON_REVERSED, EventType.COUPON_VOIDED]
    subscribe(webhooks, campaign_id, receiver.url(), events=events)
    order_id = f"wh-order-{campaign_id}"
    cleanup.append(redeemed_order_ref(db, order_key(order_id)).delete)
    services = instance_services()
    claimed = services.claims.claim(campaign_id=campaign_id, shopper=Shopper("wendy"))
    code = claimed.claim.code
    other = ({"WH-ONE", "WH-TWO"} - {code}).pop()
    services.redemptions.redeem(campaign_id=campaign_id, code=code, order_id=order_id)
    services.reversals.reverse_order(campaign_id=campaign_id, order_id=order_id)
    services.reversals.void(campaign_id=campaign_id, code=other)
    (record,) = [s.to_dict() or {} for s in reversals_collection(db, campaign_id).stream()]
    reversed_ = CouponReversed(
        event_id=reversed_event_id(campaign_id, record["coupon_id"], 1),
        campaign_id=campaign_id,
        occurred_at=record["reversed_at"],
        coupon_id=record["coupon_id"],
        user_id="wendy",
        claim_id=record["claim_id"],
        order_id=order_id,
        on_cancel=OnCancel.RETURN_TO_POOL,
    )
    voided = CouponVoided(
        event_id=voided_event_id(campaign_id, coupon_id_for(other)),
        campaign_id=campaign_id,
        occurred_at=utcnow(),
        coupon_id=coupon_id_for(other),
        voided_from="available",
    )

    for event in (reversed_, voided):
        webhooks.handle(event, encode_event(event))

    assert [json.loads(r.body)["type"] for r in receiver.received] == [
        "coupon.reversed",
        "coupon.voided",
    ]


@pytest.mark.parametrize(
    ("script", "first_failure"),
    [
        pytest.param([(500, 0), (503, 0), (200, 0)], {"last_status": 500}, id="500"),
        # The first answer comes well after the 0.5 s timeout.
        pytest.param(
            [(200, 3.0), (200, 0)], {"last_status": None, "last_error": "timeout"}, id="timeout"
        ),
    ],
)
def test_a_failed_attempt_is_retried_until_the_endpoint_accepts(
    endpoint: MakeEndpoint, script: list[tuple[int, float]], first_failure: dict[str, Any]
) -> None:
    hooked = endpoint()
    hooked.receiver.answer = answers(*script)
    event = claimed(hooked.campaign_id, 1)

    hooked.webhooks.handle(event, encode_event(event))
    first = hooked.deliveries()[event.event_id]
    drain_until(
        hooked.webhooks, lambda: hooked.deliveries()[event.event_id]["state"] == "delivered"
    )

    assert (first["state"], first["attempts"]) == ("retrying", 1)
    assert {field: first[field] for field in first_failure} == first_failure
    assert first["due_at"] > first["last_attempt_at"]  # the next attempt, backed off
    done = hooked.deliveries()[event.event_id]
    attempts = len(script)
    assert (done["attempts"], done["last_status"], done["last_error"]) == (attempts, 200, None)
    sent = [r.headers["x-codedrop-attempt"] for r in hooked.receiver.received]
    assert sent == [str(n) for n in range(1, attempts + 1)]
    for request in hooked.receiver.received:  # each attempt signed afresh
        assert verify(
            hooked.webhook.secret,
            request.headers["x-codedrop-signature"],
            request.body,
            now=time.time(),
        )


def test_the_throttle_holds_at_the_receiver(endpoint: MakeEndpoint) -> None:
    """25 events at once for an endpoint that takes 5 per second, 2 at a time."""
    hooked = endpoint(max_per_second=5, max_in_flight=2)
    campaign_id, webhooks, receiver = hooked.campaign_id, hooked.webhooks, hooked.receiver
    receiver.answer = answers((200, 0.15))
    events = [claimed(campaign_id, n) for n in range(25)]
    for event in events:
        webhooks.record(event, encode_event(event))

    webhooks.drain_due()

    assert receiver.unique_event_ids() == {e.event_id for e in events}
    assert receiver.max_in_flight <= 2
    # Started 0.21 s apart by the sender: under 5 per second, 5 s for 25. Arrival times carry
    # the threads' scheduling jitter (tens of ms on a busy machine), hence 0.9 s windows here.
    assert receiver.max_in_window(0.9) <= 5
    starts = receiver.starts()
    assert starts[-1] - starts[0] >= 4.6  # not 25 x 0.15 s / 2 in flight
    assert {d["state"] for d in hooked.deliveries().values()} == {"delivered"}


def test_a_slow_endpoint_never_delays_another(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    webhooks: WebhookService,
    subscribe: Subscribe,
) -> None:
    """One request at a time each: the slow endpoint times out (0.5 s) five times in a row,
    while the other takes its ten events, 50 ms each."""
    campaign_id = make_campaign()
    with (
        Receiver(answer=answers((200, 3.0))) as slow,
        Receiver(answer=answers((200, 0.05))) as fast,
    ):
        subscribe(webhooks, campaign_id, slow.url(), max_in_flight=1)
        subscribe(webhooks, campaign_id, fast.url(), max_in_flight=1)
        events = [claimed(campaign_id, n) for n in range(10)]
        for event in events:
            webhooks.record(event, encode_event(event))

        webhooks.drain_due()

        assert fast.unique_event_ids() == {e.event_id for e in events}
        assert len(slow.received) == 5  # then taken for down
        # Side by side, not one after the other: the fast endpoint's deliveries began before
        # the slow one's second attempt and ended after its first began.
        slow_starts, fast_starts = slow.starts(), fast.starts()
        assert fast_starts[0] < slow_starts[1]
        assert fast_starts[-1] > slow_starts[0]
        assert fast_starts[-1] - fast_starts[0] < 1.5  # never waiting out a slow timeout


def test_deliveries_resume_when_a_dead_endpoint_comes_back(endpoint: MakeEndpoint) -> None:
    hooked = endpoint(max_in_flight=1)
    campaign_id, webhooks, receiver = hooked.campaign_id, hooked.webhooks, hooked.receiver
    receiver.stop()
    events = [claimed(campaign_id, n) for n in range(8)]
    for event in events:
        webhooks.record(event, encode_event(event))
    webhooks.drain_due()

    down = hooked.deliveries()
    cooling = webhook_ref(hooked.db, hooked.webhook.webhook_id).get().to_dict() or {}
    receiver.start()
    drain_until(
        webhooks, lambda: {d["state"] for d in hooked.deliveries().values()} == {"delivered"}
    )

    # Five refused connections in a row: the endpoint is taken for down and left alone for a
    # while; what was not tried yet waits for it.
    assert sorted(d["attempts"] for d in down.values()) == [0, 0, 0, 1, 1, 1, 1, 1]
    assert {d["state"] for d in down.values()} == {"pending", "retrying"}
    assert cooling["down_streak"] == 1
    assert cooling["lease_owner"] is None
    assert cooling["lease_until"] is not None
    assert receiver.unique_event_ids() == {e.event_id for e in events}


# --- server-side request forgery ----------------------------------------------------------------


def test_outside_demo_projects_private_addresses_are_refused_then_and_at_delivery(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    receiver: Receiver,
    subscribe: Subscribe,
) -> None:
    campaign_id = make_campaign()
    dns = {"hooks.example": ["93.184.216.34"], "internal.example": ["10.1.2.3"]}
    production = _services(db, project_id="codedrop-prod", webhook_key=SecretStr("k" * 40)).settings
    service = WebhookService(
        db=db,
        settings=production,
        clock=utcnow,
        verify=lambda event: event,  # no event is handled here
        verify_claims=lambda batch: list(batch.claims),
        resolve=lambda host, port: dns.get(host) or resolve_host(host, port),
    )
    assert not production.is_local

    for url in (
        receiver.url(),  # http
        f"https://127.0.0.1:{receiver.port}/hook",
        f"https://localhost:{receiver.port}/hook",
        "https://internal.example/hook",
        "https://[::ffff:10.0.0.1]/hook",
    ):
        with pytest.raises(WebhookUrlNotAllowed):
            subscribe(service, campaign_id, url)
    webhook = subscribe(service, campaign_id, f"https://hooks.example:{receiver.port}/hook")
    # The name now points at this machine (DNS rebinding): the delivery must not connect.
    dns["hooks.example"] = ["127.0.0.1"]
    event = claimed(campaign_id, 1)
    service.handle(event, encode_event(event))

    delivery = deliveries(db, webhook.webhook_id)[event.event_id]
    assert delivery["state"] == "retrying"
    assert delivery["last_error"].startswith("refused: hooks.example resolves to 127.0.0.1")
    assert receiver.connections == 0


# --- a sale -------------------------------------------------------------------------------------


@pytest.fixture
def events_subscription() -> Iterator[str]:
    """A pull subscription to the events topic, standing in for deliver_webhooks' push one."""
    from google.cloud.pubsub_v1 import SubscriberClient

    name = f"projects/{PROJECT}/subscriptions/test-webhooks-{uuid.uuid4().hex[:8]}"
    with SubscriberClient() as subscriber:
        subscriber.create_subscription(name=name, topic=f"projects/{PROJECT}/topics/{EVENTS_TOPIC}")
        yield name
        subscriber.delete_subscription(subscription=name)


def _pull_all(subscription: str) -> list[tuple[bytes, str]]:
    return [(m.data, m.message_id) for m in pull_all(subscription)]


def _push(messages: Sequence[tuple[bytes, str]]) -> list[int]:
    """Push each message to deliver_webhooks from 8 threads at once, as Pub/Sub does."""

    # Apps are built here, one thread at a time: CPython 3.11's compiler is not safe to run
    # from several threads at once, and building an app compiles its URL rules.
    clients = [function_client("deliver_webhooks") for _ in range(8)]

    def push_some(i: int) -> list[int]:
        part = messages[i::8]
        return [deliver(clients[i], published_event(data, message_id=mid)) for data, mid in part]

    with ThreadPoolExecutor(8) as pool:
        parts = pool.map(push_some, range(8))
        return [status for part in parts for status in part]


@pytest.fixture
def no_linger() -> Iterator[None]:
    """This process's functions with main.py's drainer handing its lease on as soon as nothing is
    due, not a second later: more drains race for the endpoint, and 330 pushes do not wait out
    a linger each in turn."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CODEDROP_WEBHOOK_LINGER_SECONDS", "0")
        reset_instance()
        yield
    reset_instance()  # back to the suite's settings


@pytest.mark.long
def test_a_sale_is_delivered_exactly_once_to_a_deduplicating_receiver(
    admin_client: FlaskClient,
    db: firestore.Client,
    make_campaign: MakeCampaign,
    receiver: Receiver,
    forget_webhook: Callable[[str], None],
    events_subscription: str,
    no_linger: None,
) -> None:
    """300 shoppers claim the 300 codes; every message is pushed, a tenth of them twice."""
    campaign_id = make_campaign(codes=300)
    created = admin_client.post(
        f"/v1/campaigns/{campaign_id}/webhooks",
        json={
            "url": receiver.url(),
            "events": ["coupon.claimed"],
            "max_per_second": 500,
            "max_in_flight": 8,
        },
        headers=ADMIN,
    ).get_json()
    forget_webhook(created["webhook_id"])
    claims = instance_services().claims
    with ThreadPoolExecutor(16) as pool:
        results = list(
            pool.map(
                lambda n: claims.claim(campaign_id=campaign_id, shopper=Shopper(f"shopper-{n}")),
                range(300),
            )
        )

    messages = [
        m for m in _pull_all(events_subscription) if json.loads(m[0])["campaign_id"] == campaign_id
    ]
    statuses = _push(messages + messages[::10])
    drain_until(
        instance_services().webhooks, lambda: len(receiver.unique_event_ids()) >= 300, timeout=60
    )

    expected = {f"claimed.{campaign_id}.{r.claim.claim_id}" for r in results}
    assert set(statuses) == {200}
    assert receiver.unique_event_ids() == expected
    for request in receiver.received:
        assert verify(
            created["secret"],
            request.headers["x-codedrop-signature"],
            request.body,
            now=time.time(),
        )
    stored = deliveries(db, created["webhook_id"])
    assert len(stored) == 300
    assert {d["state"] for d in stored.values()} == {DeliveryState.DELIVERED.value}


def test_only_events_a_webhook_lists_are_pushed_to_deliver_webhooks(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    receiver: Receiver,
    webhooks: WebhookService,
    subscribe: Subscribe,
    cleanup: list[Callable[[], object]],
) -> None:
    """Events carry `webhooks: "1"` when a webhook of their campaign lists their type, and
    deliver_webhooks' subscription filter passes only those: a campaign without webhooks costs
    deliver_webhooks no push. The emulator ignores filters; the local stack's stand-in for it
    (scripts/localstack/message_filter.py) is what passes them here, as the local stack runs it."""
    hooked, plain = make_campaign(), make_campaign()
    subscribe(webhooks, hooked, receiver.url())  # coupon.claimed only
    name = f"routes-{uuid.uuid4().hex[:8]}"
    events_topic, passed_topic = (f"projects/{PROJECT}/topics/{name}-{t}" for t in ("e", "w"))
    pulled_by_filter, pushed = (f"projects/{PROJECT}/subscriptions/{name}-{s}" for s in "fp")
    publisher = PublisherClient()
    subscriber = SubscriberClient()
    cleanup.append(subscriber.close)
    for topic in (events_topic, passed_topic):
        cleanup.append(functools.partial(publisher.delete_topic, topic=topic))
        publisher.create_topic(name=topic)
    for path, topic in ((pulled_by_filter, events_topic), (pushed, passed_topic)):
        cleanup.append(functools.partial(subscriber.delete_subscription, subscription=path))
        subscriber.create_subscription(request={"name": path, "topic": topic})
    stand_in = MessageFilter(subscription=pulled_by_filter, topic=passed_topic)
    cleanup.append(stand_in.stop)
    stand_in.start()
    bus = EventBus(
        db=db,
        publisher=publisher,
        project_id=PROJECT,
        topic=f"{name}-e",
        attributes=_services(db).webhook_routes.attributes,
    )
    sent: list[events.Event] = [
        claimed(hooked, 1),
        claimed(plain, 2),
        events.sold_out(campaign_id=hooked, codes_total=1, now=utcnow()),
        claimed(hooked, 3),
    ]
    for event in sent:
        bus.send(event)

    arrived: list[str] = []
    deadline = time.monotonic() + 20
    while len(arrived) < 2 and time.monotonic() < deadline:
        try:
            answer = subscriber.pull(
                request={"subscription": pushed, "max_messages": 10}, timeout=1
            )
        except DeadlineExceeded:
            continue
        arrived += [m.message.attributes["event_id"] for m in answer.received_messages]
    assert sorted(arrived) == sorted([sent[0].event_id, sent[3].event_id])
    assert [passes(marking.MARKED), passes({}), passes({marking.ATTRIBUTE: "0"})] == [
        True,
        False,
        False,
    ]
