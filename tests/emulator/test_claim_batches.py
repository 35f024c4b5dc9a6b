"""Claims' events many to a message (`coupon.claimed.batch`, shared/claims/events.py) on the
emulators: counted once each in one commit whatever the redeliveries and overlaps, a forged member
refused alone, a malformed batch acknowledged, webhooks sent one event per claim, and a lost batch
recovered by the sweep."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from devkit.cleanup import delete_tree
from devkit.firestore_rpcs import RpcCounter
from devkit.receiver import Receiver
from shared.claims.policy import Shopper
from shared.container import Services, instance_services
from shared.events import models as events
from shared.gcp.firestore import processed_event_ref
from shared.settings import get_settings
from tests.emulator.test_usage_counters import claimed_events
from tests.support.api import ADMIN, function_client
from tests.support.cloudevents import deliver, published_event
from tests.support.stack import MakeCampaign, Pump

pytestmark = pytest.mark.emulator


def push(client: FlaskClient, payload: bytes) -> int:
    return deliver(client, published_event(payload))


def claimed(campaign_id: str) -> int:
    return instance_services().counters.totals(campaign_id).claimed


def test_a_batch_is_counted_in_one_read_and_one_commit(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    """k claims: one batched read of their claims, one commit of k markers and one shard with
    the sum, the hour and minute series summed too."""
    campaign_id = make_campaign()
    batch = claimed_events(db, campaign_id, 7)
    services = Services(get_settings(), db=firestore.Client(project=db.project))
    message = events.ClaimedBatch.of(batch)

    with RpcCounter(services.db) as rpcs:
        services.verifier.verified_claims(message)
        checked = rpcs.snapshot()
    with RpcCounter(services.db) as rpcs:
        services.usage_counter.handle_batch(message)
        counts = rpcs.snapshot()

    assert checked.calls == {"batch_get_documents": 1}
    assert checked.reads_by_collection == {"claims": 7}
    assert counts.calls["commit"] == 1  # the stock check writes nothing: codes are left
    assert counts.writes == 7 + 1
    assert counts.writes_by_collection == {"processed_events": 7, "counter_shards": 1}
    assert counts.reads_by_collection["claims"] == 7
    totals = services.counters.totals(campaign_id)
    assert totals.claimed == 7
    assert sum(totals.claimed_by_hour.values()) == sum(totals.claimed_by_minute.values()) == 7
    assert all(processed_event_ref(db, campaign_id, e.event_id).get().exists for e in batch)


def test_a_redelivered_batch_counts_each_claim_once(
    db: firestore.Client, usage_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign()
    payload = events.encode_batch(claimed_events(db, campaign_id, 5))

    first = push(usage_client, payload)
    with ThreadPoolExecutor(3) as pool:
        again = list(pool.map(lambda _: push(usage_client, payload), range(3)))

    assert [first, *again] == [200] * 4
    assert claimed(campaign_id) == 5


def test_a_batch_overlapping_counted_claims_counts_the_rest_once(
    db: firestore.Client, usage_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    """A claim counted through its own event (the outbox's, the sweep's) and again in a batch;
    two batches sharing claims: each claim once."""
    campaign_id = make_campaign()
    claims = claimed_events(db, campaign_id, 8)

    assert push(usage_client, events.encode_event(claims[0])) == 200
    assert push(usage_client, events.encode_batch(claims[:4])) == 200
    assert push(usage_client, events.encode_batch(claims[2:6])) == 200
    assert push(usage_client, events.encode_event(claims[5])) == 200
    assert push(usage_client, events.encode_batch(claims[6:])) == 200

    assert claimed(campaign_id) == 8


def test_a_forged_member_is_refused_and_the_others_counted(
    db: firestore.Client,
    usage_client: FlaskClient,
    make_campaign: MakeCampaign,
    caplog: pytest.LogCaptureFixture,
) -> None:
    campaign_id = make_campaign()
    real = claimed_events(db, campaign_id, 3)
    forged = [
        # a claim that does not exist
        real[0].model_copy(
            update={"event_id": f"claimed.{campaign_id}.nobody", "claim_id": "nobody"}
        ),
        # an existing claim with another shopper, under another id
        real[1].model_copy(
            update={"event_id": f"claimed.{campaign_id}.claim-1.7", "user_id": "me"}
        ),
    ]

    with caplog.at_level(logging.WARNING, logger="shared.usage"):
        assert push(usage_client, events.encode_batch([*real, *forged])) == 200

    assert claimed(campaign_id) == 3
    refused = {
        getattr(r, "event_id", None)
        for r in caplog.records
        if r.getMessage() == "event not backed by its record; acknowledged, not counted"
    }
    assert refused == {e.event_id for e in forged}
    assert not processed_event_ref(db, campaign_id, forged[1].event_id).get().exists


def malformed_batches(campaign_id: str, claims: list[events.CouponClaimed]) -> list[bytes]:
    """Batches no producer makes, each with claims that exist."""
    good = json.loads(events.encode_batch(claims[:2]))
    too_many = {**good, "claims": [c.model_dump(mode="json") for c in claims]}
    twice = {**good, "claims": good["claims"] + good["claims"][:1]}
    foreign = {**good, "campaign_id": "another-campaign"}
    empty = {**good, "claims": []}
    unknown_field = {**good, "count": 2}
    loose = {**good, "claims": [{**good["claims"][0], "occurred_at": 1764290000}]}
    relabelled = {**good, "event_id": f"claimed_batch.{campaign_id}.{'0' * 32}"}
    return [
        json.dumps(b).encode()
        for b in (too_many, twice, foreign, empty, unknown_field, loose, relabelled)
    ]


@pytest.mark.parametrize("function", ["count_usage", "deliver_webhooks"])
def test_a_malformed_or_oversized_batch_is_acknowledged_and_nothing_counted(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    caplog: pytest.LogCaptureFixture,
    function: str,
) -> None:
    campaign_id = make_campaign()
    claims = claimed_events(db, campaign_id, events.MAX_BATCH_CLAIMS + 1)
    client = function_client(function)

    with caplog.at_level(logging.ERROR, logger="shared"):
        statuses = [push(client, b) for b in malformed_batches(campaign_id, claims)]

    assert statuses == [200] * 7
    malformed = [r for r in caplog.records if r.getMessage() == "malformed message acknowledged"]
    assert len(malformed) == 7
    assert "at most 100 items" in getattr(malformed[0], "reason", "")
    assert claimed(campaign_id) == 0


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as started:
        yield started


def test_webhooks_receive_a_batch_as_one_event_per_claim(
    admin_client: FlaskClient,
    db: firestore.Client,
    make_campaign: MakeCampaign,
    receiver: Receiver,
    cleanup: list[Callable[[], object]],
) -> None:
    """Each verified claim of the batch, once however often the batch is pushed, with the very
    body its single publish would carry; the forged member goes nowhere."""
    from shared.gcp.firestore import webhook_ref

    campaign_id = make_campaign()
    created = admin_client.post(
        f"/v1/campaigns/{campaign_id}/webhooks",
        json={"url": receiver.url(), "events": ["coupon.claimed"], "max_per_second": 100},
        headers=ADMIN,
    ).get_json()
    cleanup.append(lambda: delete_tree(db, webhook_ref(db, created["webhook_id"])))
    real = claimed_events(db, campaign_id, 4)
    forged = real[0].model_copy(
        update={"event_id": f"claimed.{campaign_id}.ghost", "claim_id": "ghost"}
    )
    payload = events.encode_batch([*real, forged])
    client = function_client("deliver_webhooks")

    assert [push(client, payload) for _ in range(2)] == [200, 200]

    webhooks = instance_services().webhooks
    for _ in range(20):  # the drain in the push sends what is due; retries come to the sweep's
        if len(receiver.unique_event_ids()) >= 4:
            break
        webhooks.drain_due()
    bodies = {r.headers["x-codedrop-event-id"]: r.body for r in receiver.received}
    assert bodies == {e.event_id: events.encode_event(e) for e in real}
    assert all(json.loads(body)["type"] == "coupon.claimed" for body in bodies.values())


class Recording:
    """The real publisher, remembering each message's type attribute and claims."""

    def __init__(self, publisher: Any, *, lose: bool = False) -> None:
        self._publisher, self._lose = publisher, lose
        self.types: list[str] = []
        self.lock = threading.Lock()

    def publish(self, topic: str, data: bytes, **attributes: str) -> Future[str]:
        with self.lock:
            self.types.append(attributes["type"])
        if self._lose:  # acknowledged, and never delivered (a batch lost on the way)
            lost: Future[str] = Future()
            lost.set_result("lost")
            return lost
        published: Future[str] = self._publisher.publish(topic, data, **attributes)
        return published

    def publish_now(self, topic: str, data: bytes, *, timeout: float, **attributes: str) -> None:
        with self.lock:
            self.types.append(attributes["type"])
        if not self._lose:  # else acknowledged, and never delivered (a batch lost on the way)
            self._publisher.publish_now(topic, data, timeout=timeout, **attributes)


