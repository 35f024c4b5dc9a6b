"""Unassigned coupons for one assignment job, handed out once each to its parallel batches.

One job walks the pool in `random_float` order from a random point, around once: [start, 1),
then [0, start). Each part is one query read as the batches need codes (gRPC flow control keeps
the rest on the server), so a walk of a million codes holds no page in memory and costs two
queries; that matters on the emulator, which scans the whole collection for every query (about
35 µs a document here), and costs nothing in production, where a query is billed by the
documents it returns. The second query is opened while the first part is nearly done, so its
first answer is there when needed. Every candidate goes to one batch of this job: its batches
never collide with each other.

A query reads the pool as it was when it started. Codes taken meanwhile by the landing page or
another job make a batch's guarded commit fail, and the batch drops them; after STALE_AFTER
such codes the supply drops what it holds and queries again from where it stands.

When the walk is over, one query over the whole collection either finds codes the walk could
not see (released, or imported into ranges already passed) or shows the pool empty. Candidates
out with batches are still unassigned in the database: they are not handed out again, and the
pool is empty only once none is out (a batch may give some back), so a recipient is left without
a code only when no code is free. The job never records the campaign as sold out: that stays
the claim engine's proof (shared/claims/engine.py), which taking codes can only make truer.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from shared.coupons.store import Candidate

log = logging.getLogger(__name__)

# stream(low, low_inclusive, high, limit) -> unassigned candidates in random_float order, read
# as consumed; with low and high None, anywhere in the pool.
Stream = Callable[[float | None, bool, float | None, int], Iterator[Candidate]]
# Codes found taken by someone else after which the candidates held are dropped and the query
# started again.
STALE_AFTER = 16
# The next part's query is opened once this share of the current part has been walked.
OPEN_NEXT_AT = 0.9


@dataclass
class _Segment:
    low: float
    high: float
    floor: float
    inclusive: bool = True
    drained: bool = False
    stream: Iterator[Candidate] | None = None
    streamed: int = 0  # read from the current query
    opening: Future[Iterator[Candidate]] | None = None  # its query, opened ahead


@dataclass
class SupplyMetrics:
    queries: int = 0
    candidates: int = 0
    final_looks: int = 0
    flushes: int = 0


@dataclass
class CandidateSupply:
    stream: Stream
    start: float
    pull: int  # candidates read per refill
    query_limit: int  # most candidates one query may return
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
        self._refilling = False
        self._closed = False
        self._exhausted = False
        self._failure: BaseException | None = None
        self._taken_elsewhere = 0
        self._stale = False
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

    def settle(self, candidates: Sequence[Candidate], *, taken_elsewhere: int = 0) -> None:
        """Candidates now assigned: by the batch, or (`taken_elsewhere` of them) by someone
        else first."""
        with self._lock:
            for candidate in candidates:
                self._out.discard(candidate.coupon_id)
                self._known.discard(candidate.coupon_id)
            self._settlements += 1
            self._taken_elsewhere += taken_elsewhere
            if self._taken_elsewhere >= STALE_AFTER:
                # The query has gone stale: what it still holds was read as long ago.
                self._taken_elsewhere = 0
                self._stale = True
                self.metrics.flushes += 1
                for candidate in self._items:
                    self._known.discard(candidate.coupon_id)
                self._items.clear()
            self._changed.notify_all()

    def give_back(self, candidates: Sequence[Candidate]) -> None:
        """Candidates a batch did not use and found still free: handed out first."""
        with self._lock:
            for candidate in candidates:
                self._out.discard(candidate.coupon_id)
            self._items.extendleft(reversed(candidates))
            self._settlements += 1
            self._changed.notify_all()

    def close(self) -> None:
        """End the queries still open. A refill under way (a prefetch may outlive the job's
        batches) is reading one of them: it ends them itself when it is done."""
        with self._lock:
            self._closed = True
            if self._refilling:
                return
        self._close_streams()

    def _close_streams(self) -> None:
        for segment in self._segments:
            for stream in (segment.stream, _done(segment.opening)):
                if isinstance(stream, Generator):
                    stream.close()
            segment.stream = segment.opening = None

    # --- refilling ----------------------------------------------------------------------------
    def _walk_over(self) -> bool:
        return all(segment.drained for segment in self._segments)

    def _claim_prefetch_locked(self) -> bool:
        if (
            self._refilling
            or self._closed
            or self._exhausted
            or self._walk_over()
            or len(self._items) >= self.pull
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
                closed = self._closed
                self._changed.notify_all()
        else:
            with self._lock:
                # A query started again, or the final look, meets candidates out with batches.
                fresh = [c for c in found if c.coupon_id not in self._known]
                self._known.update(c.coupon_id for c in fresh)
                self._items.extend(fresh)
                self.metrics.candidates += len(fresh)
                self._refilling = False
                closed = self._closed
                self._changed.notify_all()
        if closed:
            self._close_streams()  # closed while this refill read them (see close)

    def _next_candidates(self) -> list[Candidate]:
        """Up to `pull` candidates from the walk; after the walk, what the final look found."""
        with self._lock:
            stale, self._stale = self._stale, False
        if stale:
            for segment in self._segments:
                segment.stream = None  # started again from the segment's floor
        found: list[Candidate] = []
        walk_ended = False
        while len(found) < self.pull:
            index = next((i for i, s in enumerate(self._segments) if not s.drained), None)
            if index is None:
                # A taker that holds candidates returns them first: the final look is for one
                # that holds none (see take).
                return found if found or walk_ended else self._final_look()
            segment = self._segments[index]
            if segment.stream is None:
                segment.stream = self._open(segment)
                segment.streamed = 0
            candidate = next(segment.stream, None)
            if candidate is None:
                if segment.streamed < self.query_limit:
                    segment.drained = True  # everything unassigned in it has been seen
                    walk_ended = self._walk_over()
                segment.stream = None
                continue
            segment.streamed += 1
            segment.floor, segment.inclusive = candidate.random_float, False
            found.append(candidate)
            self._open_next_early(index, segment)
        return found

    def _open(self, segment: _Segment) -> Iterator[Candidate]:
        opening, segment.opening = segment.opening, None
        if opening is not None and segment.floor == segment.low:
            return opening.result()
        self.metrics.queries += 1
        return self.stream(segment.floor, segment.inclusive, segment.high, self.query_limit)

    def _open_next_early(self, index: int, segment: _Segment) -> None:
        """Start the next part's query in the background near the end of this part."""
        if index + 1 >= len(self._segments):
            return
        following = self._segments[index + 1]
        walked = (segment.floor - segment.low) / ((segment.high - segment.low) or 1.0)
        if following.opening is not None or following.drained or walked < OPEN_NEXT_AT:
            return
        self.metrics.queries += 1
        opening: Future[Iterator[Candidate]] = Future()
        following.opening = opening

        def run() -> None:
            try:
                stream = self.stream(following.low, True, following.high, self.query_limit)
                first = next(stream, None)  # the query's latency is paid here, not by a batch
                opening.set_result(itertools.chain([first], stream) if first else iter(()))
            except Exception as exc:  # the refill that needs it raises it
                log.warning("opening the next query failed", exc_info=True)
                opening.set_exception(exc)

        threading.Thread(target=run, name="supply-open", daemon=True).start()

    def _final_look(self) -> list[Candidate]:
        with self._lock:
            settlements = self._settlements
        found = list(self.stream(None, True, None, self.pull))
        self.metrics.queries += 1
        self.metrics.final_looks += 1
        with self._lock:
            fresh = [c for c in found if c.coupon_id not in self._known]
            if fresh:
                # Released or imported behind the walk: walk again from the start.
                for segment in self._segments:
                    segment.floor, segment.inclusive, segment.drained = segment.low, True, False
                    segment.stream = None
                self._empty_at = None
            elif self._known:
                self._empty_at = settlements  # look again once a batch has settled
            else:
                self._exhausted = True
                log.info("no unassigned code left", extra={"queries": self.metrics.queries})
        return found


def _done(opening: Future[Iterator[Candidate]] | None) -> Iterator[Candidate] | None:
    if opening is None or not opening.done() or opening.exception() is not None:
        return None
    return opening.result()
