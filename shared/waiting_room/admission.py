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

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, SignatureExpired, TimestampSigner, URLSafeTimedSerializer

from shared.errors import RequestValidationFailed

# Tickets are counted in slots of this many seconds of first-attempt time. The threshold can
# stop inside a slot (its tickets taken as spread evenly over it), so the slot only bounds how
# far that assumption can be off: finer slots, closer counts, a longer scan for estimates.
SLOT_SECONDS = 0.01


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


class AdmissionController:
    """One instance's admission for one campaign. Not thread-safe: callers hold a lock."""

    def __init__(self, *, rate: float, tick_seconds: float, kp: float, now: float) -> None:
        self.rate = rate
        self.tick = tick_seconds
        self.kp = kp
        self.threshold = now
        self._tick_started = now
        self._admitted_this_tick = 0
        # [slot start, tickets still after the threshold, tickets issued in the slot], in order.
        self._waiting: deque[list[float]] = deque()
        self._bucket = LeakyBucket(rate=rate, capacity=max(1.0, rate * tick_seconds), now=now)

    def set_rate(self, rate: float) -> None:
        if rate != self.rate:
            self.rate = rate
            self._bucket.rate = rate
            self._bucket.capacity = max(1.0, rate * self.tick)

    @property
    def backlog(self) -> int:
        return int(sum(slot[1] for slot in self._waiting))

    def record_issued(self, first_attempt: float) -> None:
        slot = math.floor(first_attempt / SLOT_SECONDS) * SLOT_SECONDS
        if self._waiting and self._waiting[-1][0] == slot:
            self._waiting[-1][1] += 1
            self._waiting[-1][2] += 1
        else:
            self._waiting.append([slot, 1.0, 1.0])

    def _advance(self, now: float) -> None:
        while now - self._tick_started >= self.tick:
            self._tick_started += self.tick
            observed = self._admitted_this_tick / self.tick
            self._admitted_this_tick = 0
            # Proportional control: next tick admits the share plus a correction for the error.
            quota = max(0.0, self.tick * (self.rate + self.kp * (self.rate - observed)))
            self._move_threshold(quota, limit=self._tick_started)
        if not self._waiting:
            self.threshold = max(self.threshold, now)  # no backlog: the threshold follows the clock

    def _move_threshold(self, quota: float, *, limit: float) -> None:
        while self._waiting and quota > 0:
            slot = self._waiting[0]
            if slot[0] > limit:
                return
            taken = min(quota, slot[1])
            quota -= taken
            slot[1] -= taken
            if slot[1] <= 1e-9:
                self.threshold = max(self.threshold, slot[0] + SLOT_SECONDS)
                self._waiting.popleft()
            else:
                # Part of a slot: open only the part the quota covers (its tickets are taken
                # as spread evenly over it), not the whole slot, whose rest is charged again
                # to the next tick's quota.
                opened = SLOT_SECONDS * (1.0 - slot[1] / slot[2])
                self.threshold = max(self.threshold, slot[0] + opened)
        if not self._waiting:
            self.threshold = max(self.threshold, limit)

    def estimated_wait(self, first_attempt: float) -> float:
        if first_attempt <= self.threshold:
            return 0.0
        ahead = sum(slot[1] for slot in self._waiting if slot[0] < first_attempt)
        return ahead / self.rate if self.rate > 0 else math.inf

    def arrive(self, now: float) -> Decision:
        """A shopper's first attempt. Without a backlog (spare capacity) it passes at once."""
        self._advance(now)
        if not self._waiting and self._bucket.take(now):
            self.threshold = max(self.threshold, now)
            self._admitted_this_tick += 1
            return Decision(admitted=True, estimated_wait_seconds=0.0)
        self.record_issued(now)
        return Decision(admitted=False, estimated_wait_seconds=self.estimated_wait(now))

    def decide(self, first_attempt: float, now: float) -> Decision:
        self._advance(now)
        if first_attempt <= self.threshold and self._bucket.take(now):
            self._admitted_this_tick += 1
            return Decision(admitted=True, estimated_wait_seconds=0.0)
        return Decision(admitted=False, estimated_wait_seconds=self.estimated_wait(first_attempt))