def claim_concurrently(services: Services, campaign_id: str, shoppers: int) -> list[str]:
    def claim(n: int) -> str:
        result = services.claims.claim(campaign_id=campaign_id, shopper=Shopper(f"buyer-{n}"))
        return result.claim.claim_id

    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(claim, range(shoppers)))


Batching = Callable[[Recording], Services]


@pytest.fixture
def batching(db: firestore.Client, cleanup: list[Callable[[], object]]) -> Batching:
    """An instance's container whose claims wait 50 ms for others to share their message,
    published through the given publisher."""

    def make(publisher: Recording) -> Services:
        settings = get_settings().model_copy(update={"claim_event_window_seconds": 0.05})
        services = Services(settings, db=db, publisher=publisher)
        cleanup.append(services.close)
        return services

    return make


def test_concurrent_claims_share_messages_and_each_is_counted_once(
    make_campaign: MakeCampaign, pump_events: Pump, batching: Batching
) -> None:
    campaign_id = make_campaign(codes=40)
    recording = Recording(instance_services().publisher)
    services = batching(recording)

    claim_ids = claim_concurrently(services, campaign_id, 40)
    delivered = [e for e in pump_events() if e["campaign_id"] == campaign_id]

    assert "coupon.claimed.batch" in recording.types
    assert len(recording.types) < 40
    assert sorted(e["claim_id"] for e in delivered if e["type"] == "coupon.claimed") == sorted(
        claim_ids
    )
    assert claimed(campaign_id) == 40


def test_the_sweep_recovers_the_claims_of_a_lost_batch(
    admin_client: FlaskClient, make_campaign: MakeCampaign, pump_events: Pump, batching: Batching
) -> None:
    """A batch acknowledged and never delivered leaves no outbox entry: the sweep finds its
    claims without markers and publishes each one's event again."""
    campaign_id = make_campaign(codes=12)
    lost = Recording(instance_services().publisher, lose=True)
    services = batching(lost)

    claim_concurrently(services, campaign_id, 12)
    assert "coupon.claimed.batch" in lost.types
    pump_events()
    assert claimed(campaign_id) == 0

    swept = admin_client.post("/v1/maintenance/sweep", json={"grace_seconds": 0}, headers=ADMIN)
    pump_events()

    assert swept.get_json()["claims_republished"] >= 12
    assert claimed(campaign_id) == 12
