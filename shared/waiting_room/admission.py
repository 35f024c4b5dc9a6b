"""Fair admission for flash sales: signed first-attempt tickets and a threshold that a
proportional controller moves forward (Shopify's design), with a token bucket behind it.

One threshold for the whole room: tickets whose first attempt is at or before it are
admissible, whichever instance a poll reaches. Every instance computes it from the same data,
the per-slot ticket counts and per-tick admissions that all instances publish in their
heartbeats, and only over first-attempt time that every instance has reported on (the horizon):
counts not heard yet are never guessed, so two instances that have heard different heartbeats
may stop the threshold at different horizons, never put it at different places behind them.
With no queue anywhere an instance knows of, the threshold follows the clock and everybody
passes at once. The bucket caps the admitted rate whatever the threshold does.

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

from shared.errors import RequestValidationFailed, TicketNotYours
from shared.ratelimit.buckets import TokenBucket

# Tickets are counted in slots of this many seconds of first-attempt time. The threshold can
# stop inside a slot (its tickets taken as spread evenly over it), so the slot only bounds how
# far that assumption can be off; finer slots mean longer heartbeat documents.
SLOT_SECONDS = 0.02
# The last this many ticks are recomputed from everyone's data each time, so a heartbeat may be
# this late and still count: several heartbeat periods.
WINDOW_TICKS = 10
# The quota of a tick corrects for the admissions of the tick this many ticks earlier: every
# instance has normally heard of them by the time the quota applies (two heartbeat periods and
# the time a heartbeat takes to be seen). Until it has, an instance takes the smallest quota
# the correction allows.
FEEDBACK_DELAY_TICKS = 6
# The proportional correction never exceeds this fraction of a tick's worth of the rate.
MAX_CORRECTION = 0.2
# A heartbeat is visible to every reader within this long of its time stamp (a slow write, the
# instances' clocks). So an instance that a read did not see had issued no ticket before the
# read's time minus this, and an instance has seen every one that wrote a heartbeat before its
# own first once it has read this long after it.
HEARD_WITHIN_SECONDS = 0.5
# Shoppers due at the next tick ask again within this fraction of a tick after it starts.
DUE_JITTER = 0.25
# Those the threshold has passed, or all but (a fraction of a quota away), ask again within
# this many ticks: the horizon that holds them back moves with every heartbeat exchange.
NEAR = 0.1
NEAR_RETRY = (0.2, 0.4)
# The threshold sets the rate; each instance's bucket only catches what would exceed it by
# more than chance explains. The load balancer sends an instance a random share of the shoppers
# the threshold passes, and a bucket that turns some away at random takes their place in line.
BUCKET_HEADROOM = 1.25
BUCKET_DEVIATIONS = 3.0
# While the queue is young (or the horizon holds the threshold), heartbeats go round faster:
# this many per queue length (first attempt at the threshold to now), but not more often than
# FRESH_HEARTBEAT_SECONDS, which is also the pace of an instance still learning the room.
HEARTBEATS_PER_QUEUE = 4
FRESH_HEARTBEAT_SECONDS = 0.1
# Own ticket counts kept (and published) this many slots before the threshold.
HISTORY_SLOTS = 100


def bucket_shape(share: float, tick: float, instances: int) -> tuple[float, float]:
    """(rate, burst) of an instance's bucket for `share` admissions a tick on average: alone,
    just that; one of several, room for more and for the chance of the load balancer sending
    it more."""
    if instances <= 1:
        return share / tick, max(1.0, share)
    burst = max(1.0, BUCKET_HEADROOM * share + BUCKET_DEVIATIONS * math.sqrt(share))
    return burst / tick, burst


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
            # Bound to the account it was issued to: a fair drop's place is not transferable.
            raise TicketNotYours("The waiting-room ticket belongs to another shopper.")
        first_attempt = payload.get("t")
        if not isinstance(first_attempt, int | float) or isinstance(first_attempt, bool):
            raise InvalidTicket("The waiting-room ticket is malformed.")
        now = self._clock()
        if not now - self._max_wait <= first_attempt <= now + CLOCK_SKEW_SECONDS:
            raise InvalidTicket("The waiting-room ticket has expired; ask again.")
        return Ticket(campaign_id=campaign_id, user_id=user_id, first_attempt=float(first_attempt))


@dataclass(frozen=True, slots=True)
class Decision:
    admitted: bool
    estimated_wait_seconds: float


class UnreadableShare(Exception):
    """A heartbeat document written by another version of the service."""


@dataclass(frozen=True, slots=True)
class RoomShare:
    """What an instance publishes in its heartbeat: its own tickets and admissions, and the
    room's base (a tick, and the tickets passed at its start, which every instance computes
    alike), so that a newcomer starts where the room stands."""

    published_at: float  # its counts are complete for the slots and ticks before this time
    first_slot: int  # the slot of tickets[0]
    before: int  # this instance's tickets in earlier slots
    tickets: tuple[int, ...]  # this instance's tickets per slot
    first_tick: int  # the tick of admitted[0]
    # This instance's admissions per tick.
    admitted: tuple[int, ...]
    base_tick: int
    base_passed: float  # tickets (all instances') the threshold had passed at base_tick's start
    since: int  # the room's first tick
    settled: bool  # whether base and since are the room's (or still this new instance's own)

    def fields(self) -> dict[str, Any]:
        return {
            "published_at": self.published_at,
            "first_slot": self.first_slot,
            "before": self.before,
            # Many small counts: packed and compressed, to keep the heartbeat document small.
            "tickets": zlib.compress(struct.pack(f"<{len(self.tickets)}I", *self.tickets)),
            "first_tick": self.first_tick,
            "admitted": list(self.admitted),
            "base_tick": self.base_tick,
            "base_passed": self.base_passed,
            "since": self.since,
            "settled": self.settled,
        }

    @classmethod
    def from_fields(cls, data: Mapping[str, Any]) -> RoomShare:
        try:
            return cls(
                published_at=float(data["published_at"]),
                first_slot=int(data["first_slot"]),
                before=int(data["before"]),
                tickets=_unpack(data["tickets"]),
                first_tick=int(data["first_tick"]),
                admitted=tuple(int(n) for n in data["admitted"]),
                base_tick=int(data["base_tick"]),
                base_passed=float(data["base_passed"]),
                since=int(data["since"]),
                settled=bool(data["settled"]),
            )
        except (KeyError, TypeError, ValueError, zlib.error, struct.error) as exc:
            raise UnreadableShare(f"not a heartbeat this version reads: {exc!r}") from exc

    def count(self, slot: int) -> int:
        index = slot - self.first_slot
        return self.tickets[index] if 0 <= index < len(self.tickets) else 0

    @property
    def end_slot(self) -> int:
        return self.first_slot + len(self.tickets)

    @property
    def known_slots(self) -> int:
        """Slots before this one are complete in the share; later ones may still grow."""
        return math.floor(self.published_at / SLOT_SECONDS)


def _unpack(packed: bytes) -> tuple[int, ...]:
    raw = zlib.decompress(packed)
    return struct.unpack(f"<{len(raw) // 4}I", raw)


@dataclass(frozen=True, slots=True)
class _Peer:
    share: RoomShare
    live: bool


def start_place(now: float, *, starts_at: float, window: float, draw: float) -> float:
    """A new arrival's place in line (its ticket's first attempt), which is `now` except around
    a sale's start. Everyone who arrives in the first `window` seconds after `starts_at` gets a
    place drawn uniformly (`draw` in [0, 1)) from [starts_at + window, starts_at + 2 window):
    by then all of that window has arrived, so their order owes nothing to who polled first
    (bots polling every few milliseconds at the start gain nothing). Who arrives later queues
    behind all of them, in arrival order. A place never lies in the past, so a ticket is
    counted where every instance's counts already are; the price is that nobody of the first
    window is admitted before starts_at + window."""
    if window <= 0 or not starts_at <= now < starts_at + 2 * window:
        return now
    if now < starts_at + window:
        return starts_at + window * (1 + draw)
    return starts_at + 2 * window


class AdmissionController:
    """One instance's view of one campaign's room. Not thread-safe: callers hold a lock.

    Every instance computes the threshold from the tickets and admissions of all instances (its
    own, and the others' from their heartbeats) with the same deterministic rule:

    - G(x): tickets issued, over all instances, with a first attempt before x, as far as heard.
    - H, the horizon: the first attempt up to which this instance has every instance's counts:
      the oldest heartbeat it holds from a live instance, and its last read less
      HEARD_WITHIN_SECONDS (an instance that read did not see issued nothing before that). A dead
      instance (its heartbeat stale) stops holding it back; what it had published still counts.
    - the quota of tick m: tick * (rate + kp * (rate - admitted in tick m - FEEDBACK_DELAY_TICKS
      over all instances)), the proportional controller of Shopify's design.
    - B(m), the tickets passed before tick m: min(B(m-1) + quota(m-1), G(m * tick)) (a quota
      left unused is lost), from a base frozen WINDOW_TICKS behind (and only over ticks before
      H, so the base is the same at every instance), recomputed from there each time so late
      heartbeats count. P, what the threshold passes during tick m: B(m) + quota(m).
    - the threshold: with a queue, the first attempt x where G(x) = P, but never past H; below
      H, G is the same at every instance, so so is the threshold. With no queue this instance
      knows of (every ticket it knows of was issued before the tick and passed): now.

    An instance starting a room it has not heard of yet (the start of a sale) gives everyone a
    ticket until it has read HEARD_WITHIN_SECONDS after its first heartbeat or heard a settled
    instance, so that no instance lets shoppers straight in while another already queues
    earlier ones; its base (and the room's first tick) is then the earliest instance's (nobody
    had a ticket before that one existed). A newcomer to a settled room takes them from a
    settled instance's heartbeat.

    A token bucket (this instance's share of the rate) caps the rate whatever the threshold
    does.
    """

    def __init__(self, *, rate: float, tick_seconds: float, kp: float, now: float) -> None:
        self.rate = rate
        self.tick = tick_seconds
        self.kp = kp
        refill, burst = bucket_shape(rate * tick_seconds, tick_seconds, 1)
        self._bucket = TokenBucket(rate=refill, burst=burst, at=now)
        self._own: dict[int, int] = {}  # slot -> tickets issued here
        self._own_before = 0  # tickets issued here in slots already dropped
        self._own_admitted: dict[int, int] = {}  # tick -> admissions here
        self._peers: dict[str, _Peer] = {}
        self._first_read: float | None = None  # its first heartbeat exchange
        self._settled = False
        self._horizon = -math.inf  # nothing heard yet
        # tick -> the horizon at this instance's last exchange in the tick: the threshold could
        # pass nothing after it by the tick's end.
        self._held: dict[int, float] = {}
        self._base_tick = self._tick_of(now)
        self._base_passed = 0.0
        self._since = self._base_tick  # the room's first tick
        self._threshold = now
        self._keep_from = self._slot_of(now) - HISTORY_SLOTS
        # The merged histogram: counts per slot from _origin, all instances.
        self._origin = self._keep_from
        self._before = 0.0
        self._counts: list[float] = []
        self._folded = False  # whether slots were ever summed into _before
        self._prefix: list[float] = [0.0]
        self._dirty = False
        self._passed_at: dict[int, float] = {}  # tick -> B, passed before it (cache)
        self._quotas: dict[int, float] = {}  # tick -> its quota (cache)

    # --- configuration ------------------------------------------------------------------------
    def set_rate(self, rate: float, *, instances: int = 1) -> None:
        """The room's rate (all instances), and this instance's share of it for the bucket."""
        if rate != self.rate:
            self.rate = rate
            self._passed_at.clear()
            self._quotas.clear()
        self._bucket.rate, self._bucket.burst = bucket_shape(
            rate * self.tick / max(1, instances), self.tick, instances
        )

    # --- time ---------------------------------------------------------------------------------
    def _tick_of(self, t: float) -> int:
        return math.floor(t / self.tick)

    @staticmethod
    def _slot_of(t: float) -> int:
        return math.floor(t / SLOT_SECONDS)

    @property
    def horizon(self) -> float:
        """H: the first attempt up to which every instance's tickets are known here."""
        return self._horizon

    @property
    def settled(self) -> bool:
        return self._settled

    # --- the histogram ------------------------------------------------------------------------
    def record_issued(self, first_attempt: float) -> None:
        slot = self._slot_of(first_attempt)
        self._own[slot] = self._own.get(slot, 0) + 1
        self._add(slot, 1)

    def _add(self, slot: int, count: float) -> None:
        index = slot - self._origin
        if index < 0:
            self._before += count
            return
        if index >= len(self._counts):
            self._counts.extend([0.0] * (index + 1 - len(self._counts)))
        self._counts[index] += count
        self._dirty = True

    def _merge(self, old: RoomShare | None, new: RoomShare) -> None:
        """Bring one instance's counts in the histogram from its `old` share to its `new` one.

        Counts of slots it had already published are final (tickets get the time they are
        issued at): only what lies after the older of the two publication times changes, and
        the slots it stopped listing, which its `before` now counts."""
        if old is None:
            self._before += new.before
            start = new.first_slot
        else:
            for slot in range(old.first_slot, min(new.first_slot, old.end_slot)):
                self._add(slot, -old.count(slot))
            self._before += new.before - old.before
            self._dirty = True
            start = max(new.first_slot, min(old.known_slots, new.known_slots))
        end = max(new.end_slot, old.end_slot if old is not None else start)
        for slot in range(start, end):
            delta = new.count(slot) - (old.count(slot) if old is not None else 0)
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
        each slot), as far as heard."""
        prefix = self._cumulative()
        position = x / SLOT_SECONDS - self._origin
        index = math.floor(position)
        if index < 0:
            return prefix[0]
        if index >= len(self._counts):
            return prefix[-1]
        return prefix[index] + (position - index) * self._counts[index]

    def _first_attempt_at(self, passed: float) -> float:
        """The inverse of G: where `passed` tickets have been passed (past every ticket heard
        of: anywhere, up to the horizon)."""
        prefix = self._cumulative()
        if passed >= prefix[-1]:
            return math.inf
        if passed <= prefix[0]:
            return self._origin * SLOT_SECONDS
        index = bisect.bisect_left(prefix, passed) - 1
        within = (passed - prefix[index]) / self._counts[index] if self._counts[index] else 1.0
        return (self._origin + index + min(1.0, within)) * SLOT_SECONDS

    # --- admissions and the quota -------------------------------------------------------------
    def _admitted_in(self, tick: int) -> float:
        """Requests of all instances that passed the threshold in a tick."""
        total = float(self._own_admitted.get(tick, 0))
        for peer in self._peers.values():
            share = peer.share
            index = tick - share.first_tick
            total += share.admitted[index] if 0 <= index < len(share.admitted) else 0
        return total

    def _quota(self, tick: int) -> float:
        """What the threshold passes during `tick`: a tick's worth of the rate, plus the
        proportional correction for what the tick FEEDBACK_DELAY_TICKS older admitted (all
        instances). Every instance computes the same once it has heard of that tick from all;
        until then it takes the smallest quota the correction allows, never a larger one."""
        quota = self._quotas.get(tick)
        if quota is None:
            target = self.rate * self.tick
            bound = MAX_CORRECTION * target  # a burst must not echo ticks later
            observed = tick - FEEDBACK_DELAY_TICKS
            if (observed + 1) * self.tick > self._horizon:
                error = -bound
            elif observed < self._since:
                error = 0.0  # before the room: nothing to measure
            else:
                error = max(-bound, min(bound, target - self._admitted_in(observed)))
            quota = max(0.0, target + self.kp * error)
            self._quotas[tick] = quota
        return quota

    def _passed_at_tick(self, tick: int) -> float:
        """B(tick): min(B(j) + quota(j), G((j + 1) * tick)) from the base on."""
        cached = self._passed_at.get(tick)
        if cached is not None:
            return cached
        best = self._base_passed
        for j in range(self._base_tick, tick):
            # A quota the horizon held back is lost, not banked: released all at once when the
            # horizon moves, an exact bucket would let shoppers in by who polls first.
            end = min((j + 1) * self.tick, self._held_back(j))
            best = min(best + self._quota(j), self.issued_before(end) if end > -math.inf else 0.0)
        self._passed_at[tick] = best
        return best

    def _held_at(self, tick: int) -> float:
        """The horizon this instance had at the end of `tick` (-inf: nothing heard by then)."""
        earlier = [t for t in self._held if t <= tick]
        return self._held[max(earlier)] if earlier else -math.inf

    def _held_back(self, tick: int) -> float:
        """Where a lone instance's horizon stopped the threshold by the end of `tick` (inf with
        live peers: their buckets have headroom for a quota released late, and their horizons
        differ, so that a cap from any one of them would part the instances' thresholds)."""
        if any(peer.live for peer in self._peers.values()):
            return math.inf
        return self._held_at(tick)

    def _slide(self, now: float) -> None:
        """Freeze the base WINDOW_TICKS behind (never past the horizon, so that it is the same
        everywhere), and drop what no longer matters."""
        if not self._settled or not math.isfinite(self._horizon):
            return
        new_base = min(self._tick_of(now) - WINDOW_TICKS, math.floor(self._horizon / self.tick))
        if new_base <= self._base_tick:
            return
        self._base_passed = self._passed_at_tick(new_base)
        self._base_tick = new_base
        self._passed_at = {k: v for k, v in self._passed_at.items() if k >= new_base}
        last = self._held_at(new_base)
        self._held = {k: v for k, v in self._held.items() if k > new_base}
        self._held[new_base] = last
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
        """P(now): tickets the threshold passes in this tick (as far as the horizon lets it)."""
        self._slide(now)
        tick = self._tick_of(now)
        return self._passed_at_tick(tick) + self._quota(tick)

    def heartbeat_within(self, now: float, longest: float) -> float:
        """How soon this instance should exchange heartbeats again: at once while it learns the
        room; with a queue, several times per queue length, since the horizon (the oldest
        heartbeat heard) must stay ahead of the threshold for it to move freely."""
        if not self._settled:
            return FRESH_HEARTBEAT_SECONDS
        if self._open(now):
            return longest
        age = now - self.threshold(now)
        return max(FRESH_HEARTBEAT_SECONDS, min(longest, age / HEARTBEATS_PER_QUEUE))

    def backlog(self, now: float) -> float:
        """Tickets the threshold has not passed yet, as far as heard: nobody waits when it is
        below one."""
        return max(0.0, self.issued_before(now) - self.passed(now))

    def _open(self, now: float) -> bool:
        """Whether the room has no queue this instance knows of (and it knows the room): every
        ticket it knows of was issued before this tick and passed."""
        if not self._settled:
            return False
        self._slide(now)
        return self.issued_before(now) - self._passed_at_tick(self._tick_of(now)) < 0.5

    def threshold(self, now: float) -> float:
        """The first attempt up to which tickets are admissible (with no queue, now)."""
        if self._open(now):
            position = now
        else:
            passed = self.passed(now)
            position = min(now, self._horizon, self._first_attempt_at(passed))
        if math.isfinite(position):  # nothing heard yet: nobody passes, nothing to keep
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
            # Passed or all but: the horizon or the bucket holds them, for a moment.
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

    def arrive(self, now: float, place: float | None = None) -> Decision:
        """A shopper's first attempt. With no queue anywhere this instance knows of (spare
        capacity) it passes at once, unless its place in line is still to come (start_place):
        then it waits for it, as everyone of its start window does."""
        place = now if place is None else place
        if place <= now and self._open(now) and self._bucket.try_acquire(now):
            self._count(now)
            return Decision(admitted=True, estimated_wait_seconds=0.0)
        self.record_issued(place)
        wait = max(self.estimated_wait(place, now), place - now)
        return Decision(admitted=False, estimated_wait_seconds=wait)

    def decide(self, first_attempt: float, now: float) -> Decision:
        if first_attempt <= self.threshold(now) and self._bucket.try_acquire(now):
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
            base_tick=self._base_tick,
            base_passed=self._base_passed,
            since=self._since,
            settled=self._settled,
        )

    def update_peers(
        self, shares: Mapping[str, RoomShare], *, live: Collection[str], now: float
    ) -> None:
        """The other instances' heartbeats, all of them, as read at `now` (an instance gone
        stays: its shoppers still hold their tickets)."""
        start = min((share.first_slot for share in shares.values()), default=self._origin)
        if start < self._origin and not self._folded:
            # A new instance: the others' counts go back further than its own.
            self._counts[:0] = [0.0] * (self._origin - start)
            self._origin = start
            self._dirty = True
        for name, share in shares.items():
            old = self._peers.get(name)
            if old is None or old.share != share:
                self._merge(old.share if old is not None else None, share)
            self._peers[name] = _Peer(share, name in live)
        for name in set(self._peers) - set(shares):
            # Its heartbeat is gone; its shoppers still hold tickets: keep what it said.
            self._peers[name] = _Peer(self._peers[name].share, live=False)
        if self._first_read is None:
            self._first_read = now
        if not self._settled:
            self._settle(shares.values(), now - self._first_read)
        heard = [now - HEARD_WITHIN_SECONDS]
        heard += [peer.share.published_at for peer in self._peers.values() if peer.live]
        self._horizon = self._slot_of(min(heard)) * SLOT_SECONDS
        self._held[self._tick_of(now)] = self._horizon
        self._passed_at.clear()
        self._quotas.clear()

    def _settle(self, shares: Collection[RoomShare], exchanging: float) -> None:
        """Learn where the room stands: from a settled instance (its base is the room's), or,
        in a room that is only starting, from the earliest instance once every instance that
        wrote a heartbeat before this one's first has been heard (`exchanging`: seconds since
        this one's first)."""
        settled = [share for share in shares if share.settled]
        if settled:
            room = max(settled, key=lambda s: (s.base_tick, s.base_passed))
            self._base_tick, self._base_passed = room.base_tick, room.base_passed
            self._since = room.since
            self._settled = True
            return
        for share in shares:
            if share.base_tick < self._base_tick:
                self._base_tick, self._base_passed = share.base_tick, share.base_passed
        self._since = self._base_tick
        self._settled = exchanging >= HEARD_WITHIN_SECONDS
