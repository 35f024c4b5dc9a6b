"""Sharded usage counters per campaign, fed by events, exact under redelivery.

Each event is applied in one atomic batch that creates the consumer's marker for its event_id
and increments one shard picked at random: a redelivered event finds its marker and changes
nothing. A batch of claims (one message, shared/claims/events.py) is applied the same way in one
commit: a marker per claim and their increments summed on one shard. Shards start few and grow
when writes contend (Bluecore's design): a commit that fails with a contention error, or takes
longer than the contention threshold, doubles the shard count (up to `counter_max_shards`) and
the failed increment is retried on a shard of the new set. Readers sum all shards.

campaigns/{id}/counter_shards/{n}   claimed, imported, redeemed, released, held, reversed,
                                    returned, voided, voided_available,
                                    claimed_by_hour{YYYYMMDDHH}, claimed_by_minute{YYYYMMDDHHMM},
                                    imported_by_hour{…}, redeemed_by_hour{…}, released_by_hour{…},
                                    reversed_by_hour{…}
campaigns/{id}/counters/config      shards

`claimed` counts every claim ever made, holds included, and a released hold stays counted in it;
`released` counts releases and `returned` the reversals that gave a code back to the pool,
`voided_available` the voids of codes nobody held, so codes_total - claimed + released +
returned - voided_available is what is free. `reversed` counts every reversal (whatever became
of its code), `voided` every void. `held` is the holds outstanding: +1 per hold claimed, -1 per
hold released, redeemed or voided. Each is a sum of
per-event increments, so it is exact whatever order the events arrive in once all have.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.audit import store as audit_store
from shared.audit.models import AuditEntry
from shared.events import models as events
from shared.gcp.firestore import counter_config_ref, counter_shards_collection, processed_event_ref
from shared.settings import Settings
from shared.types import OnCancel

log = logging.getLogger(__name__)

CONFIG_CACHE_SECONDS = 5.0
# A marker only has to outlive every redelivery of its event: Pub/Sub keeps an unacknowledged
# message 7 days, and its dead letter 7 more days for an operator to replay. Then Firestore's
# TTL policy on `expire_at` (firestore.indexes.json) deletes it.
MARKER_RETENTION = timedelta(days=30)
# Errors Firestore answers when writes to one document contend (or time out doing so).
CONTENTION = (gexc.Aborted, gexc.ResourceExhausted, gexc.DeadlineExceeded)


def hour_key(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y%m%d%H")


def minute_key(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y%m%d%H%M")


class CounterContended(Exception):
    """Still contended after growing the shards: raise so Pub/Sub redelivers later."""


@dataclass
class CounterTotals:
    claimed: int = 0
    imported: int = 0
    redeemed: int = 0
    released: int = 0
    held: int = 0
    reversed: int = 0
    returned: int = 0
    voided: int = 0
    voided_available: int = 0
    shards: int = 0
    claimed_by_hour: Counter[str] = field(default_factory=Counter)
    claimed_by_minute: Counter[str] = field(default_factory=Counter)
    imported_by_hour: Counter[str] = field(default_factory=Counter)
    redeemed_by_hour: Counter[str] = field(default_factory=Counter)
    released_by_hour: Counter[str] = field(default_factory=Counter)
    reversed_by_hour: Counter[str] = field(default_factory=Counter)

    @property
    def taken(self) -> int:
        """Codes not free: claimed, less those given back, plus those voided while free."""
        return self.claimed - self.released - self.returned + self.voided_available

    def free(self, codes_total: int) -> int:
        """Codes nobody holds: every code, less every claim, plus every hold and redemption
        given back, less every code voided while nobody held it."""
        return codes_total - self.taken


_TOTALS = (
    "claimed",
    "imported",
    "redeemed",
    "released",
    "held",
    "reversed",
    "returned",
    "voided",
    "voided_available",
)
_SERIES = (
    "claimed_by_hour",
    "claimed_by_minute",
    "imported_by_hour",
    "redeemed_by_hour",
    "released_by_hour",
    "reversed_by_hour",
)


def _claimed(at: datetime, count: int) -> dict[str, Any]:
    return {
        "claimed": firestore.Increment(count),
        "claimed_by_hour": {hour_key(at): firestore.Increment(count)},
        "claimed_by_minute": {minute_key(at): firestore.Increment(count)},
    }


def _increments(event: events.Event) -> dict[str, Any] | None:
    at = event.occurred_at
    if isinstance(event, events.CouponClaimed):
        claimed = _claimed(at, 1)
        if event.expires_at is not None:
            claimed["held"] = firestore.Increment(1)
        return claimed
    if isinstance(event, events.CodesAssigned):
        # A commit of a bulk assignment: `count` final claims at the commit's time.
        return _claimed(at, event.count)
    if isinstance(event, events.CouponRedeemed):
        redeemed = {
            "redeemed": firestore.Increment(1),
            "redeemed_by_hour": {hour_key(at): firestore.Increment(1)},
        }
        if event.was_held:
            redeemed["held"] = firestore.Increment(-1)
        return redeemed
    if isinstance(event, events.CouponReleased):
        return {
            "released": firestore.Increment(1),
            "released_by_hour": {hour_key(at): firestore.Increment(1)},
            "held": firestore.Increment(-1),
        }
    if isinstance(event, events.CouponReversed | events.CouponVoided):
        return _reversed_or_voided(event)
    if isinstance(event, events.CodesImported):
        return {
            "imported": firestore.Increment(event.count),
            "imported_by_hour": {hour_key(event.occurred_at): firestore.Increment(event.count)},
        }
    return None  # announcements change no counter


def _summed(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Increments that add up those of `parts` (a batch of claims: one write for them all)."""
    total: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict):
                total[key] = _summed([total.get(key, {}), value])
            else:
                before = total.get(key)
                total[key] = firestore.Increment(value.value + (before.value if before else 0))
    return total


