"""Releasing holds that were not redeemed in time, exactly, under any concurrency.

A release is one atomic batch per campaign and group of holds: each coupon goes back to
available (guarded by the update time it was read with), each shopper's claim slot is deleted
(so they may claim again) and a record of the released hold created in its place (what
count_usage checks the hold's events against), each `coupon.released` event is staged in the
outbox, and the campaign's `pool_generation` is bumped with `sold_out` cleared. Why each part:
- The coupon guard makes a release and a redemption (or anything else touching the coupon)
  mutually exclusive: whichever commits second fails its precondition and re-reads. So a code is
  never redeemed after its release, nor free while a slot still holds it. The slot needs no
  guard of its own: it is only ever written in a batch that also writes its coupon.
- The campaign write invalidates any claimer's in-flight "sold out" proof (it is guarded by the
  campaign's update time) and resets every candidate pool's ranges, whose floors would
  otherwise hide a code that became free below them.
Nothing is read inside a transaction and nothing is locked; the campaign document is written
once per batch of up to RELEASE_BATCH holds, not once per hold.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from itertools import repeat
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.coupons.store import (
    HOLD_FIELDS,
    HOLD_SHARDS,
    ExpiredHold,
    expired_hold,
    find_expired_holds,
    release_fields,
)
from shared.events.bus import EventBus
from shared.events.models import CouponReleased, released_event_id, released_record_id
from shared.gcp.firestore import (
    campaign_ref,
    claims_collection,
    coupons_collection,
    released_holds_collection,
)

log = logging.getLogger(__name__)

# Four writes per hold (coupon, slot, released record, outbox entry) plus the campaign: under
# Firestore's 500 writes per batch.
RELEASE_BATCH = 120
PAGE_SIZE = 300
# A batch that lost a race is re-read and retried; redemptions racing a release are rare, so a
# few rounds settle it, and what is left waits for the next sweep.
MAX_ROUNDS = 4


def coupon_released(hold: ExpiredHold, *, now: datetime) -> CouponReleased:
    return CouponReleased(
        event_id=released_event_id(hold.campaign_id, hold.coupon_id, hold.assigned_at),
        campaign_id=hold.campaign_id,
        occurred_at=now,
        coupon_id=hold.coupon_id,
        user_id=hold.user_id,
        claim_id=hold.claim_id,
        claimed_at=hold.assigned_at,
        expired_at=hold.expires_at,
    )


def released_record(hold: ExpiredHold, *, now: datetime) -> dict[str, object]:
    """What the released hold was: its claim slot is deleted (the shopper may claim again), so
    this is the record that count_usage checks the hold's events against."""
    return {
        "campaign_id": hold.campaign_id,
        "claim_id": hold.claim_id,
        "user_id": hold.user_id,
        "coupon_id": hold.coupon_id,
        "claimed_at": hold.assigned_at,
        "expires_at": hold.expires_at,
        "released_at": now,
    }


@dataclass
class ReleaseReport:
    released: int = 0
    examined: int = 0  # expired holds found (some may have been redeemed before their release)
    lost_races: int = 0  # batches that failed a precondition and were re-read
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    by_campaign: dict[str, int] = field(default_factory=dict)

    def add(self, other: ReleaseReport) -> None:
        self.released += other.released
        self.examined += other.examined
        self.lost_races += other.lost_races
        self.failures += other.failures
        for campaign_id, count in other.by_campaign.items():
            self.by_campaign[campaign_id] = self.by_campaign.get(campaign_id, 0) + count


