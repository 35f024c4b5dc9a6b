"""A per-instance pool of unassigned coupons that concurrent requests take distinct items from.

One query, outside any transaction, feeds many claims (a query inside a transaction would lock
what it read and serialise the claimers); each request takes a candidate nobody else in this
instance holds, and the commit (claims/store.commit_claim) is guarded by the candidate's update
time, so one taken meanwhile by another instance fails fast and the request moves on.

Candidates come from, in turn (docs/architecture.md, "The claim engine"; the segments in
shared/campaigns/segments.py):
1. a run of adjacent segments of the `random_float` space leased by this instance alone, about
   as many as its recent demand needs, read in order from a floor, each read recorded with one
   atomic write (raising `bottom`, renewing the lease, marking segments read to the end drained);
2. when no segment is free, a steal from the top of a segment another instance holds: a guarded
   write lowers its `top`, then a query reads what lies between, so nobody reads a coupon twice;
3. when every segment is drained, the sold-out proof (a random pivot over the whole
   collection), which finds codes in other instances' pools (taken only after this one has
   starved a while) or proves and records SOLD_OUT.
An import or a released code bumps the campaign's `pool_generation`, which reopens every segment
and resets every floor.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Protocol

from shared.campaigns import segments
from shared.campaigns.segments import Lease, Segment
from shared.clock import utcnow
from shared.coupons.store import Candidate
from shared.settings import Settings

log = logging.getLogger(__name__)

# The operator's tuning (the refill horizon, leases, patience) is in Settings (pool_*); these
# follow from how the pool works.
# Candidates found taken by another instance this many times in a row mean the pool is stale.
STALE_RUN_FLUSH = 16
# A refill brings at least this many times as long as refills take: a prefetch starts when half
# the pool is left, which must last until it lands.
REFILL_LATENCY_FACTOR = 2.0
# A refill never asks for fewer: a query costs about the same whatever it returns.
MIN_REFILL = 4
# A read takes the rest of its run when that is at most this much more than it wanted: a later
# query for the last few would cost as much.
TAIL_FACTOR = 1.5
# A run spans at least this many codes' worth, so a sparse campaign is found in a few runs.
MIN_RUN_CODES = 16
# Demand is measured over this window, and over no less than the span (a sale's first moments).
DEMAND_WINDOW_SECONDS = 2.0
MIN_DEMAND_SPAN_SECONDS = 0.25
# Segments one look asks for (fewer while only waiting for one to open), and the longest run.
OPEN_QUERY_LIMIT = 4
WAITING_QUERY_LIMIT = 2
MAX_RUN = 16
# A recorded read that lost a race is settled and written again this many times at most.
RECORD_ATTEMPTS = 3
# Every open segment seen is someone else's (or too thin to steal from): look again after this.
LEASED_BACKOFF_SECONDS = 2.0
# Steals are this far apart, doubling after each lost race up to the cap: instances starving at
# the end of a sale would otherwise all write the same few segments.
STEAL_INTERVAL_SECONDS = 0.1
MAX_STEAL_INTERVAL_SECONDS = 1.0
MAX_STEAL = 64
# How often a request waiting for a refill looks at the pool again.
WAIT_SECONDS = 0.05


class Exhausted(Enum):
    """What the sold-out prover found."""

    SOLD_OUT = "sold_out"  # proven empty and recorded on the campaign
    LOOK_AGAIN = "look_again"  # the campaign changed meanwhile (an import): scan again


class Supply(Protocol):
    """The Firestore reads and writes the pool needs (an in-memory one in the unit tests)."""

    def open_segments(
        self, *, generation: int, start: float, limit: int, drained_at: int
    ) -> list[Segment]: ...

    def get_segments(self, segment_ids: Sequence[str]) -> list[Segment]: ...

    def lease_run(self, run: Sequence[Segment], lease: Lease) -> list[Segment] | None: ...

    def record_progress(
        self, run: Sequence[Segment], *, reached: float, lease: Lease
    ) -> list[Segment] | None: ...

    def lower_top(self, segment: Segment, *, top: float, generation: int) -> Segment | None: ...

    def fetch(
        self, *, low: float, low_inclusive: bool, high: float, limit: int
    ) -> list[Candidate]: ...


# prove(limit) -> candidates still unassigned somewhere, or what an empty result meant
Prove = Callable[[int], "Sequence[Candidate] | Exhausted"]


class _Progress(Enum):
    FOUND = "found"  # look at the pool again
    WAIT = "wait"  # nothing yet: in flight here, leased elsewhere, or backing off
    EXHAUSTED = "exhausted"  # every segment drained and nothing to steal: prove


class PoolTimeout(Exception):
    """No candidate could be had before the request's deadline."""