def _reversed_or_voided(event: events.CouponReversed | events.CouponVoided) -> dict[str, Any]:
    if isinstance(event, events.CouponReversed):
        reversal = {
            "reversed": firestore.Increment(1),
            "reversed_by_hour": {hour_key(event.occurred_at): firestore.Increment(1)},
        }
        if event.on_cancel is OnCancel.RETURN_TO_POOL:
            reversal["returned"] = firestore.Increment(1)
        return reversal
    voided = {"voided": firestore.Increment(1)}
    if event.voided_from == "available":
        voided["voided_available"] = firestore.Increment(1)
    elif event.voided_from == "held":
        voided["held"] = firestore.Increment(-1)
    return voided


class ShardedCounters:
    def __init__(
        self,
        *,
        db: firestore.Client,
        settings: Settings,
        clock: Callable[[], datetime],
    ) -> None:
        self._db = db
        self._settings = settings
        self._clock = clock
        self._shard_counts: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self.growths = 0

    # --- shards -------------------------------------------------------------------------------
    def _config_ref(self, campaign_id: str) -> firestore.DocumentReference:
        return counter_config_ref(self._db, campaign_id)

    def shard_count(self, campaign_id: str) -> int:
        with self._lock:
            cached = self._shard_counts.get(campaign_id)
        if cached and time.monotonic() - cached[1] < CONFIG_CACHE_SECONDS:
            return cached[0]
        snapshot = self._config_ref(campaign_id).get()
        count = int((snapshot.to_dict() or {}).get("shards", self._settings.counter_initial_shards))
        with self._lock:
            self._shard_counts[campaign_id] = (count, time.monotonic())
        return count

    def grow(self, campaign_id: str, *, seen: int) -> int:
        """Double the shards (once per contended size, however many writers saw it).

        Lock-free on purpose: a transaction here would be the very hot spot it is meant to cure.
        The write is guarded by the config's update time; a writer that loses the race simply
        adopts what the winner wrote. Growth is best effort: it never fails a delivery.
        """
        ref = self._config_ref(campaign_id)
        wanted = min(seen * 2, self._settings.counter_max_shards)
        try:
            snapshot = ref.get()
            current = int(
                (snapshot.to_dict() or {}).get("shards", self._settings.counter_initial_shards)
            )
            count = current
            if current < wanted:
                fields = {"shards": wanted, "grown_at": self._clock()}
                if snapshot.exists:
                    ref.update(
                        fields, option=self._db.write_option(last_update_time=snapshot.update_time)
                    )
                else:
                    ref.create(fields)
                count = wanted
                self.growths += 1
                log.info(
                    "counter shards grown", extra={"campaign_id": campaign_id, "shards": count}
                )
        except (gexc.FailedPrecondition, gexc.AlreadyExists):
            count = int((ref.get().to_dict() or {}).get("shards", seen))  # another writer grew it
        except gexc.GoogleAPICallError as exc:
            log.warning(
                "counter growth failed", extra={"campaign_id": campaign_id, "error": repr(exc)}
            )
            return seen
        with self._lock:
            self._shard_counts[campaign_id] = (count, time.monotonic())
        return count

    # --- writing ------------------------------------------------------------------------------
    def apply(self, event: events.Event) -> bool:
        """Apply an event once. False when it had been applied before (a redelivery)."""
        increments = _increments(event)
        if increments is None:
            return False
        return self._commit(event.campaign_id, [event], increments)

    def apply_claims(self, claims: Sequence[events.CouponClaimed]) -> int:
        """Apply verified claims of one campaign (a batch's), each once, in one commit: a marker
        each and their increments summed on one shard. When a marker exists already (the batch
        redelivered, or a claim counted through another message) the commit fails whole, and
        the claims whose markers are missing are applied one by one. How many were applied."""
        if len(claims) == 1:
            return int(self.apply(claims[0]))
        increments = _summed([_increments(c) or {} for c in claims])
        campaign_id = claims[0].campaign_id
        if self._commit(campaign_id, claims, increments):
            return len(claims)
        markers = self._db.get_all(
            [processed_event_ref(self._db, campaign_id, c.event_id) for c in claims]
        )
        seen = {m.id for m in markers if m.exists}
        return sum(self.apply(c) for c in claims if c.event_id not in seen)

    def _commit(
        self, campaign_id: str, applied: Sequence[events.Event], increments: dict[str, Any]
    ) -> bool:
        """Create the markers of `applied` and add `increments` to one shard, atomically,
        growing the shards under contention. False when a marker existed (nothing written)."""
        shards = counter_shards_collection(self._db, campaign_id)
        for _ in range(self._settings.counter_max_attempts):
            count = self.shard_count(campaign_id)
            batch = self._db.batch()
            now = self._clock()
            for event in applied:
                batch.create(
                    processed_event_ref(self._db, campaign_id, event.event_id),
                    {
                        "type": event.type.value,
                        "applied_at": now,
                        "expire_at": now + MARKER_RETENTION,
                    },
                )
            batch.set(shards.document(str(random.randrange(count))), increments, merge=True)
            started = time.monotonic()
            try:
                batch.commit()
            except gexc.AlreadyExists:
                return False
            except CONTENTION as exc:
                log.info("counter write contended", extra={"error": repr(exc), "shards": count})
                self.grow(campaign_id, seen=count)
                continue
            if time.monotonic() - started > self._settings.counter_contention_seconds:
                self.grow(campaign_id, seen=count)
            return True
        raise CounterContended(f"counters of {campaign_id!r} stayed contended")

    def add_correction(
        self, campaign_id: str, fields: dict[str, Any], *, audit: AuditEntry | None = None
    ) -> None:
        """Reconciliation writes its corrections into shard 0 as plain increments (with the
        admin's audit entry, in one commit)."""
        batch = self._db.batch()
        batch.set(
            counter_shards_collection(self._db, campaign_id).document("0"), fields, merge=True
        )
        if audit is not None:
            audit_store.add(batch, self._db, audit)
        batch.commit()

    # --- reading ------------------------------------------------------------------------------
    def totals(self, campaign_id: str) -> CounterTotals:
        """The sum of every shard, read by reference with the config that numbers them.

        Not a query: the emulator answers one by scanning its whole database (58 ms of its CPU
        per check beside 100k documents, against 2 ms for the same shards by reference), and
        count_usage sums the shards after every bulk-assignment event. Complete: a shard is
        written only below a count that was committed to the config before the write (or the
        initial count), so the shards below the config's count read here hold every increment
        committed before it was read."""
        config = self._config_ref(campaign_id)
        shards = counter_shards_collection(self._db, campaign_id)
        known = self.shard_count(campaign_id)
        refs = [config, *(shards.document(str(n)) for n in range(known))]
        snapshots = list(self._db.get_all(refs))
        config_data = next((s.to_dict() or {} for s in snapshots if s.id == config.id), {})
        count = max(int(config_data.get("shards", 0)), self._settings.counter_initial_shards, known)
        if count > known:  # grown since this instance last looked
            snapshots += self._db.get_all([shards.document(str(n)) for n in range(known, count)])
            with self._lock:
                self._shard_counts[campaign_id] = (count, time.monotonic())
        totals = CounterTotals()
        for snapshot in snapshots:
            if not snapshot.exists or snapshot.reference.parent.id != shards.id:
                continue
            data = snapshot.to_dict() or {}
            totals.shards += 1
            for name in _TOTALS:
                setattr(totals, name, getattr(totals, name) + int(data.get(name, 0)))
            for name in _SERIES:
                getattr(totals, name).update(data.get(name, {}))
        return totals
