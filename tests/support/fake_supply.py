"""An in-memory stand-in for a campaign's segments and coupons, shared by any number of
candidate pools (simulated instances), answering like Firestore and counting what it bills."""

from __future__ import annotations

import random
import threading
import time
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.campaigns.segments import (
    COUNT,
    NEVER_DRAINED,
    Lease,
    Segment,
    lease_changes,
    lower_top_changes,
    progress_changes,
    segment_id,
)
from shared.coupons.store import Candidate

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Bill:
    reads: int = 0  # documents returned, an empty query counting one
    coupon_queries: int = 0
    segment_queries: int = 0
    segment_writes: int = 0
    segment_races: int = 0  # guarded segment writes refused


class FakeSupply:
    """Coupons by random_float and `segments` segments over [0, 1).

    `latency` seconds are slept (outside the lock) by every call, so concurrent pools overlap
    as they would on the network.
    """

    def __init__(
        self, codes: int, *, segments: int = COUNT, seed: int = 7, latency: float = 0.0
    ) -> None:
        rng = random.Random(seed)
        self.free = {f"c{i}": rng.random() for i in range(codes)}
        self._floats = dict(self.free)
        self.assigned: set[str] = set()
        self.lock = threading.Lock()
        self.latency = latency
        self.bill = Bill()
        self._versions: dict[str, int] = {}
        self._tick = 0
        self._segments = {
            segment_id(i): Segment(
                segment_id=segment_id(i),
                low=i / segments,
                high=(i + 1) / segments,
                holder=None,
                lease_until=None,
                drained_generation=NEVER_DRAINED,
                bottom=i / segments,
                top=(i + 1) / segments,
                cursor_generation=NEVER_DRAINED,
                read_at=EPOCH,
            )
            for i in range(segments)
        }

    def _pause(self) -> None:
        if self.latency:
            time.sleep(self.latency)

    # --- the Supply protocol ------------------------------------------------------------------
    def open_segments(
        self, *, generation: int, start: float, limit: int, drained_at: int
    ) -> list[Segment]:
        """In Firestore's order, (drained_generation, id), from the cursor (drained_at, start)
        and going round, as segments.open_segments asks."""
        self._pause()
        with self.lock:
            ordered = sorted(
                (s for s in self._segments.values() if s.drained_generation < generation),
                key=lambda s: (s.drained_generation, s.segment_id),
            )
            keys = [(s.drained_generation, s.segment_id) for s in ordered]
            first = bisect_left(keys, (drained_at, segment_id(int(start * len(self._segments)))))
            found = (ordered[first:] + ordered[:first])[:limit]
            self.bill.segment_queries += 1
            self.bill.reads += max(1, len(found))
        return found

    def get_segments(self, segment_ids: Sequence[str]) -> list[Segment]:
        self._pause()
        with self.lock:
            self.bill.reads += len(segment_ids)
            return [self._segments[i] for i in segment_ids]

    def _commit(self, writes: list[tuple[Segment, dict[str, Any]]]) -> list[Segment] | None:
        """Under the lock: guarded writes to segments, all or none."""
        self.bill.segment_writes += len(writes)
        if any(self._segments[s.segment_id].read_at != s.read_at for s, _ in writes):
            self.bill.segment_races += 1
            return None
        self._tick += 1
        at = EPOCH + timedelta(microseconds=self._tick)
        for segment, changes in writes:
            self._segments[segment.segment_id] = replace(segment, **changes, read_at=at)
        return [self._segments[s.segment_id] for s, _ in writes]

    def lease_run(self, run: Sequence[Segment], lease: Lease) -> list[Segment] | None:
        self._pause()
        with self.lock:
            return self._commit([(s, lease_changes(s, lease)) for s in run])

    def record_progress(
        self, run: Sequence[Segment], *, reached: float, lease: Lease
    ) -> list[Segment] | None:
        self._pause()
        with self.lock:
            changes = [(s, progress_changes(s, reached=reached, lease=lease)) for s in run]
            return self._commit(changes)

    def lower_top(self, segment: Segment, *, top: float, generation: int) -> Segment | None:
        self._pause()
        with self.lock:
            changes = lower_top_changes(segment, top=top, generation=generation)
            written = self._commit([(segment, changes)])
            return written[0] if written else None

    def fetch(self, *, low: float, low_inclusive: bool, high: float, limit: int) -> list[Candidate]:
        self._pause()
        with self.lock:
            hits = sorted(
                (rf, cid)
                for cid, rf in self.free.items()
                if (rf >= low if low_inclusive else rf > low) and rf < high
            )
            hits = hits[:limit]
            self.bill.coupon_queries += 1
            self.bill.reads += max(1, len(hits))
        return [self.candidate(cid, rf) for rf, cid in hits]

    # --- what the engine would do -------------------------------------------------------------
    def candidate(self, coupon_id: str, random_float: float) -> Candidate:
        version = self._versions.get(coupon_id, 0)
        return Candidate(
            coupon_id=coupon_id,
            code=coupon_id,
            random_float=random_float,
            read_at=EPOCH + timedelta(microseconds=version),
        )

    def assign(self, candidate: Candidate) -> bool:
        """The guarded commit: False if the coupon was assigned since it was read."""
        self._pause()
        with self.lock:
            if self.free.pop(candidate.coupon_id, None) is None:
                return False
            self.assigned.add(candidate.coupon_id)
            self._versions[candidate.coupon_id] = self._versions.get(candidate.coupon_id, 0) + 1
            return True

    def add(self, count: int, *, seed: int) -> None:
        """An import: new unassigned coupons (the caller bumps the generation)."""
        rng = random.Random(seed)
        with self.lock:
            for i in range(count):
                self.free[f"n{seed}-{i}"] = self._floats[f"n{seed}-{i}"] = rng.random()

    def prove(self, limit: int) -> list[Candidate]:
        """The proof query (a random pivot over everything); empty means none is left."""
        pivot = random.random()
        found = self.fetch(low=pivot, low_inclusive=True, high=1.0, limit=limit)
        return found or self.fetch(low=0.0, low_inclusive=True, high=pivot, limit=limit)

    def random_float(self, coupon_id: str) -> float:
        return self._floats[coupon_id]

    def segment(self, segment_id: str) -> Segment:
        with self.lock:
            return self._segments[segment_id]