@dataclass(kw_only=True, eq=False)
class HoldReleaser:
    db: firestore.Client
    bus: EventBus
    clock: Callable[[], datetime]

    def release_expired(self, *, limit: int = 50_000) -> ReleaseReport:
        """Release every hold that has expired by now (up to `limit`), across all campaigns.

        The 16 shards are read side by side, a page each per round, and the batches of a round
        are committed side by side: a sweep costs a few round trips, not one per shard or batch.
        """
        started = time.monotonic()
        now = self.clock()
        report = ReleaseReport()
        cursors: dict[str, Any] = dict.fromkeys(HOLD_SHARDS)
        with ThreadPoolExecutor(len(HOLD_SHARDS), thread_name_prefix="release") as pool:
            while cursors and report.examined < limit:
                page_size = max(1, min(PAGE_SIZE, (limit - report.examined) // len(cursors)))
                shards = list(cursors)
                afters = [cursors[shard] for shard in shards]
                pages = list(pool.map(self._page, shards, afters, repeat(page_size), repeat(now)))
                holds = [hold for found, _ in pages for hold in found]
                cursors = {
                    shard: cursor
                    for shard, (_, cursor) in zip(shards, pages, strict=True)
                    if cursor is not None
                }
                report.examined += len(holds)
                batches = _batches(holds)
                for done in pool.map(lambda b: self._release_batch(b[0], b[1], now), batches):
                    report.add(done)
        report.seconds = time.monotonic() - started
        if report.released:
            log.info(
                "holds released",
                extra={"released": report.released, "campaigns": len(report.by_campaign)},
            )
        return report

    def _page(
        self, shard: str, after: Any, limit: int, now: datetime
    ) -> tuple[list[ExpiredHold], Any]:
        return find_expired_holds(self.db, shard=shard, now=now, limit=limit, after=after)

    def release(self, holds: Sequence[ExpiredHold]) -> ReleaseReport:
        """Release these holds (as read by the caller) if they are still releasable now."""
        report = ReleaseReport(examined=len(holds))
        now = self.clock()
        for campaign_id, group in _batches(holds):
            report.add(self._release_batch(campaign_id, group, now))
        return report

    def _release_batch(
        self, campaign_id: str, holds: list[ExpiredHold], now: datetime
    ) -> ReleaseReport:
        report = ReleaseReport()
        for _ in range(MAX_ROUNDS):
            if not holds:
                return report
            events = [coupon_released(hold, now=now) for hold in holds]
            batch = self.db.batch()
            coupons = coupons_collection(self.db, campaign_id)
            claims = claims_collection(self.db, campaign_id)
            released = released_holds_collection(self.db, campaign_id)
            for hold, event in zip(holds, events, strict=True):
                batch.update(
                    coupons.document(hold.coupon_id),
                    release_fields(),
                    option=self.db.write_option(last_update_time=hold.read_at),
                )
                batch.delete(claims.document(hold.claim_id))
                batch.create(
                    released.document(released_record_id(hold.claim_id, hold.assigned_at)),
                    released_record(hold, now=now),
                )
                self.bus.stage(batch, event, now=now)
            batch.update(
                campaign_ref(self.db, campaign_id),
                {"sold_out": False, "pool_generation": firestore.Increment(1)},
            )
            try:
                batch.commit()
            except gexc.FailedPrecondition:
                # Some coupon changed since it was read (redeemed, most likely): read them all
                # again and release those still expired and held.
                report.lost_races += 1
                holds = self._reread(campaign_id, holds, now)
                continue
            except gexc.NotFound as exc:  # the campaign document is gone
                report.failures.append(f"{campaign_id}: {exc!r}")
                return report
            report.released += len(holds)
            report.by_campaign[campaign_id] = report.by_campaign.get(campaign_id, 0) + len(holds)
            self.bus.deliver_staged(events)
            return report
        report.failures.append(f"{campaign_id}: {len(holds)} holds kept changing; next sweep")
        return report

    def _reread(
        self, campaign_id: str, holds: list[ExpiredHold], now: datetime
    ) -> list[ExpiredHold]:
        coupons = coupons_collection(self.db, campaign_id)
        refs = [coupons.document(hold.coupon_id) for hold in holds]
        fresh = self.db.get_all(refs, field_paths=HOLD_FIELDS)
        return [hold for s in fresh if (hold := expired_hold(s, now=now)) is not None]


def _batches(holds: Sequence[ExpiredHold]) -> list[tuple[str, list[ExpiredHold]]]:
    """The holds by campaign, in batches of at most RELEASE_BATCH."""
    by_campaign: defaultdict[str, list[ExpiredHold]] = defaultdict(list)
    for hold in holds:
        by_campaign[hold.campaign_id].append(hold)
    return [
        (campaign_id, group[start : start + RELEASE_BATCH])
        for campaign_id, group in by_campaign.items()
        for start in range(0, len(group), RELEASE_BATCH)
    ]
