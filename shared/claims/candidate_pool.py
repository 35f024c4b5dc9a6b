"""A per-instance pool of unassigned coupons that concurrent requests take distinct items from.

Why not "query inside a transaction" (the reference design): on Firestore a query inside a
transaction locks what it read, so concurrent claimers wait on each other until lock timeouts
(measured in README: about 1 claim/s at 2 claimers). Here one query, outside any transaction,
feeds many claims; each request leases a candidate nobody else in this instance holds, and the
commit (see claim_store.commit_claim) is guarded by the candidate's update time, so a candidate
taken meanwhile by another instance fails fast and the request moves on to the next one.

The search space is the design card's: [0, 1) cut into shuffled `random_float` ranges, each
instance walking them in its own order so instances rarely fight over the same coupons. Each
range keeps a floor, the last `random_float` this instance has seen there: everything below it
that was unassigned was returned by an earlier query and is either in the pool, leased, or taken
since. Coupons become unassigned only when imported or when a hold is released, and both bump the
campaign's `pool_generation` in the same commit, which resets the floors.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from shared.coupons.store import Candidate

log = logging.getLogger(__name__)

RANGE_COUNT = 10
# This many candidates in a row found taken by another instance flush the pool.
STALE_RUN_FLUSH = 16


class Exhausted(Enum):
    """What the sold-out prover found."""

    SOLD_OUT = "sold_out"  # proven empty and recorded on the campaign
    LOOK_AGAIN = "look_again"  # the campaign changed meanwhile (an import): scan again


# fetch(low, low_inclusive, high, limit) -> unassigned candidates ordered by random_float
Fetch = Callable[[float, bool, float, int], list[Candidate]]
# prove() -> candidates the ranges missed, or what an empty result meant
Prove = Callable[[], "Sequence[Candidate] | Exhausted"]


class _Progress(Enum):
    FOUND = "found"  # look at the pool again
    WAIT = "wait"  # nothing new, but candidates are in flight here and may come back


class PoolTimeout(Exception):
    """No candidate could be had before the request's deadline."""


@dataclass
class _Range:
    low: float
    high: float
    floor: float
    floor_inclusive: bool = True
    drained: bool = False

    def reset(self) -> None:
        self.floor, self.floor_inclusive, self.drained = self.low, True, False


@dataclass
class PoolMetrics:
    queries: int = 0
    proofs: int = 0
    flushes: int = 0