@dataclass
class _Run:
    """Adjacent segments leased by this instance, read in order from `floor`."""

    segments: list[Segment]
    floor: float
    floor_inclusive: bool = True

    def reset(self) -> None:
        self.floor, self.floor_inclusive = self.segments[0].low, True


@dataclass
class PoolMetrics:
    queries: int = 0  # coupon queries of every kind
    segment_queries: int = 0
    leases: int = 0  # segments leased
    segment_races: int = 0  # guarded segment writes that found the segment changed
    drained: int = 0
    steals: int = 0
    proofs: int = 0
    flushes: int = 0


@dataclass
class CandidatePool:
    supply: Supply
    settings: Settings
    clock: Callable[[], datetime] = utcnow
    holder: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    rng: random.Random = field(default_factory=random.SystemRandom)
    metrics: PoolMetrics = field(default_factory=PoolMetrics)

    def __post_init__(self) -> None:
        self._lease_length = timedelta(seconds=self.settings.pool_lease_seconds)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._refilling = False
        self._stale_run = 0
        self._items: deque[Candidate] = deque()
        self._leased: set[str] = set()
        self._known: set[str] = set()  # in the pool or leased
        self._takes: deque[float] = deque()  # when candidates were taken (monotonic)
        self._waiting = 0  # requests waiting for a candidate
        self._run: _Run | None = None
        self._held_elsewhere: list[Segment] = []  # open segments leased by others, last seen
        self._free_seen: list[Segment] = []  # free ones seen by the last query, not taken
        # Nothing free and nothing worth stealing was seen: until a lease succeeds or the
        # generation changes, looking again only asks whether any segment is still open.
        self._only_waiting = False
        self._generation: int | None = None
        self._codes_total = 0
        self._sold_out_generation: int | None = None
        self._all_drained_generation: int | None = None
        self._look_for_segments_at = 0.0
        # The generation most open segments were drained at, where a query starts at random.
        self._drained_at = segments.NEVER_DRAINED
        self._steal_at = 0.0
        self._steal_pause = STEAL_INTERVAL_SECONDS
        self._prove_at = 0.0
        self._starved_since: float | None = None
        self._refill_seconds = 0.0  # how long refills that found codes took, smoothed

    # --- generation ---------------------------------------------------------------------------
    def observe_generation(self, generation: int, codes_total: int | None = None) -> bool:
        """New codes were imported or holds released (or this is the first look): every segment
        is open again and every floor goes back to the start. `codes_total` (the campaign's)
        sizes runs and steals: about codes_total / segments.COUNT coupons per fresh segment.
        True when the generation changed after a first look."""
        with self._lock:
            if codes_total is not None:
                self._codes_total = codes_total
            if generation == self._generation:
                return False
            first_look = self._generation is None
            if self._generation is not None:
                # What this pool saw drained is open again, most likely marked with that one.
                self._drained_at = self._generation
            self._generation = generation
            self._sold_out_generation = None
            self._all_drained_generation = None
            self._look_for_segments_at = self._steal_at = self._prove_at = 0.0
            self._steal_pause = STEAL_INTERVAL_SECONDS
            self._only_waiting = False
            self._free_seen = []  # read under the old generation: their guarded leases would fail
            if self._run is not None:
                self._run.reset()
            self._changed.notify_all()
            return not first_look

    def state(self) -> dict[str, object]:
        """What the pool holds and waits for, for a log line."""
        now = time.monotonic()
        with self._lock:
            return {
                "items": len(self._items),
                "leased": len(self._leased),
                "waiting": self._waiting,
                "refilling": self._refilling,
                "run": [s.segment_id for s in self._run.segments] if self._run else None,
                "all_drained": self._all_drained_generation == self._generation,
                "held_elsewhere": len(self._held_elsewhere),
                "starved_for": None
                if self._starved_since is None
                else round(now - self._starved_since, 3),
                "look_in": round(max(0.0, self._look_for_segments_at - now), 3),
                "steal_in": round(max(0.0, self._steal_at - now), 3),
                "prove_in": round(max(0.0, self._prove_at - now), 3),
                "horizon": round(self._horizon_locked(), 3),
                "metrics": asdict(self.metrics),
            }

    @property
    def sold_out(self) -> bool:
        with self._lock:
            return self._generation is not None and self._sold_out_generation == self._generation

    # --- taking -------------------------------------------------------------------------------
    def take(self, *, deadline: float, prove: Prove) -> Candidate | None:
        """Take a candidate; None once `prove` has shown the campaign holds no unassigned code.

        One refill runs at a time. When the pool runs low a refill starts in the background, so
        requests keep taking candidates instead of queueing behind a query.
        """
        with self._lock:
            self._waiting += 1
        try:
            return self._take(deadline, prove)
        finally:
            with self._lock:
                self._waiting -= 1

    def _take(self, deadline: float, prove: Prove) -> Candidate | None:
        while True:
            with self._lock:
                if self._items:
                    candidate = self._take_locked()
                    prefetch = len(self._items) < self._want_locked() // 2 and not self._refilling
                    if prefetch:
                        self._refilling = True
                else:
                    candidate, prefetch = None, False
                    if self._sold_out_generation is not None and (
                        self._sold_out_generation == self._generation
                    ):
                        return None
                    if self._refilling:
                        self._wait_locked(deadline, WAIT_SECONDS)
                        continue
                    self._refilling = True
            if candidate is not None:
                if prefetch:
                    threading.Thread(target=self._background_refill, daemon=True).start()
                return candidate
            # The pool is empty and this request refills it while the others wait.
            progress = _Progress.FOUND  # (if it raises, the others look again at once)
            try:
                progress = self._refill_or_prove(prove)
            finally:
                with self._lock:
                    self._refilling = False
                    # Nothing new: waking the others would only have them find nothing again.
                    if progress is not _Progress.WAIT:
                        self._changed.notify_all()
            if progress is _Progress.WAIT:
                with self._lock:
                    self._wait_locked(deadline, WAIT_SECONDS)

    def _wait_locked(self, deadline: float, at_most: float | None) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise PoolTimeout
        self._changed.wait(timeout=remaining if at_most is None else min(at_most, remaining))

    def _take_locked(self) -> Candidate:
        candidate = self._items.popleft()
        self._leased.add(candidate.coupon_id)
        self._takes.append(time.monotonic())
        self._starved_since = None
        return candidate

    def _horizon_locked(self, floor: float | None = None) -> float:
        """How many seconds of demand a refill brings (and so about how long a code waits in a
        pool before it is used): `floor`, or more when refills are slow."""
        if floor is None:
            floor = self.settings.pool_refill_seconds
        return min(
            self.settings.pool_max_refill_seconds,
            max(floor, REFILL_LATENCY_FACTOR * self._refill_seconds),
        )

    def _want_locked(self) -> int:
        """How many candidates a refill should bring: the recent demand over the refill horizon,
        or twice the requests waiting right now, whichever is more."""
        now = time.monotonic()
        while self._takes and now - self._takes[0] > DEMAND_WINDOW_SECONDS:
            self._takes.popleft()
        recent = 0
        if self._takes:
            # Over the window, or since the first take (a sale's first moments count fully).
            span = max(now - self._takes[0], MIN_DEMAND_SPAN_SECONDS)
            recent = math.ceil(len(self._takes) / span * self._horizon_locked())
        return max(MIN_REFILL, min(self.settings.pool_refill_size, max(recent, 2 * self._waiting)))

    def release(self, candidate: Candidate) -> None:
        """The commit failed for a reason that leaves the coupon free: give it to someone else."""
        with self._lock:
            self._leased.discard(candidate.coupon_id)
            self._items.appendleft(candidate)
            self._changed.notify_all()

    def settle(self, candidate: Candidate, *, taken_elsewhere: bool = False) -> None:
        """The coupon is assigned now: by us, or (a failed precondition) by another instance.

        A run of candidates taken elsewhere means this pool has gone stale: drop it and read
        afresh, instead of letting every request spend its attempts on codes that are gone.
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
                if self._run is not None:
                    self._run.reset()  # dropped candidates came from it: read it again
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
        progress = self._refill()
        if progress is not _Progress.EXHAUSTED:
            return progress
        now = time.monotonic()
        with self._lock:
            if self._leased or now < self._prove_at:
                return _Progress.WAIT  # candidates in flight here may come back
            generation = self._generation
            if self._starved_since is None:
                self._starved_since = now
            starved = now - self._starved_since
            # Codes in another instance's pool are used within about a refill horizon.
            patience = self._horizon_locked(self.settings.pool_starved_seconds)
            # Only what the requests waiting here need (other starving instances look too),
            # until it may take codes in flight elsewhere: then its own demand.
            limit = max(1, self._waiting)
            if starved >= patience:
                limit = max(limit, self._want_locked())
        result = prove(limit)
        self.metrics.proofs += 1
        if result is Exhausted.SOLD_OUT:
            with self._lock:
                if generation == self._generation:
                    self._sold_out_generation = generation
            return _Progress.FOUND
        if result is Exhausted.LOOK_AGAIN:
            return _Progress.FOUND
        # Codes in flight in another instance (about to use them) or left by one that died:
        # taken, and looked for again, only after starving a while (a look sooner finds the same).
        if starved < patience:
            with self._lock:
                self._prove_at = now - starved + patience
            return _Progress.WAIT
        return _Progress.FOUND if self._add(result) else _Progress.WAIT

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

    def _refill(self) -> _Progress:
        """Read this instance's run of segments (leasing another as needed) until the pool holds
        about the recent demand; failing that, steal from the top of others' segments."""
        started = time.monotonic()
        with self._lock:
            want = self._want_locked()
        added = 0
        # A read that brought half the demand is enough: topping up would cost a query of its
        # own, and the next prefetch starts when the pool is down to half anyway.
        for _ in range(4):
            if 2 * added >= want:
                break
            run = self._run or self._acquire(want - added)
            if run is None:
                break
            added += self._read(run, want - added)
        progress = _Progress.FOUND if added else self._steal(want)
        if progress is _Progress.FOUND:
            with self._lock:
                took = time.monotonic() - started
                self._refill_seconds = (
                    0.7 * self._refill_seconds + 0.3 * took if self._refill_seconds else took
                )
        return progress

    def _read(self, run: _Run, limit: int) -> int:
        """Read the next `limit` unassigned coupons of the run from its floor (all of the rest
        when that is little more, TAIL_FACTOR), then record how far in one atomic write
        (segments.record_progress)."""
        with self._lock:
            generation = self._generation
            low, inclusive = run.floor, run.floor_inclusive
            leased = list(run.segments)
            density = self._codes_total  # coupons per unit of random_float, at most
        if generation is None:
            return 0
        end = leased[-1].cursors(generation)[1]
        left = math.ceil((end - low) * density)
        # (Not in a sparse campaign: those few would sit here while other instances look.)
        if MIN_RUN_CODES <= left <= TAIL_FACTOR * limit:
            limit = min(self.settings.pool_refill_size, max(limit, left + left // 4 + 1))
        raw = self.supply.fetch(low=low, low_inclusive=inclusive, high=end, limit=limit)
        self.metrics.queries += 1
        reached = raw[-1].random_float if len(raw) == limit else end
        found = [c for c in raw if _owned(leased, c.random_float, generation)]
        lease = Lease(self.holder, self.clock() + self._lease_length, generation)
        recorded = self.supply.record_progress(leased, reached=reached, lease=lease)
        for _ in range(RECORD_ATTEMPTS - 1):
            if recorded is not None:
                break
            # A steal lowered a top meanwhile, or the lease was lost: keep what is still ours.
            self.metrics.segment_races += 1
            fresh = self.supply.get_segments([s.segment_id for s in leased])
            found = [c for c in found if _owned(fresh, c.random_float, generation)]
            if len(fresh) < len(leased) or not all(
                s.holder == self.holder and s.drained_generation < generation for s in fresh
            ):
                break
            recorded = self.supply.record_progress(fresh, reached=reached, lease=lease)
        with self._lock:
            if recorded is None or generation != self._generation:
                # Lost, or an import reset the floors: lease afresh next time. What was read
                # stays a candidate (the guarded commits settle a steal in between).
                self._run = None
            else:
                remaining = [s for s in recorded if s.drained_generation < generation]
                self.metrics.drained += len(recorded) - len(remaining)
                if remaining:
                    run.segments = remaining
                    run.floor, run.floor_inclusive = reached, False
                else:
                    self._run = None
        return self._add(found)

    def _acquire(self, want: int) -> _Run | None:
        """Lease a run of free adjacent segments, about as many as `want` needs: one small
        query from a random place, and one atomic guarded write."""
        with self._lock:
            generation = self._generation
            if (
                generation is None
                or self._all_drained_generation == generation
                or time.monotonic() < self._look_for_segments_at
            ):
                return None
            per_segment = max(1.0, self._codes_total / segments.COUNT)
            seen, self._free_seen = self._free_seen, []
            limit = WAITING_QUERY_LIMIT if self._only_waiting else OPEN_QUERY_LIMIT
            drained_at = self._drained_at
        length = max(1, min(MAX_RUN, math.ceil(max(want, MIN_RUN_CODES) / per_segment)))
        # Free segments the last query saw come first, with no read (the write tells if still
        # free), unless too few for the run: a short run would soon cost another query.
        runs = _adjacent_runs(seen, length)
        if (
            runs
            and len(runs[0]) == length
            and (run := self._lease(runs, seen, generation)) is not None
        ):
            return run
        found = self.supply.open_segments(
            generation=generation,
            start=self.rng.random(),
            limit=max(limit, length + 2),
            drained_at=drained_at,
        )
        self.metrics.segment_queries += 1
        now = self.clock()
        with self._lock:
            if not found:
                if generation == self._generation:
                    self._all_drained_generation = generation
                    self._held_elsewhere = []
                return None
            # Where the open segments really are, for the next query's start.
            self._drained_at = Counter(s.drained_generation for s in found).most_common(1)[0][0]
        free = [s for s in found if not s.leased_to_other(self.holder, now)]
        if free and (
            (run := self._lease(_adjacent_runs(free, length), free, generation)) is not None
        ):
            return run
        # Every open segment seen is someone else's: steal from their tops meanwhile, and look
        # for a free one again later (at once if only races were lost: others are free).
        held = [s for s in found if s.leased_to_other(self.holder, now)]
        with self._lock:
            self._held_elsewhere = held
            if held and not free:
                self._look_for_segments_at = time.monotonic() + LEASED_BACKOFF_SECONDS
        return None

    def _lease(
        self, runs: Sequence[list[Segment]], free: list[Segment], generation: int
    ) -> _Run | None:
        """Lease the first of `runs` (adjacent segments among `free`) that is still free; keep
        the others for next time. Two tries: a lost race means others are leasing here too."""
        lease = Lease(self.holder, self.clock() + self._lease_length, generation)
        for candidate_run in runs[:2]:
            leased = self.supply.lease_run(candidate_run, lease)
            if leased is None:
                self.metrics.segment_races += 1
                continue
            self.metrics.leases += len(leased)
            run = _Run(segments=leased, floor=leased[0].low)
            taken = {s.segment_id for s in candidate_run}
            with self._lock:
                if generation != self._generation:
                    return None
                self._run = run
                self._only_waiting = False
                self._free_seen = [s for s in free if s.segment_id not in taken]
            return run
        return None

    def _steal(self, want: int) -> _Progress:
        """Take from the top of a segment another instance holds (its holder reads from the
        bottom): lower the segment's `top` by about what is needed, guarded, then read what lies
        between. Stealers never read the same coupons as each other or as the holder."""
        now = time.monotonic()
        with self._lock:
            generation = self._generation
            if generation is None or self._all_drained_generation == generation:
                return _Progress.EXHAUSTED
            if now < self._steal_at:
                return _Progress.WAIT
            per_unit = max(self._codes_total, 1)  # coupons per unit of random_float, at most
            wanted = min(want, MAX_STEAL)
            # Whatever is left unread (its holder may have stopped reading).
            targets = [s for s in self._held_elsewhere if _width(s, generation) > 0]
            if not targets:
                # Every open segment seen is held and read to its top: what is left sits in
                # pools, which the sold-out proof finds without waiting for the leases to end.
                read_to_top = bool(self._held_elsewhere)
                self._held_elsewhere = []
                self._only_waiting = True
                return _Progress.EXHAUSTED if read_to_top else _Progress.WAIT
            self._steal_at = now + self._steal_pause
        # The widest unread parts are likeliest chosen: most is left there.
        target = self.rng.choices(targets, weights=[_width(s, generation) for s in targets])[0]
        for _ in range(2):
            bottom, top = target.cursors(generation)
            # At most the upper half (the holder reads from its bottom), unless it stopped.
            if self._idle(target):
                new_top = bottom
            else:
                new_top = max((bottom + top) / 2, top - 2 * wanted / per_unit)
            reserved = self.supply.lower_top(target, top=new_top, generation=generation)
            self.metrics.steals += 1
            if reserved is not None:
                break
            # Another steal, or the holder's progress, came first: read the segment again.
            self.metrics.segment_races += 1
            fresh = self.supply.get_segments([target.segment_id])
            self._replace_target(target, fresh[0] if fresh else None, generation)
            if not fresh or _width(fresh[0], generation) <= 0:
                return self._steal_lost()
            target = fresh[0]
        else:
            return self._steal_lost()
        # The holder has read up to `bottom` itself: start just above it.
        found = self.supply.fetch(
            low=new_top,
            low_inclusive=new_top > bottom,
            high=top,
            limit=self.settings.pool_refill_size,
        )
        self.metrics.queries += 1
        # Nothing there: its holder has read that far, or is about to. Leave it to them.
        self._replace_target(target, reserved if found else None, generation)
        if not self._add(found):
            # An empty top only drops that target, but an idle holder's segment taken whole and
            # found empty was the last one seen: what is left sits in pools, for the proof.
            with self._lock:
                if new_top == bottom and not self._held_elsewhere:
                    return _Progress.EXHAUSTED
            return _Progress.WAIT
        with self._lock:
            self._steal_pause = STEAL_INTERVAL_SECONDS
        return _Progress.FOUND

    def _idle(self, segment: Segment) -> bool:
        """Whether the holder last read (and renewed its lease) long ago."""
        if segment.lease_until is None:
            return True
        last_read = segment.lease_until - self._lease_length
        return (self.clock() - last_read).total_seconds() > self.settings.pool_idle_holder_seconds

    def _steal_lost(self) -> _Progress:
        with self._lock:
            self._steal_at = time.monotonic() + self._steal_pause
            self._steal_pause = min(MAX_STEAL_INTERVAL_SECONDS, 2 * self._steal_pause)
        return _Progress.WAIT

    def _replace_target(self, old: Segment, new: Segment | None, generation: int) -> None:
        with self._lock:
            self._held_elsewhere = [
                s for s in self._held_elsewhere if s.segment_id != old.segment_id
            ]
            if (
                new is not None
                and new.drained_generation < generation
                and _width(new, generation) > 0
                and new.leased_to_other(self.holder, self.clock())
            ):
                self._held_elsewhere.append(new)


def _width(segment: Segment, generation: int) -> float:
    """How much of the segment nobody has read or reserved yet."""
    bottom, top = segment.cursors(generation)
    return top - bottom


def _owned(run: Sequence[Segment], random_float: float, generation: int) -> bool:
    """Whether a coupon read over the run lies below its segment's top (above it, a steal has
    reserved it)."""
    return any(s.low <= random_float < s.cursors(generation)[1] for s in run)


def _adjacent_runs(found: Sequence[Segment], length: int) -> list[list[Segment]]:
    """The runs of up to `length` adjacent segments among `found` (in id order), longest first
    (in id order among equals)."""
    runs: list[list[Segment]] = []
    run: list[Segment] = []
    for segment in found:
        if run and (run[-1].high != segment.low or len(run) == length):
            runs.append(run)
            run = []
        run.append(segment)
    if run:
        runs.append(run)
    return sorted(runs, key=len, reverse=True)
