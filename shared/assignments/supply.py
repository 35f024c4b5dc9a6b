"""Unassigned coupons for one assignment job, handed out once each to its parallel batches.

One job walks the pool in `random_float` order from a random point, around once: [start, 1),
then [0, start). Each query continues above the last `random_float` it returned (coupons only
go from unassigned to assigned, so nothing unassigned is left behind below it, short of a code
released or imported meanwhile, which the final look finds). Every candidate goes to one batch
of this job, so its batches never collide with each other; a concurrent claim or another job
that takes a candidate first makes that batch's guarded commit fail, and the batch drops it.

Pages start at a batch's worth and double up to `page_size`: a short list costs a few reads, a
long one few queries (the emulator scans the whole collection for each). The next page is
fetched in the background while the batches use the last one.

When the walk is over, one query over the whole collection either finds codes the walk could not
see (released, or imported into ranges already passed) or shows the pool empty. Candidates out
with batches are still unassigned in the database: they are not handed out again, and the pool
is empty only once none is out (a batch may give some back), so a recipient is left without a
code only when no code is free. The job never records the campaign as sold out: that stays the
claim engine's proof (shared/claims/engine.py), which taking codes can only make truer.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from shared.coupons.store import Candidate

log = logging.getLogger(__name__)

# fetch(low, low_inclusive, high, limit) -> unassigned candidates in random_float order; with
# low and high None, anywhere in the pool.
Fetch = Callable[[float | None, bool, float | None, int], list[Candidate]]


@dataclass
class _Segment:
    low: float
    high: float
    floor: float
    inclusive: bool = True
    drained: bool = False


@dataclass
class SupplyMetrics:
    queries: int = 0
    candidates: int = 0
    final_looks: int = 0


@dataclass
class CandidateSupply:
    fetch: Fetch
    start: float
    first_page: int
    page_size: int
    metrics: SupplyMetrics = field(default_factory=SupplyMetrics)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._items: deque[Candidate] = deque()
        self._out: set[str] = set()  # handed to a batch, not yet settled or given back
        self._known: set[str] = set()  # waiting in _items, or out
        self._segments = [
            _Segment(low=self.start, high=1.0, floor=self.start),
            _Segment(low=0.0, high=self.start, floor=0.0),
        ]
        self._next_page = max(1, min(self.first_page, self.page_size))
        self._low_water = self._next_page // 2
        self._refilling = False
        self._exhausted = False
        self._failure: BaseException | None = None
        # Settlements so far, and their number when the final look found only candidates out
        # with batches: looking again is pointless until one of them is settled.
        self._settlements = 0
        self._empty_at: int | None = None

    @property
    def exhausted(self) -> bool:
        with self._lock:
            return self._exhausted and not self._items

    def take(self, count: int) -> list[Candidate]:
        """Between 1 and `count` candidates, or none once the pool is empty. The caller holds
        none of this supply's candidates when it asks (it settled or gave back its last ones).
        Raises what a query raised."""
        taken: list[Candidate] = []
        with self._lock:
            while True:
                while self._items and len(taken) < count:
                    candidate = self._items.popleft()
                    self._out.add(candidate.coupon_id)
                    taken.append(candidate)
                if len(taken) >= count or self._exhausted or (taken and self._walk_over()):
                    prefetch = self._claim_prefetch_locked()
                    break
                if self._failure is not None:
                    failure, self._failure = self._failure, None
                    raise failure
                if self._refilling or self._empty_at == self._settlements:
                    self._changed.wait()  # a refill, or another batch's settlement, is coming
                    continue
                self._refilling = True
                self._lock.release()
                try:
                    self._refill()  # here: the batch has nothing else to do meanwhile
                finally:
                    self._lock.acquire()
        if prefetch:
            threading.Thread(target=self._refill, name="supply-prefetch", daemon=True).start()
        return taken

    def settle(self, candidates: Sequence[Candidate]) -> None:
        """Candidates now assigned (by the batch, or by someone else first)."""
        with self._lock:
            for candidate in candidates:
                self._out.discard(candidate.coupon_id)
                self._known.discard(candidate.coupon_id)
            self._settlements += 1
            self._changed.notify_all()

    def give_back(self, candidates: Sequence[Candidate]) -> None:
        """Candidates a batch did not use and found still free: handed out first."""
        with self._lock:
            for candidate in candidates:
                self._out.discard(candidate.coupon_id)
            self._items.extendleft(reversed(candidates))
            self._settlements += 1
            self._changed.notify_all()

    def _walk_over(self) -> bool:
        return all(segment.drained for segment in self._segments)

    def _claim_prefetch_locked(self) -> bool:
        if (
            self._refilling
            or self._exhausted
            or self._walk_over()
            or len(self._items) >= self._low_water
        ):
            return False
        self._refilling = True
        return True

    def _refill(self) -> None:
        try:
            found = self._next_candidates()
        except Exception as exc:  # handed to the next taker, which raises it
            log.warning("candidate query failed", exc_info=True)
            with self._lock:
                self._failure = exc
                self._refilling = False
                self._changed.notify_all()
            return
        with self._lock:
            # A walk started again, or the final look, meets candidates out with batches.
            fresh = [c for c in found if c.coupon_id not in self._known]
            self._known.update(c.coupon_id for c in fresh)
            self._items.extend(fresh)
            self.metrics.candidates += len(fresh)
            self._refilling = False
            self._changed.notify_all()

    def _next_candidates(self) -> list[Candidate]:
        """The next page of the walk, or after the walk what the final look found."""
        while True:
            segment = next((s for s in self._segments if not s.drained), None)
            limit = self._next_page
            self._next_page = min(self._next_page * 2, self.page_size)
            self._low_water = limit // 2
            if segment is None:
                return self._final_look(limit)
            found = self.fetch(segment.floor, segment.inclusive, segment.high, limit)
            self.metrics.queries += 1
            if found:
                segment.floor, segment.inclusive = found[-1].random_float, False
            if len(found) < limit:
                segment.drained = True
            if found:
                return found

    def _final_look(self, limit: int) -> list[Candidate]:
        with self._lock:
            settlements = self._settlements
        found = self.fetch(None, True, None, limit)
        self.metrics.queries += 1
        self.metrics.final_looks += 1
        with self._lock:
            fresh = [c for c in found if c.coupon_id not in self._known]
            if fresh:
                # Released or imported behind the walk: walk again from the start.
                for segment in self._segments:
                    segment.floor, segment.inclusive, segment.drained = segment.low, True, False
                self._empty_at = None
            elif self._known:
                self._empty_at = settlements  # look again once a batch has settled
            else:
                self._exhausted = True
                log.info("no unassigned code left", extra={"queries": self.metrics.queries})
        return found