@dataclass
class CandidatePool:
    fetch: Fetch
    refill_size: int
    rng: random.Random = field(default_factory=random.SystemRandom)
    metrics: PoolMetrics = field(default_factory=PoolMetrics)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._refilling = False
        self._stale_run = 0
        self._low_water = max(1, self.refill_size // 2)
        self._items: deque[Candidate] = deque()
        self._leased: set[str] = set()
        self._known: set[str] = set()  # in the pool or leased
        bounds = [(i / RANGE_COUNT, (i + 1) / RANGE_COUNT) for i in range(RANGE_COUNT)]
        self.rng.shuffle(bounds)  # Fisher-Yates: each instance walks the ranges in its own order
        self._ranges = [_Range(low=lo, high=hi, floor=lo) for lo, hi in bounds]
        self._cursor = 0
        self._generation: int | None = None
        self._sold_out_generation: int | None = None

    # --- generation ---------------------------------------------------------------------------
    def observe_generation(self, generation: int) -> bool:
        """New codes were imported or holds released (or this is the first look): scan every
        range again. True when the generation changed."""
        with self._lock:
            if generation == self._generation:
                return False
            first_look = self._generation is None
            self._generation = generation
            self._sold_out_generation = None
            for r in self._ranges:
                r.reset()
            self._changed.notify_all()
            return not first_look

    @property
    def sold_out(self) -> bool:
        with self._lock:
            return self._generation is not None and self._sold_out_generation == self._generation

    # --- leasing ------------------------------------------------------------------------------
    def take(self, *, deadline: float, prove: Prove) -> Candidate | None:
        """Lease a candidate; None once `prove` has shown the campaign holds no unassigned code.

        One refill runs at a time. When the pool runs low a refill starts in the background, so
        requests keep taking candidates instead of queueing behind a query.
        """
        while True:
            with self._lock:
                if self._items:
                    candidate = self._lease_locked()
                    prefetch = len(self._items) < self._low_water and not self._refilling
                    if prefetch:
                        self._refilling = True
                else:
                    candidate, prefetch = None, False
                    if self._sold_out_generation is not None and (
                        self._sold_out_generation == self._generation
                    ):
                        return None
                    if self._refilling:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            raise PoolTimeout
                        self._changed.wait(timeout=remaining)
                        continue
                    self._refilling = True
            if candidate is not None:
                if prefetch:
                    threading.Thread(target=self._background_refill, daemon=True).start()
                return candidate
            # The pool is empty and this request refills it while the others wait.
            try:
                progress = self._refill_or_prove(prove)
            finally:
                with self._lock:
                    self._refilling = False
                    self._changed.notify_all()
            if progress is _Progress.WAIT:
                with self._lock:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise PoolTimeout
                    # Codes are in flight here; if their commits fail they come back.
                    self._changed.wait(timeout=min(0.05, remaining))

    def _lease_locked(self) -> Candidate:
        candidate = self._items.popleft()
        self._leased.add(candidate.coupon_id)
        return candidate

    def release(self, candidate: Candidate) -> None:
        """The commit failed for a reason that leaves the coupon free: give it to someone else."""
        with self._lock:
            self._leased.discard(candidate.coupon_id)
            self._items.appendleft(candidate)
            self._changed.notify_all()

    def settle(self, candidate: Candidate, *, taken_elsewhere: bool = False) -> None:
        """The coupon is assigned now: by us, or (a failed precondition) by another instance.

        A run of candidates taken elsewhere means this pool has gone stale (another instance
        worked the same ranges): drop it and read afresh, instead of letting every request
        spend its attempts on codes that are gone.
        """
        with self._lock:
            self._leased.discard(candidate.coupon_id)
            self._known.discard(candidate.coupon_id)
            self._stale_run = self._stale_run + 1 if taken_elsewhere else 0
            if self._stale_run >= STALE_RUN_FLUSH and self._items:
                self.metrics.flushes += 1
                self._stale_run = 0
                for dropped in self._items:
                    self._known.discard(dropped.coupon_id)
                self._items.clear()
                # Dropped candidates may come from drained ranges: every range is read again.
                for r in self._ranges:
                    r.reset()
            self._changed.notify_all()

    # --- refilling ----------------------------------------------------------------------------
    def _background_refill(self) -> None:
        try:
            self._refill()
        except Exception:
            # A failed prefetch costs nothing: the next request to find the pool empty retries
            # in the foreground, where the error reaches the caller.
            log.warning("background refill failed", exc_info=True)
        finally:
            with self._lock:
                self._refilling = False
                self._changed.notify_all()

    def _refill_or_prove(self, prove: Prove) -> _Progress:
        if self._refill():
            return _Progress.FOUND
        with self._lock:
            if self._leased:
                return _Progress.WAIT
            generation = self._generation
        result = prove()
        self.metrics.proofs += 1
        if result is Exhausted.SOLD_OUT:
            with self._lock:
                if generation == self._generation:
                    self._sold_out_generation = generation
            return _Progress.FOUND
        if result is Exhausted.LOOK_AGAIN:
            return _Progress.FOUND
        # The ranges missed something (they cannot, short of a bug): scan afresh.
        log.error("sold-out proof found codes the ranges missed", extra={"found": len(result)})
        with self._lock:
            for r in self._ranges:
                r.reset()
        self._add(result)
        return _Progress.FOUND

    def _add(self, found: Sequence[Candidate]) -> int:
        added = 0
        with self._lock:
            for candidate in found:
                if candidate.coupon_id not in self._known:
                    self._known.add(candidate.coupon_id)
                    self._items.append(candidate)
                    added += 1
            if added:
                self._changed.notify_all()
        return added

    def _refill(self) -> bool:
        """Query ranges, in this instance's order, until the pool has candidates again."""
        for _ in range(len(self._ranges)):
            with self._lock:
                rng = self._ranges[self._cursor]
                if rng.drained:
                    self._cursor = (self._cursor + 1) % len(self._ranges)
                    continue
                generation = self._generation
                low, inclusive = rng.floor, rng.floor_inclusive
            found = self.fetch(low, inclusive, rng.high, self.refill_size)
            self.metrics.queries += 1
            with self._lock:
                if generation != self._generation:
                    return True  # an import reset the ranges meanwhile: start over
                if found:
                    rng.floor, rng.floor_inclusive = found[-1].random_float, False
                if len(found) < self.refill_size:
                    # Everything left in this range is ours now; move on to the next one.
                    rng.drained = True
                    self._cursor = (self._cursor + 1) % len(self._ranges)
            if self._add(found):
                return True
        return False
