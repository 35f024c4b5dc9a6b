"""count_usage and the sharded counters on the emulators: exact under redelivery, reordering,
concurrency and contention; lost publishes recovered by the sweeper; reconciliation."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.api_core.exceptions import DeadlineExceeded
from google.cloud import firestore

from devkit.claims import add_claims, claim_as, claim_record
from shared.claims.engine import ClaimEngine
from shared.claims.identity import IdentityKind, identity_key
from shared.claims.models import coupon_claimed
from shared.claims.store import claim_id_for
from shared.clock import utcnow
from shared.container import Services, instance_services
from shared.events import models as events
from shared.events.bus import EventBus
from shared.gcp.firestore import counter_shards_collection, outbox_collection, processed_event_ref
from shared.http import claim_api as claim_routes
from shared.intake import jobs as job_store
from shared.intake.models import JobKind, JobRecord, JobState, codes_imported
from shared.settings import Settings, get_settings
from shared.usage.counters import MARKER_RETENTION, ShardedCounters
from tests.support.api import ADMIN, auth, router_client
from tests.support.cloudevents import deliver, published_event
from tests.support.stack import PROJECT, MakeCampaign, Pump

pytestmark = pytest.mark.emulator


def claimed_events(
    db: firestore.Client, campaign_id: str, count: int, *, spread_hours: int = 1
) -> list[events.CouponClaimed]:
    """Events of claims that exist (count_usage counts nothing else); claim n was made
    n % spread_hours hours ago."""
    records = [
        claim_record(campaign_id, n, claimed_at=utcnow() - timedelta(hours=n % spread_hours))
        for n in range(count)
    ]
    return add_claims(db, records)


def send(client: FlaskClient, event: events.Event) -> int:
    return deliver(client, published_event(events.encode_event(event)))


def counters() -> ShardedCounters:
    return instance_services().counters


def test_a_redelivered_event_counts_once(
    db: firestore.Client, usage_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign()
    [event] = claimed_events(db, campaign_id, 1)

    statuses = [send(usage_client, event) for _ in range(3)]

    assert statuses == [200, 200, 200]
    assert counters().totals(campaign_id).claimed == 1


def test_an_events_marker_expires_after_every_redelivery_could_arrive(
    db: firestore.Client, usage_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    """Markers are written at claim rate and would pile up for good: Firestore's TTL policy on
    `expire_at` (firestore.indexes.json, deployed by scripts/deploy) deletes them."""
    campaign_id = make_campaign()
    [event] = claimed_events(db, campaign_id, 1)

    assert send(usage_client, event) == 200

    marker = processed_event_ref(db, campaign_id, event.event_id).get().to_dict() or {}
    assert marker["expire_at"] - marker["applied_at"] == MARKER_RETENTION
    assert timedelta(days=14) <= MARKER_RETENTION  # 7 days unacknowledged + 7 dead-lettered


def test_out_of_order_delivery_lands_in_the_right_hours(
    db: firestore.Client,
    usage_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
) -> None:
    campaign_id = make_campaign()
    batch = claimed_events(db, campaign_id, 30, spread_hours=3)
    random.Random(3).shuffle(batch)

    for event in batch:
        assert send(usage_client, event) == 200

    report = admin_client.get(
        f"/v1/campaigns/{campaign_id}/report?granularity=hour", headers=ADMIN
    ).get_json()
    assert report["claimed"] == 30
    assert [p["claimed"] for p in report["series"]] == [10, 10, 10]
    assert all(p["period_start"].endswith(":00:00.000Z") for p in report["series"])
    daily = admin_client.get(
        f"/v1/campaigns/{campaign_id}/report?granularity=day", headers=ADMIN
    ).get_json()
    assert sum(p["claimed"] for p in daily["series"]) == 30
    weekly = admin_client.get(
        f"/v1/campaigns/{campaign_id}/report?granularity=week", headers=ADMIN
    ).get_json()
    assert sum(p["claimed"] for p in weekly["series"]) == 30
    assert all(p["period_start"].endswith("T00:00:00.000Z") for p in weekly["series"])
    bad = admin_client.get(f"/v1/campaigns/{campaign_id}/report?granularity=month", headers=ADMIN)
    assert bad.status_code == 400


def test_concurrent_deliveries_with_duplicates_are_exact(
    db: firestore.Client, usage_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign()
    batch = claimed_events(db, campaign_id, 200)
    deliveries = batch + batch[:50]  # 50 delivered twice, concurrently
    random.Random(4).shuffle(deliveries)

    with ThreadPoolExecutor(32) as pool:
        statuses = list(pool.map(lambda e: send(usage_client, e), deliveries))

    assert set(statuses) == {200}
    assert counters().totals(campaign_id).claimed == 200


def test_shards_grow_under_contention_and_the_count_stays_exact(
    db: firestore.Client, usage_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    """A transaction holding shard 0 makes writes to it time out on the lock (real contention
    on the emulator); the counter grows its shards and retries elsewhere."""
    campaign_id = make_campaign()
    batch = claimed_events(db, campaign_id, 3)
    shard_zero = counter_shards_collection(db, campaign_id).document("0")
    shard_zero.set({"claimed": 0})
    holder = db.transaction()
    holder._begin()  # the client has no public "begin"; the lock is taken by the read
    shard_zero.get(transaction=holder)
    try:
        statuses = [send(usage_client, event) for event in batch]
    finally:
        holder._rollback()

    assert statuses == [200, 200, 200]
    totals = counters().totals(campaign_id)
    assert totals.claimed == 3
    assert counters().shard_count(campaign_id) >= 2


def test_still_contended_counters_raise_so_pubsub_retries(
    db: firestore.Client,
    usage_client: FlaskClient,
    make_campaign: MakeCampaign,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    campaign_id = make_campaign()
    stubborn = ShardedCounters(
        db=db, settings=Settings(counter_max_attempts=1, counter_max_shards=1), clock=utcnow
    )
    monkeypatch.setattr(instance_services().usage_counter, "counters", stubborn)
    [event] = claimed_events(db, campaign_id, 1)
    shard_zero = counter_shards_collection(db, campaign_id).document("0")
    shard_zero.set({"claimed": 0})
    holder = db.transaction()
    holder._begin()
    shard_zero.get(transaction=holder)
    try:
        status = send(usage_client, event)
    finally:
        holder._rollback()

    assert status == 500  # not acknowledged: Pub/Sub redelivers it
    assert send(usage_client, event) == 200
    assert counters().totals(campaign_id).claimed == 1


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"{}",
        b'{"event_id": "x", "type": "coupon.exploded", "campaign_id": "c"}',
        b"\xff",
    ],
)
def test_malformed_messages_are_acknowledged(
    usage_client: FlaskClient, caplog: pytest.LogCaptureFixture, payload: bytes
) -> None:
    with caplog.at_level(logging.INFO, logger="shared"):
        assert deliver(usage_client, published_event(payload)) == 200

    assert_acknowledged_unread(caplog)


def test_a_message_without_data_is_acknowledged(
    usage_client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    envelope = published_event(b"{}")
    envelope["data"]["message"]["data"] = "***not base64***"

    with caplog.at_level(logging.INFO, logger="shared"):
        assert deliver(usage_client, envelope) == 200

    assert_acknowledged_unread(caplog)


def assert_acknowledged_unread(caplog: pytest.LogCaptureFixture) -> None:
    """Logged once as malformed, and never handed to the counters (the usage service logs each
    event it applies, or already applied)."""
    messages = [
        (r.name, r.getMessage())
        for r in caplog.records
        if r.name.startswith(("shared.usage", "shared.events"))
    ]
    assert messages == [("shared.events.push", "malformed message acknowledged")]


def test_claims_reach_the_counters_through_pubsub_and_stock_alerts_fire_once(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    pump_events: Pump,
) -> None:
    campaign_id = make_campaign(codes=4, low_stock_threshold=2)

    for user in ("a", "b", "c", "d", "e"):
        claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth(user))
    delivered = pump_events() + pump_events()

    mine = [e for e in delivered if e["campaign_id"] == campaign_id]
    types = sorted(e["type"] for e in mine)
    assert types.count("coupon.claimed") == 4
    assert types.count("campaign.low_stock") == 1
    assert types.count("campaign.sold_out") == 1
    public = claim_client.get(f"/v1/campaigns/{campaign_id}").get_json()
    assert public["remaining"] == 0
    stats = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ADMIN).get_json()["stats"]
    assert (stats["claimed"], stats["remaining"], stats["claims_last_minute"]) == (4, 0, 4)


def test_a_failed_publish_waits_in_the_outbox_until_the_sweep(
    db: firestore.Client,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    pump_events: Pump,
) -> None:
    campaign_id = make_campaign(codes=2)
    broken = EventBus(
        db=db, publisher=instance_services().publisher, project_id=PROJECT, topic="no-such-topic"
    )
    claim = claim_as(ClaimEngine(db=db, settings=get_settings()), campaign_id, "u")
    event = coupon_claimed(claim.claim)

    assert broken.publish(event, now=utcnow()) is False
    outbox = db.collection("outbox").document(event.event_id)
    assert outbox.get().exists

    swept = admin_client.post("/v1/maintenance/sweep", json={"grace_seconds": 0}, headers=ADMIN)
    pump_events()

    assert swept.status_code == 200
    assert swept.get_json()["outbox_published"] >= 1
    assert not outbox.get().exists
    assert counters().totals(campaign_id).claimed == 1


class StalledPublisher:
    """A Pub/Sub client whose publishes are accepted and never acknowledged."""

    def publish(self, topic: str, data: bytes, **attributes: str) -> Future[str]:
        return Future()

    def publish_now(self, topic: str, data: bytes, *, timeout: float, **attributes: str) -> None:
        time.sleep(timeout)  # what the API call does when nothing answers
        raise DeadlineExceeded("publish not acknowledged")  # type: ignore[no-untyped-call]


def test_a_claim_never_waits_on_a_publish_past_its_own_deadline(
    db: firestore.Client,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    cleanup: list[Callable[[], object]],
    pump_events: Pump,
) -> None:
    """The publish gets what is left of the claim's deadline (1 s here, against the bus's
    10 s); then the outbox takes the event over and the shopper has their code."""
    campaign_id = make_campaign(codes=1)
    settings = get_settings().model_copy(update={"claim_deadline_seconds": 1.0})
    stalled = Services(settings, db=db, publisher=StalledPublisher())
    client = router_client(claim_routes.router, stalled)
    claim_id = claim_id_for(identity_key(IdentityKind.UID, "patient"), 0)
    outbox = outbox_collection(db).document(f"claimed.{campaign_id}.{claim_id}")
    cleanup.append(outbox.delete)

    started = time.monotonic()
    response = client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth("patient"))
    waited = time.monotonic() - started

    assert response.status_code == 201
    assert waited < 5  # bounded by the claim's deadline, not by the 10 s publish timeout
    assert outbox.get().exists
    swept = admin_client.post("/v1/maintenance/sweep", json={"grace_seconds": 0}, headers=ADMIN)
    assert swept.get_json()["outbox_published"] >= 1
    pump_events()
    assert counters().totals(campaign_id).claimed == 1


@pytest.mark.long
def test_a_claim_whose_instance_died_before_publishing_is_republished(
    db: firestore.Client,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    pump_events: Pump,
) -> None:
    campaign_id = make_campaign(codes=3)
    engine = ClaimEngine(db=db, settings=get_settings())
    # Committed claims that were never published, as if the instance died right after commit.
    for user in ("x", "y"):
        claim_as(engine, campaign_id, user)

    first = admin_client.post("/v1/maintenance/sweep", json={"grace_seconds": 0}, headers=ADMIN)
    pump_events()
    second = admin_client.post("/v1/maintenance/sweep", json={"grace_seconds": 0}, headers=ADMIN)

    assert first.get_json()["claims_republished"] >= 2
    assert counters().totals(campaign_id).claimed == 2
    assert (
        second.get_json()["claims_republished"] == 0 or counters().totals(campaign_id).claimed == 2
    )


def test_reconciliation_repairs_a_tampered_counter(
    db: firestore.Client,
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    pump_events: Pump,
) -> None:
    campaign_id = make_campaign(codes=5)
    for user in ("p", "q", "r"):
        claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth(user))
    pump_events()
    # Somebody adds 7 to a shard by hand.
    shard = counter_shards_collection(db, campaign_id).document("0")
    shard.set({"claimed": firestore.Increment(7)}, merge=True)

    dry = admin_client.post(
        f"/v1/campaigns/{campaign_id}/reconcile", json={"repair": False}, headers=ADMIN
    ).get_json()
    fixed = admin_client.post(f"/v1/campaigns/{campaign_id}/reconcile", json={}, headers=ADMIN)
    again = admin_client.post(f"/v1/campaigns/{campaign_id}/reconcile", json={}, headers=ADMIN)

    assert dry["claimed"] == {"counted": 3, "counters": 10, "difference": -7}
    assert dry["repaired"] is False
    body: dict[str, Any] = fixed.get_json()
    assert body["repaired"] is True
    # Demo and test codes arrive without an import event: imported is recounted too.
    assert body["imported"]["counted"] == 5
    assert counters().totals(campaign_id).claimed == 3
    assert counters().totals(campaign_id).imported == 5
    assert again.get_json()["repaired"] is False
    assert again.get_json()["claimed"]["difference"] == 0


def test_an_import_publishes_codes_imported_once(
    import_client: FlaskClient, make_campaign: MakeCampaign, pump_events: Pump, storage_client: Any
) -> None:
    from tests.support.cloudevents import finalized_event
    from tests.support.stack import BUCKET

    campaign_id = make_campaign()
    blob = storage_client.bucket(BUCKET).blob(f"imports/{campaign_id}/x.csv")
    blob.upload_from_string("I-1\nI-2\nI-3\n")
    blob.reload()
    event = finalized_event(bucket=BUCKET, name=blob.name, generation=blob.generation)
    try:
        assert deliver(import_client, event) == 200
        assert deliver(import_client, event) == 200
        delivered = pump_events()
    finally:
        blob.delete()

    imported = [
        e for e in delivered if e["type"] == "codes.imported" and e["campaign_id"] == campaign_id
    ]
    assert [e["count"] for e in imported] == [3]
    assert counters().totals(campaign_id).imported == 3


def test_shard_growth_is_shared_by_concurrent_writers(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign()
    c = ShardedCounters(db=db, settings=get_settings(), clock=utcnow)
    barrier = threading.Barrier(8)

    def grow() -> int:
        barrier.wait()
        return c.grow(campaign_id, seen=1)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: grow(), range(8)))

    assert set(results) == {2}  # doubled once, not eight times


def test_totals_read_the_shards_another_instance_grew_to(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign()
    reader = ShardedCounters(db=db, settings=get_settings(), clock=utcnow)
    writer = ShardedCounters(db=db, settings=get_settings(), clock=utcnow)
    assert reader.totals(campaign_id).claimed == 0  # the reader now trusts one shard
    grown = writer.grow(campaign_id, seen=4)
    shards = counter_shards_collection(db, campaign_id)
    shards.document("0").set({"claimed": firestore.Increment(1)}, merge=True)
    shards.document(str(grown - 1)).set({"claimed": firestore.Increment(5)}, merge=True)

    totals = reader.totals(campaign_id)

    assert grown == 8
    assert (totals.claimed, totals.shards) == (6, 2)
    assert reader.shard_count(campaign_id) == 8


def test_forged_claim_events_are_acknowledged_and_never_counted(
    db: firestore.Client,
    usage_client: FlaskClient,
    claim_client: FlaskClient,
    make_campaign: MakeCampaign,
    pump_events: Pump,
) -> None:
    """Finding 4: twenty well-formed events for claims that do not exist once made `remaining`
    0 with codes left, announced campaign.sold_out and let shoppers past the waiting room."""
    campaign_id = make_campaign(codes=20, low_stock_threshold=5)
    forged = [
        events.CouponClaimed(
            event_id=f"claimed.{campaign_id}.ghost-{n}",
            campaign_id=campaign_id,
            occurred_at=utcnow(),
            coupon_id=f"coupon-{n}",
            user_id=f"ghost-{n}",
            claim_id=f"ghost-{n}",
        )
        for n in range(20)
    ]
    [real] = claimed_events(db, campaign_id, 1)
    twisted = [
        real.model_copy(update={"event_id": f"{real.event_id}-again"}),  # a second id, one claim
        real.model_copy(update={"user_id": "someone-else"}),
        real.model_copy(update={"coupon_id": "another-coupon"}),
        real.model_copy(update={"campaign_id": make_campaign()}),  # another campaign's claim
    ]

    statuses = [send(usage_client, event) for event in [*forged, *twisted]]

    assert set(statuses) == {200}  # acknowledged: redelivering them could never help
    assert counters().totals(campaign_id).claimed == 0
    assert send(usage_client, real) == 200
    assert counters().totals(campaign_id).claimed == 1
    public = claim_client.get(f"/v1/campaigns/{campaign_id}").get_json()
    assert public["remaining"] == 19  # 20 codes, one true claim counted (the forged: 0 left)
    announced = [e["type"] for e in pump_events() if e["campaign_id"] == campaign_id]
    assert "campaign.sold_out" not in announced
    assert "campaign.low_stock" not in announced


def test_forged_import_events_are_acknowledged_and_never_counted(
    db: firestore.Client,
    usage_client: FlaskClient,
    make_campaign: MakeCampaign,
    cleanup: list[Callable[[], object]],
) -> None:
    campaign_id = make_campaign()
    now = utcnow()
    finished = JobRecord(
        job_id=f"imp-forgery-{uuid.uuid4().hex[:8]}",
        kind=JobKind.IMPORT,
        campaign_id=campaign_id,
        state=JobState.DONE,
        imported=7,
        rows_read=7,
        created_at=now,
        updated_at=now,
        finished_at=now,
    )
    running = finished.model_copy(
        update={"job_id": f"{finished.job_id}-running", "state": JobState.RUNNING}
    )
    for job in (finished, running):
        job_store.create_job(db, job=job)
        cleanup.append(job_store.job_ref(db, job.job_id).delete)
    true_event = codes_imported(finished, now=now)
    forged = [
        true_event.model_copy(update={"count": 7_000}),
        true_event.model_copy(update={"event_id": f"{true_event.event_id}-again"}),
        codes_imported(running, now=now),
        true_event.model_copy(update={"job_id": "imp-no-such-job", "event_id": "imported.x"}),
    ]

    statuses = [send(usage_client, event) for event in forged]

    assert set(statuses) == {200}
    assert counters().totals(campaign_id).imported == 0
    assert send(usage_client, true_event) == 200
    assert counters().totals(campaign_id).imported == 7


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("occurred_at", "0001-01-01T00:00:00+14:00"),
        ("occurred_at", "9999-12-31T23:59:59-14:00"),
        ("occurred_at", 1_700_000_000),
        ("count", 1e20),
        ("count", 10**20),
        ("count", "5"),
        ("count", True),
    ],
)
def test_events_with_impossible_values_are_acknowledged_not_retried(
    usage_client: FlaskClient, make_campaign: MakeCampaign, field: str, value: object
) -> None:
    """Finding 5: such events once failed with 500, so Pub/Sub retried them for ever."""
    campaign_id = make_campaign()
    event = {
        "event_id": "imported.imp-x",
        "type": "codes.imported",
        "campaign_id": campaign_id,
        "occurred_at": "2026-11-21T10:00:00Z",
        "count": 5,
        "job_id": "imp-x",
        field: value,
    }

    status = deliver(usage_client, published_event(json.dumps(event).encode()))

    assert status == 200
    assert counters().totals(campaign_id).imported == 0
