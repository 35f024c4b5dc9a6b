"""Fair admission for flash sales: signed first-attempt tickets and a threshold that a
proportional controller moves forward (Shopify's design), with a leaky bucket behind it.

Per function instance (as Shopify did per load balancer): tickets whose first-attempt time is at
or before the instance's threshold are admissible. Every tick the threshold advances over the
tickets this instance issued, by as many as its share of the admission rate allows, corrected by
a proportional term on the error between that share and what it actually admitted in the last
tick. With no backlog the threshold follows the clock, so with spare capacity everybody passes
at once. The leaky bucket caps the admitted rate whatever the threshold does.

The pure logic here takes time as an argument, so the simulation benchmark and the unit tests
drive it with a virtual clock.
"""

from __future__ import annotations

import bisect
import itertools
import math
import struct
import time
import zlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, SignatureExpired, TimestampSigner, URLSafeTimedSerializer

from shared.errors import RequestValidationFailed

# Tickets are counted in slots of this many seconds of first-attempt time. The threshold can
# stop inside a slot (its tickets taken as spread evenly over it), so the slot only bounds how
# far that assumption can be off; finer slots mean longer heartbeat documents.
SLOT_SECONDS = 0.02
# The last this many ticks are recomputed from everyone's data each time, so a heartbeat may be
# this late and still count: several heartbeat periods.
WINDOW_TICKS = 10
# The admissions of all instances in a tick are known everywhere this many ticks later (two
# heartbeat periods and the time a heartbeat takes to be seen).
FEEDBACK_DELAY_TICKS = 5
# The proportional correction never exceeds this fraction of a tick's worth of the rate.
MAX_CORRECTION = 0.2
# Shoppers due at the next tick ask again within this fraction of a tick after it starts.
DUE_JITTER = 0.25
# Those the threshold has just passed, or all but (a fraction of a quota away), ask again within
# this many ticks: instances may differ that much while the others' heartbeats are on their way.
NEAR = 0.1
NEAR_RETRY = (0.2, 0.4)
# The threshold sets the rate; each instance's leaky bucket only catches what would exceed it by
# more than chance explains. The load balancer sends an instance a random share of the shoppers
# the threshold passes, and a bucket that turns some away at random takes their place in line.
BUCKET_HEADROOM = 1.25
BUCKET_DEVIATIONS = 3.0
# While the queue is young, heartbeats go round faster: this many per queue length (first
# attempt at the threshold to now), but not more often than FRESH_HEARTBEAT_SECONDS.
HEARTBEATS_PER_QUEUE = 4
FRESH_HEARTBEAT_SECONDS = 0.1
# Own ticket counts kept (and published) this many slots before the threshold.
HISTORY_SLOTS = 100


def bucket(share: float, tick: float, instances: int) -> tuple[float, float]:
    """(rate, capacity) of an instance's bucket for `share` admissions a tick on average:
    alone, just that; one of several, room for more and for the chance of the load balancer
    sending it more."""
    if instances <= 1:
        return share / tick, max(1.0, share)
    capacity = max(1.0, BUCKET_HEADROOM * share + BUCKET_DEVIATIONS * math.sqrt(share))
    return capacity / tick, capacity


class InvalidTicket(RequestValidationFailed):
    error_code = "INVALID_TICKET"
    default_message = "The waiting-room ticket is not valid."


@dataclass(frozen=True, slots=True)
class Ticket:
    campaign_id: str
    user_id: str
    first_attempt: float  # epoch seconds


# A first attempt a little in the future is another instance's clock running ahead.
CLOCK_SKEW_SECONDS = 60.0


