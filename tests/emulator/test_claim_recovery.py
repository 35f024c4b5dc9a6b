"""The sweep's re-publishing of lost claim events on the emulators: its checkpoint makes each
pass read only the claims made since the last one, a failed re-publish holds the checkpoint back
until a pass gets it out, and passes running at once never move the checkpoint backwards."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import pytest
from google.cloud import firestore

from devkit.claims import add_claims, claim_record
from devkit.firestore_rpcs import RpcCounter
from shared.claims.recovery import RepublishReport, republish_unseen_claims
from shared.clock import utcnow
from shared.container import instance_services
from shared.events import models as events
from shared.events.bus import EventBus
from shared.gcp.firestore import processed_event_ref, sweep_checkpoint_ref
from tests.support.stack import EVENTS_TOPIC, PROJECT, MakeCampaign

pytestmark = pytest.mark.emulator

WINDOW = timedelta(minutes=60)


def sweep_pass(
    bus: EventBus, db: firestore.Client, campaign_id: str, now: datetime
) -> RepublishReport:
    """What the sweep does for one campaign at `now` (its window and a grace of two minutes)."""
    return republish_unseen_claims(
        db, bus, campaign_id=campaign_id, since=now - WINDOW, until=now - timedelta(minutes=2)
    )


def claims_at(db: firestore.Client, campaign_id: str, first: int, count: int, at: datetime) -> None:
    add_claims(
        db, [claim_record(campaign_id, n, claimed_at=at) for n in range(first, first + count)]
    )


def campaign_with_claims(
    db: firestore.Client, make_campaign: MakeCampaign, count: int
) -> tuple[str, datetime]:
    """A campaign with `count` claims made 10 minutes ago, and now."""
    campaign_id = make_campaign()
    now = utcnow()
    claims_at(db, campaign_id, 0, count, now - timedelta(minutes=10))
    return campaign_id, now


def checked_until(db: firestore.Client, campaign_id: str) -> datetime | None:
    return (sweep_checkpoint_ref(db, campaign_id).get().to_dict() or {}).get("checked_until")


def bus_arguments(db: firestore.Client) -> dict[str, Any]:
    """The events topic, without the webhook routing attributes (which read Firestore)."""
    return {
        "db": db,
        "publisher": instance_services().publisher,
        "project_id": PROJECT,
        "topic": EVENTS_TOPIC,
    }


def test_two_sweeps_in_a_row_read_each_claim_and_its_marker_once(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign()
    counted = firestore.Client(project=db.project)
    bus = EventBus(**bus_arguments(counted))
    now = utcnow()
    claims_at(db, campaign_id, 0, 5, now - timedelta(minutes=10))
    claims_at(db, campaign_id, 5, 4, now - timedelta(seconds=90))
    # Two of the first claims' events were counted: their markers exist.
    for n in (0, 1):
        marker = processed_event_ref(db, campaign_id, f"claimed.{campaign_id}.claim-{n}")
        marker.set({"type": "coupon.claimed", "applied_at": now})  # as count_usage writes it

    reads = []
    reports = []
    for at in (now, now + timedelta(minutes=1), now + timedelta(minutes=2)):
        with RpcCounter(counted) as rpcs:
            reports.append(sweep_pass(bus, counted, campaign_id, at))
            reads.append(rpcs.snapshot())

    assert [r.republished for r in reports] == [3, 4, 0]
    claim_documents = [r.reads_by_collection["claims"] - r.empty_queries for r in reads]
    assert claim_documents == [5, 4, 0]
    assert [r.reads_by_collection.get("processed_events", 0) for r in reads] == [5, 4, 0]
    # The checkpoint: read before the pass and in the transaction that advances it.
    assert [r.reads_by_collection["sweep"] for r in reads] == [2, 2, 2]
    assert checked_until(db, campaign_id) == now


def test_a_claim_whose_event_was_lost_after_a_pass_is_republished_by_the_next(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign()
    bus = instance_services().bus
    now = utcnow()
    assert sweep_pass(bus, db, campaign_id, now).republished == 0

    # Claimed after the pass's end (now - 2 min), its instance died before publishing.
    claims_at(db, campaign_id, 0, 1, now - timedelta(seconds=90))
    later = sweep_pass(bus, db, campaign_id, now + timedelta(minutes=1))

    assert later.republished == 1
    assert later.failures == []


def test_a_pass_with_a_failed_publish_leaves_the_checkpoint_and_the_next_republishes(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign()
    broken = EventBus(**{**bus_arguments(db), "topic": "no-such-topic"})
    now = utcnow()
    sweep_pass(instance_services().bus, db, campaign_id, now - timedelta(minutes=5))
    before = checked_until(db, campaign_id)
    claims_at(db, campaign_id, 0, 3, now - timedelta(minutes=4))

    failed = sweep_pass(broken, db, campaign_id, now)
    assert len(failed.failures) == 3
    assert checked_until(db, campaign_id) == before

    retried = sweep_pass(instance_services().bus, db, campaign_id, now + timedelta(minutes=1))
    assert (retried.republished, retried.failures) == (3, [])
    assert checked_until(db, campaign_id) == now + timedelta(minutes=1) - timedelta(minutes=2)


class HeldBus(EventBus):
    """A bus whose publishes wait until the test lets them go (a slow sweep)."""

    def __init__(self, db: firestore.Client) -> None:
        super().__init__(**bus_arguments(db))
        self.started = threading.Event()
        self.go = threading.Event()

    def send(self, event: events.Event, *, timeout: float = 10) -> None:
        self.started.set()
        assert self.go.wait(timeout=30)
        super().send(event, timeout=timeout)


def test_a_slow_sweep_finishing_last_never_moves_the_checkpoint_back(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id, now = campaign_with_claims(db, make_campaign, 2)
    held = HeldBus(db)

    with ThreadPoolExecutor(max_workers=1) as pool:
        slow = pool.submit(sweep_pass, held, db, campaign_id, now)
        assert held.started.wait(timeout=30)
        # The next minute's sweep starts, checks the same claims and finishes first.
        fast = sweep_pass(instance_services().bus, db, campaign_id, now + timedelta(minutes=1))
        held.go.set()
        assert slow.result(timeout=60).failures == []

    assert fast.republished == 2
    assert checked_until(db, campaign_id) == now - timedelta(minutes=1)


def test_concurrent_sweeps_leave_the_furthest_checkpoint(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id, now = campaign_with_claims(db, make_campaign, 4)
    bus = instance_services().bus
    starts = [now + timedelta(seconds=s) for s in (0, 20, 40, 10)]

    with ThreadPoolExecutor(max_workers=len(starts)) as pool:
        reports = list(pool.map(lambda at: sweep_pass(bus, db, campaign_id, at), starts))

    assert all(r.failures == [] for r in reports)
    assert checked_until(db, campaign_id) == max(starts) - timedelta(minutes=2)