class _ClockedSigner(TimestampSigner):
    """itsdangerous's timestamp signer on the waiting room's clock (virtual in tests)."""

    def __init__(self, *args: Any, clock: Callable[[], float], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clock = clock

    def get_timestamp(self) -> int:
        return int(self._clock())


class TicketSigner:
    """Signed, expiring tickets bound to a campaign and a shopper (itsdangerous, HMAC-SHA1
    over a JSON payload with a timestamp).

    Two clocks bound a ticket: its signature is valid for `max_age_seconds` after it was
    signed, and the service re-signs it at every poll (sliding expiry: a shopper who keeps
    polling never loses their place); its first attempt, signed inside, is never older than
    `max_wait_seconds`, so no ticket lives forever."""

    def __init__(
        self,
        *,
        secret: str,
        max_age_seconds: int,
        max_wait_seconds: int = 86_400,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._serializer = URLSafeTimedSerializer(
            secret,
            salt="codedrop-waiting-room-ticket",
            signer=_ClockedSigner,
            signer_kwargs={"clock": clock},
        )
        self._max_age = max_age_seconds
        self._max_wait = max_wait_seconds
        self._clock = clock

    def issue(self, ticket: Ticket) -> str:
        payload = {"c": ticket.campaign_id, "u": ticket.user_id, "t": ticket.first_attempt}
        token: str = self._serializer.dumps(payload)
        return token

    def verify(self, token: str, *, campaign_id: str, user_id: str) -> Ticket:
        try:
            payload = self._serializer.loads(token, max_age=self._max_age)
        except SignatureExpired as exc:
            raise InvalidTicket("The waiting-room ticket has expired; ask again.") from exc
        except BadSignature as exc:
            raise InvalidTicket("The waiting-room ticket is forged or damaged.") from exc
        if not isinstance(payload, dict) or payload.get("c") != campaign_id:
            raise InvalidTicket("The waiting-room ticket is for another campaign.")
        if payload.get("u") != user_id:
            raise InvalidTicket("The waiting-room ticket belongs to another shopper.")
        first_attempt = payload.get("t")
        if not isinstance(first_attempt, int | float) or isinstance(first_attempt, bool):
            raise InvalidTicket("The waiting-room ticket is malformed.")
        now = self._clock()
        if not now - self._max_wait <= first_attempt <= now + CLOCK_SKEW_SECONDS:
            raise InvalidTicket("The waiting-room ticket has expired; ask again.")
        return Ticket(campaign_id=campaign_id, user_id=user_id, first_attempt=float(first_attempt))


class LeakyBucket:
    def __init__(self, *, rate: float, capacity: float, now: float) -> None:
        self.rate, self.capacity = rate, capacity
        self._level = 0.0
        self._at = now

    def take(self, now: float) -> bool:
        # Concurrent callers may bring clocks read a moment apart: never leak backwards.
        if now > self._at:
            self._level = max(0.0, self._level - (now - self._at) * self.rate)
            self._at = now
        if self._level + 1 <= self.capacity:
            self._level += 1
            return True
        return False


@dataclass(frozen=True, slots=True)
class Decision:
    admitted: bool
    estimated_wait_seconds: float


@dataclass(frozen=True, slots=True)
class RoomShare:
    """What an instance publishes in its heartbeat: its own tickets and admissions, and where
    its threshold stood, so that every instance computes the threshold from the same data."""

    published_at: float
    first_slot: int  # the slot of tickets[0]
    before: int  # this instance's tickets in earlier slots
    tickets: tuple[int, ...]  # this instance's tickets per slot
    first_tick: int  # the tick of admitted[0]
    # This instance's admissions per tick.
    admitted: tuple[int, ...]
    tick: int  # the tick of `passed`
    passed: float  # tickets (all instances') the threshold had passed at that tick's start

    def fields(self) -> dict[str, Any]:
        return {
            "published_at": self.published_at,
            "first_slot": self.first_slot,
            "before": self.before,
            # Thousands of small counts: packed and compressed, a few kB a heartbeat.
            "tickets": zlib.compress(struct.pack(f"<{len(self.tickets)}I", *self.tickets)),
            "first_tick": self.first_tick,
            "admitted": list(self.admitted),
            "tick": self.tick,
            "passed": self.passed,
        }

    @classmethod
    def from_fields(cls, data: Mapping[str, Any]) -> RoomShare:
        return cls(
            published_at=float(data["published_at"]),
            first_slot=int(data["first_slot"]),
            before=int(data["before"]),
            tickets=_unpack(data["tickets"]),
            first_tick=int(data["first_tick"]),
            admitted=tuple(int(n) for n in data["admitted"]),
            tick=int(data["tick"]),
            passed=float(data["passed"]),
        )


def _unpack(packed: bytes) -> tuple[int, ...]:
    raw = zlib.decompress(packed)
    return struct.unpack(f"<{len(raw) // 4}I", raw)


@dataclass(slots=True)
class _Peer:
    share: RoomShare
    live: bool

    @property
    def known_slots(self) -> int:
        """Slots before this one are complete in the share; later ones are guessed."""
        return math.floor(self.share.published_at / SLOT_SECONDS)


def _contribution(peer: _Peer, slot: int, own: Mapping[int, int]) -> float:
    """What an instance adds to a slot of the histogram: what it published, or, for a slot
    after its last heartbeat and while it lives, a guess: as many as this instance issued (a
    load balancer spreads shoppers evenly)."""
    share = peer.share
    if slot >= peer.known_slots and peer.live:
        return own.get(slot, 0)
    index = slot - share.first_slot
    return share.tickets[index] if 0 <= index < len(share.tickets) else 0


class AdmissionController:
    """One instance's view of one campaign's room. Not thread-safe: callers hold a lock.

    Every instance computes the threshold from the tickets and admissions of all instances (its
    own, and the others' from their heartbeats) with the same deterministic rule, so the
    thresholds agree whichever instance a shopper's poll reaches:

    - G(x): tickets issued, over all instances, with a first attempt before x. Counts an instance
      has not published yet (the last heartbeat or two) are guessed from this instance's own
      counts in the same slots: a load balancer spreads shoppers evenly.
    - the quota of tick m: tick * (rate + kp * (rate - admitted in tick m-1 over all instances)),
      the proportional controller of Shopify's design; its integral Q(a, b) from time a to b.
    - P(t), the tickets passed by time t: min(G(t), min over past tick starts s of G(s) +
      Q(s, t)) - what the quota could have passed since the room was last caught up, without
      passing tickets that do not exist. It is recomputed from the data of the last
      WINDOW_TICKS ticks each time (so late heartbeats correct it) on top of a base frozen
      before them.
    - the threshold: the first attempt x where G(x) = P(t). With no backlog it is now.

    Then, as per instance before: a ticket at or before the threshold is admissible, and a
    leaky bucket (this instance's share of the rate) caps the rate whatever the threshold does.
    """

    def __init__(self, *, rate: float, tick_seconds: float, kp: float, now: float) -> None:
        self.rate = rate
        self.tick = tick_seconds
        self.kp = kp
        leak, capacity = bucket(rate * tick_seconds, tick_seconds, 1)
        self._bucket = LeakyBucket(rate=leak, capacity=capacity, now=now)
        self._own: dict[int, int] = {}  # slot -> tickets issued here
        self._own_before = 0  # tickets issued here in slots already dropped
        self._own_admitted: dict[int, int] = {}  # tick -> admissions here
        self._peers: dict[str, _Peer] = {}
        # A new instance starts from what the others say (or, heard by none for a whole window,
        # from nothing: it is the room).
        self._adopted = False
        self._created_tick = self._tick_of(now)
        self._data_from = self._created_tick
        self._base_tick = self._created_tick
        self._base_passed = 0.0
        self._threshold = now
        self._keep_from = self._slot_of(now) - HISTORY_SLOTS
        # The merged histogram: counts per slot from _origin, all instances, guesses included.
        self._origin = self._keep_from
        self._before = 0.0
        self._counts: list[float] = []
        self._folded = False  # whether slots were ever summed into _before
        self._prefix: list[float] = [0.0]
        self._dirty = False
        self._guessing = 0  # live peers whose counts of new slots are guessed from ours
        self._passed_at: dict[int, float] = {}  # tick -> P at its start (cache)
        self._quotas: dict[int, float] = {}  # tick -> its quota (cache)

    # --- configuration ------------------------------------------------------------------------
    def set_rate(self, rate: float, *, instances: int = 1) -> None:
        """The room's rate (all instances), and this instance's share of it for the bucket."""
        if rate != self.rate:
            self.rate = rate
            self._passed_at.clear()
            self._quotas.clear()
        self._bucket.rate, self._bucket.capacity = bucket(
            rate * self.tick / max(1, instances), self.tick, instances
        )

    # --- time ---------------------------------------------------------------------------------
    def _tick_of(self, t: float) -> int:
        return math.floor(t / self.tick)

    @staticmethod
    def _slot_of(t: float) -> int:
        return math.floor(t / SLOT_SECONDS)

    # --- the histogram ------------------------------------------------------------------------
    def record_issued(self, first_attempt: float) -> None:
        slot = self._slot_of(first_attempt)
        self._own[slot] = self._own.get(slot, 0) + 1
        self._add(slot, 1 + self._guessing)

    def _add(self, slot: int, count: float) -> None:
        index = slot - self._origin
        if index < 0:
            self._before += count
            return
        if index >= len(self._counts):
            self._counts.extend([0.0] * (index + 1 - len(self._counts)))
        self._counts[index] += count
        self._dirty = True

    def _merge(self, old: _Peer | None, new: _Peer) -> None:
        """Bring one instance's counts in the histogram from its `old` share to its `new` one.

        Counts of slots it had already published are final (tickets get the time they are
        issued at): only what lies after the older of the two publication times changes, where
        a guess (our own count, for a live instance) gives way to what it published."""
        share = new.share
        if old is None:
            self._before += share.before
            start = share.first_slot
        else:
            start = min(old.known_slots, new.known_slots)
        last = max(
            share.first_slot + len(share.tickets),
            max(self._own, default=start) + 1,
            old.share.first_slot + len(old.share.tickets) if old is not None else start,
        )
        for slot in range(start, last):
            delta = _contribution(new, slot, self._own)
            if old is not None:
                delta -= _contribution(old, slot, self._own)
            if delta:
                self._add(slot, delta)
        self._dirty = True

    def _fold(self, origin: int) -> None:
        """Move the histogram's start forward to `origin`: earlier slots only count in total."""
        shift = origin - self._origin
        if shift <= 0:
            return
        self._folded = True
        self._before += sum(self._counts[:shift])
        del self._counts[:shift]
        self._origin = origin
        self._dirty = True

    def _cumulative(self) -> list[float]:
        if self._dirty:
            self._prefix = list(itertools.accumulate(self._counts, initial=self._before))
            self._dirty = False
        return self._prefix

    def issued_before(self, x: float) -> float:
        """G(x): tickets of all instances with a first attempt before x (spread evenly over
        each slot)."""
        prefix = self._cumulative()
        position = x / SLOT_SECONDS - self._origin
        index = math.floor(position)
        if index < 0:
            return prefix[0]
        if index >= len(self._counts):
            return prefix[-1]
        return prefix[index] + (position - index) * self._counts[index]

    def _first_attempt_at(self, passed: float) -> float:
        """The inverse of G: where `passed` tickets have been passed."""
        prefix = self._cumulative()
        if passed <= prefix[0]:
            return self._origin * SLOT_SECONDS
        index = bisect.bisect_left(prefix, passed) - 1
        if index >= len(self._counts):
            return (self._origin + len(self._counts)) * SLOT_SECONDS
        within = (passed - prefix[index]) / self._counts[index] if self._counts[index] else 1.0
        return (self._origin + index + min(1.0, within)) * SLOT_SECONDS

    # --- admissions and the quota -------------------------------------------------------------
    def _admitted_in(self, tick: int) -> float:
        """Requests of all instances that passed the threshold in a tick (guessed from ours for
        an instance not heard of since)."""
        own = self._own_admitted.get(tick, 0)
        total = float(own)
        end = (tick + 1) * self.tick
        for peer in self._peers.values():
            share = peer.share
            index = tick - share.first_tick
            published = share.admitted[index] if 0 <= index < len(share.admitted) else 0
            total += own if peer.live and share.published_at < end else published
        return total

    def _quota(self, tick: int) -> float:
        """What the threshold passes at the end of `tick`: a tick's worth of the rate, plus the
        proportional correction for what a tick admitted (all instances). With other instances
        that tick is FEEDBACK_DELAY_TICKS older: every instance has heard of it by then, so all
        compute the same quota."""
        quota = self._quotas.get(tick)
        if quota is None:
            target = self.rate * self.tick
            observed = tick - (FEEDBACK_DELAY_TICKS if self._peers else 0)
            error = 0.0  # nothing measured yet: no correction
            if observed >= self._data_from:
                error = target - self._admitted_in(observed)
            # Bounded: a burst at the start (everyone passing at once) must not echo ticks later.
            bound = MAX_CORRECTION * target
            quota = max(0.0, target + self.kp * max(-bound, min(bound, error)))
            self._quotas[tick] = quota
        return quota

    def _passed_at_tick(self, tick: int) -> float:
        """P at the start of `tick`: min(base + Q, min over window ticks j of G(j) + Q(j))."""
        cached = self._passed_at.get(tick)
        if cached is not None:
            return cached
        best = self._base_passed
        for j in range(self._base_tick, tick):
            best = min(best + self._quota(j), self.issued_before((j + 1) * self.tick))
        self._passed_at[tick] = best
        return best

    def _slide(self, now: float) -> None:
        """Freeze the base WINDOW_TICKS behind, and drop what no longer matters."""
        current = self._tick_of(now)
        if not self._adopted and current - self._created_tick > WINDOW_TICKS:
            self._adopted = True  # heard nobody in a whole window: this instance is the room
        if current - self._base_tick <= WINDOW_TICKS:
            return
        new_base = current - WINDOW_TICKS
        self._base_passed = self._passed_at_tick(new_base)
        self._base_tick = new_base
        self._passed_at = {k: v for k, v in self._passed_at.items() if k >= new_base}
        self._quotas = {k: v for k, v in self._quotas.items() if k >= new_base}
        for tick in [t for t in self._own_admitted if t < self._first_kept_tick()]:
            del self._own_admitted[tick]
        keep_from = self._slot_of(min(self._threshold, new_base * self.tick)) - HISTORY_SLOTS
        if keep_from > self._keep_from:
            self._keep_from = keep_from
            old = [s for s in self._own if s < keep_from]
            self._own_before += sum(self._own.pop(s) for s in old)
            self._fold(min([keep_from, *(p.share.first_slot for p in self._peers.values())]))

    def passed(self, now: float) -> float:
        """P(now): tickets the threshold has passed by now."""
        self._slide(now)
        return self._passed_at_tick(self._tick_of(now))

    def heartbeat_within(self, now: float, longest: float) -> float:
        """How soon this instance should exchange heartbeats again: the threshold stops among
        first attempts the others' heartbeats have not reported yet (guesses differ from one
        instance to another) unless their counts are fresher than the queue is long."""
        if not self._peers or self.backlog(now) < 0.5:
            return longest
        age = now - self._threshold
        return max(FRESH_HEARTBEAT_SECONDS, min(longest, age / HEARTBEATS_PER_QUEUE))

    def backlog(self, now: float) -> float:
        """Tickets the threshold has not passed yet: nobody waits when it is below one."""
        return max(0.0, self.issued_before(now) - self.passed(now))

    def threshold(self, now: float) -> float:
        """The first attempt up to which tickets are admissible (with no backlog, now)."""
        passed = self.passed(now)
        if passed >= self.issued_before(now) - 0.5:
            position = now
        else:
            position = min(now, self._first_attempt_at(passed))
        self._threshold = position
        return position

    def retry_after(self, first_attempt: float, now: float, draw: float) -> float:
        """When a shopper told to wait should ask again; `draw` is uniform in [0, 1).

        Someone the threshold passes at the next tick's start (or has passed, but the bucket
        was full) asks just after it, so that all instances' decisions on them come from the
        same tick; everyone else within 0.5-1 tick, which spreads the polls."""
        ahead = self.issued_before(first_attempt) - self.passed(now)
        quota = self.rate * self.tick
        if ahead <= NEAR * quota:
            # Within what instances may disagree on: another instance may admit them now.
            return (NEAR_RETRY[0] + (NEAR_RETRY[1] - NEAR_RETRY[0]) * draw) * self.tick
        if ahead <= quota:
            next_tick = (self._tick_of(now) + 1) * self.tick
            return next_tick - now + draw * DUE_JITTER * self.tick
        return (0.5 + 0.5 * draw) * self.tick

    def estimated_wait(self, first_attempt: float, now: float) -> float:
        if first_attempt <= self.threshold(now):
            return 0.0
        ahead = self.issued_before(first_attempt) - self.passed(now)
        return max(0.0, ahead) / self.rate if self.rate > 0 else math.inf

    # --- decisions ----------------------------------------------------------------------------
    def _first_kept_tick(self) -> int:
        """The oldest tick whose requests a quota still needs."""
        return self._base_tick - FEEDBACK_DELAY_TICKS - 1

    def _count(self, now: float) -> None:
        tick = self._tick_of(now)
        self._own_admitted[tick] = self._own_admitted.get(tick, 0) + 1

    def arrive(self, now: float) -> Decision:
        """A shopper's first attempt. Without a backlog (spare capacity) it passes at once."""
        if self.backlog(now) < 0.5 and self._bucket.take(now):
            self._count(now)
            return Decision(admitted=True, estimated_wait_seconds=0.0)
        self.record_issued(now)
        return Decision(admitted=False, estimated_wait_seconds=self.estimated_wait(now, now))

    def decide(self, first_attempt: float, now: float) -> Decision:
        if first_attempt <= self.threshold(now) and self._bucket.take(now):
            self._count(now)
            return Decision(admitted=True, estimated_wait_seconds=0.0)
        return Decision(
            admitted=False, estimated_wait_seconds=self.estimated_wait(first_attempt, now)
        )

    # --- sharing ------------------------------------------------------------------------------
    def share(self, now: float) -> RoomShare:
        """This instance's part, for its heartbeat."""
        self._slide(now)
        tick = self._tick_of(now)
        first_slot = self._keep_from
        last_slot = max(self._own, default=first_slot - 1)
        first_tick = self._first_kept_tick()
        return RoomShare(
            published_at=now,
            first_slot=first_slot,
            before=self._own_before,
            tickets=tuple(self._own.get(s, 0) for s in range(first_slot, last_slot + 1)),
            first_tick=first_tick,
            admitted=tuple(self._own_admitted.get(t, 0) for t in range(first_tick, tick + 1)),
            tick=tick,
            passed=self._passed_at_tick(tick),
        )

    def update_peers(self, shares: Mapping[str, RoomShare], *, live: Collection[str]) -> None:
        """The other instances' heartbeats, all of them (an instance gone stays: its shoppers
        still hold their tickets). A new instance takes the base of the freshest live one."""
        if not self._adopted:
            heard = [share for name, share in shares.items() if name in live]
            if heard:
                freshest = max(heard, key=lambda s: (s.tick, s.passed))
                self._base_tick, self._base_passed = freshest.tick, freshest.passed
                self._adopted = True
        start = min((share.first_slot for share in shares.values()), default=self._origin)
        if start < self._origin and not self._folded:
            # A new instance: the others' counts go back further than its own.
            self._counts[:0] = [0.0] * (self._origin - start)
            self._origin = start
            self._dirty = True
        for name, share in shares.items():
            old = self._peers.get(name)
            new = _Peer(share, name in live)
            if old is None or old.share != share or old.live != new.live:
                self._merge(old, new)
                self._peers[name] = new
        for name in set(self._peers) - set(shares):
            # Its heartbeat is gone; its shoppers still hold tickets: keep what it said.
            old = self._peers[name]
            if old.live:
                self._merge(old, _Peer(old.share, live=False))
                self._peers[name] = _Peer(old.share, live=False)
        self._guessing = sum(1 for p in self._peers.values() if p.live)
        self._passed_at.clear()
        self._quotas.clear()
