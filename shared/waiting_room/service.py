"""The waiting room as the claim path uses it: tickets in and out, one threshold for the whole
room, and stock awareness.

One threshold, whatever the instance count: every instance writes a heartbeat document for the
campaign every couple of seconds (sooner while it is new or the queue is young) carrying its own
per-slot ticket counts and admissions (a RoomShare), and reads everyone's in the same refresh,
so each instance computes the threshold from the same counts with the same rule, over the
first attempts every instance has reported on (see admission.AdmissionController). No shared
document is on the path of a poll: one request per instance and campaign refreshes, the others
decide from memory. Each instance's leaky bucket takes its share of the rate among the
live instances (a heartbeat in the last few seconds), with room for the chance of the load
balancer sending it more.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from google.api_core.exceptions import GoogleAPIError
from google.cloud import firestore

from shared.cache import WhenDue
from shared.campaigns.models import CampaignRecord, WaitingRoomStatus
from shared.errors import WaitingRoom
from shared.gcp.firestore import room_instances_collection
from shared.settings import Settings
from shared.waiting_room.admission import (
    AdmissionController,
    RoomShare,
    Ticket,
    TicketSigner,
    UnreadableShare,
    start_place,
)

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 2.0
# A new instance looks again sooner at first: the others' counts tell it where the room is.
FIRST_HEARTBEATS_SECONDS = (0.1, 0.2, 0.4, 0.8, 1.6)
LIVE_SECONDS = 6.0
# Admissions of the last STOCK_WINDOW seconds may not exceed this instance's share of the
# remaining codes. Short, because an admitted shopper claims at once and the counters catch up
# within about a second; after that the claim is in `remaining` and must not count twice.
STOCK_WINDOW_SECONDS = 2.0
STOCK_SLACK = 1.1


def heartbeat_interval(done: int) -> float:
    """How long after its `done`-th heartbeat an instance writes (and reads) the next."""
    if done < len(FIRST_HEARTBEATS_SECONDS):
        return FIRST_HEARTBEATS_SECONDS[done]
    return HEARTBEAT_SECONDS


# The admission rate an operator sees is averaged over this many seconds of heartbeats.
OBSERVED_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class RoomObservation:
    """The room as its heartbeats tell it, for operators (an estimate: every instance publishes
    its counts every couple of seconds)."""

    queue_depth: int  # shoppers holding a ticket the threshold has not passed yet
    admitted_per_second: float
    instances: int  # instances whose heartbeat is recent


def observe(shares: list[RoomShare], *, live: int, now: float, tick: float) -> RoomObservation:
    """Queue depth and admission rate from the instances' published shares.

    The room passed `base_passed` tickets before its base tick (the same at every settled
    instance), and every admission since then (all instances) passed one more; what was issued
    and not passed waits. A shopper let straight in while the room was open also counts as
    admitted, so the depth errs low just after a queue forms, never high."""
    if not shares:
        return RoomObservation(queue_depth=0, admitted_per_second=0.0, instances=live)
    issued = sum(share.before + sum(share.tickets) for share in shares)
    base = max((s for s in shares if s.settled), key=lambda s: s.base_tick, default=None)

    def admitted(first: int, last: int) -> int:
        total = 0
        for share in shares:
            start = max(first, share.first_tick) - share.first_tick
            end = min(last, share.first_tick + len(share.admitted)) - share.first_tick
            total += sum(share.admitted[start:end]) if end > start else 0
        return total

    depth = 0.0
    if base is not None:
        passed = base.base_passed + admitted(base.base_tick, math.floor(now / tick) + 1)
        depth = max(0.0, issued - passed)
    window = max(1, round(OBSERVED_SECONDS / tick))
    current = math.floor(now / tick)  # still filling: left out of the rate
    rate = admitted(current - window, current) / (window * tick)
    return RoomObservation(queue_depth=round(depth), admitted_per_second=rate, instances=live)


# The drawn entries of a fair drop count in every instance's room as this peer's tickets.
DRAWN_PEER = "drawn-entries"
# While a fair drop's draw is being made (seconds), everybody asks again this soon.
DRAWING_RETRY_SECONDS = 1


@dataclass(frozen=True, slots=True)
class RoomPass:
    ticket: str | None  # to hand back (cookie) so the next request keeps its place
    # For a fair drop's records: the admitted ticket's first attempt, the threshold it passed.
    first_attempt: float | None = None
    threshold: float | None = None


@dataclass(frozen=True, slots=True)
class DrawnQueue:
    """A fair drop's drawn entries (shared/fairness), queued ahead of everyone who comes after
    the start: the room counts them as one more instance's tickets, at first attempts before
    the start in place order, and an entrant's ticket carries their place's first attempt."""

    # The entries' tickets given the room's threshold (None: the draw is not made yet, and
    # nobody passes until it is).
    share: Callable[[float], RoomShare] | None
    first_attempt: float | None = None  # this shopper's place as a first attempt (an entrant)


@dataclass
class _Room:
    controller: AdmissionController
    admitted: deque[float]
    lock: threading.Lock
    # When this instance exchanges heartbeats next, how many instances were live at the last
    # exchange, and how many heartbeats it has written.
    heartbeat: WhenDue = field(default_factory=WhenDue)
    instances: int = 1
    heartbeats: int = 0
    drawn: Callable[[float], RoomShare] | None = None


class WaitingRoomService:
    def __init__(
        self,
        *,
        db: firestore.Client,
        settings: Settings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._settings = settings
        self._clock = clock
        self._signer = TicketSigner(
            secret=settings.ticket_signing_key,
            max_age_seconds=settings.ticket_max_age_seconds,
            max_wait_seconds=settings.ticket_max_wait_seconds,
            clock=clock,
        )
        self._instance_id = uuid.uuid4().hex[:12]
        self._rooms: dict[str, _Room] = {}
        self._rooms_lock = threading.Lock()

    @property
    def signer(self) -> TicketSigner:
        return self._signer

    def _room(self, campaign_id: str, now: float) -> _Room:
        with self._rooms_lock:
            room = self._rooms.get(campaign_id)
            if room is None:
                controller = AdmissionController(
                    rate=1.0,
                    tick_seconds=self._settings.waiting_room_tick_seconds,
                    kp=self._settings.waiting_room_kp,
                    now=now,
                )
                room = _Room(controller=controller, admitted=deque(), lock=threading.Lock())
                self._rooms[campaign_id] = room
            return room

    def live_instances(self, room: _Room, campaign_id: str, now: float) -> int:
        """Instances serving this campaign's room, from heartbeats (this one included).

        One request per instance and campaign exchanges heartbeats while the others go on with
        what the room knows (only the very first request waits for it): without that, every
        request arriving after the interval writes the same heartbeat document at once, and
        under a burst those writes abort on contention and fail the shoppers' claims."""
        try:
            room.heartbeat.run(now, lambda at: self._exchange(room, campaign_id, at))
        except GoogleAPIError:
            if room.heartbeat.due_at is None:
                raise
            # Go on with what the room knows; the next request retries.
        return room.instances

    def _exchange(self, room: _Room, campaign_id: str, now: float) -> None:
        """Write this instance's heartbeat (its counts) and read everyone's."""
        with room.lock:
            share = room.controller.share(now)
        beats = room_instances_collection(self._db, campaign_id)
        beats.document(self._instance_id).set({"seen_at": now, "share": share.fields()})
        shares: dict[str, RoomShare] = {}
        live = {self._instance_id}
        for snapshot in beats.stream():
            data = snapshot.to_dict() or {}
            if now - float(data.get("seen_at", 0)) < LIVE_SECONDS:
                live.add(snapshot.id)
            if snapshot.id == self._instance_id or "share" not in data:
                continue
            try:
                shares[snapshot.id] = RoomShare.from_fields(data["share"])
            except UnreadableShare as exc:
                # Another version's heartbeat (during a deploy): its counts cannot be read, so
                # the room goes on without them rather than fail every claim.
                log.warning(
                    "waiting-room heartbeat unreadable",
                    extra={"campaign_id": campaign_id, "instance": snapshot.id, "error": repr(exc)},
                )
                live.discard(snapshot.id)
        with room.lock:
            if room.drawn is not None:
                shares[DRAWN_PEER] = room.drawn(room.controller.threshold(now))
            room.controller.update_peers(shares, live=live, now=now)
            room.instances = len(live)
            room.heartbeats += 1
            # Sooner while this instance learns the room or the queue is young (the horizon, the
            # oldest heartbeat heard, must stay ahead of the threshold).
            interval = heartbeat_interval(room.heartbeats - 1)
            room.heartbeat.due_at = now + room.controller.heartbeat_within(now, interval)

    def admit(
        self,
        *,
        campaign: CampaignRecord,
        user_id: str,
        ticket_token: str | None,
        remaining: int,
        drawn: DrawnQueue | None = None,
    ) -> RoomPass:
        """Let the shopper through, or raise WaitingRoom (429) with their ticket."""
        if not campaign.waiting_room_enabled:
            return RoomPass(ticket=None)
        now = self._clock()
        ticket = (
            self._signer.verify(ticket_token, campaign_id=campaign.campaign_id, user_id=user_id)
            if ticket_token
            else None
        )
        room = self._room(campaign.campaign_id, now)
        if drawn is not None:
            if drawn.share is None:
                # Nobody passes, and nobody gets a place, before the drawn entries are in line.
                raise WaitingRoom(
                    "The drop's draw is being made; retry after the given time.",
                    retry_after=DRAWING_RETRY_SECONDS,
                    details={
                        "ticket": None,
                        "retry_after_ms": DRAWING_RETRY_SECONDS * 1000,
                        "estimated_wait_seconds": None,
                    },
                )
            room.drawn = drawn.share
            if drawn.first_attempt is not None:
                # An entrant's place is their first attempt, whatever ticket they bring.
                ticket = Ticket(campaign.campaign_id, user_id, first_attempt=drawn.first_attempt)
        instances = self.live_instances(room, campaign.campaign_id, now)
        with room.lock:
            # Read again under the lock: the heartbeat above may have taken a while, and the
            # controller must see time in the order it decides (its bucket, its slots).
            now = self._clock()
            room.controller.set_rate(campaign.admissions_per_second, instances=instances)
            if ticket is None:
                place = start_place(
                    now,
                    starts_at=campaign.starts_at.timestamp(),
                    window=self._settings.waiting_room_start_window_seconds,
                    draw=random.random(),
                )
                ticket = Ticket(campaign.campaign_id, user_id, first_attempt=place)
                decision = room.controller.arrive(now, place)
            else:
                decision = room.controller.decide(ticket.first_attempt, now)
            while room.admitted and now - room.admitted[0] > STOCK_WINDOW_SECONDS:
                room.admitted.popleft()
            stock_cap = max(1, math.ceil(remaining * STOCK_SLACK / instances))
            admitted = decision.admitted and len(room.admitted) < stock_cap
            if admitted:
                room.admitted.append(now)
                threshold = room.controller.threshold(now)
            else:
                retry = room.controller.retry_after(ticket.first_attempt, now, random.random())
                # A place still to come (the start window): no use asking before it.
                retry = max(retry, ticket.first_attempt - now)
        # Signed afresh at every poll, with the original first attempt: the ticket's life slides
        # with the shopper's polls, their place stays where it was.
        token = self._signer.issue(ticket)
        if admitted:
            return RoomPass(ticket=token, first_attempt=ticket.first_attempt, threshold=threshold)
        retry_ms = int(retry * 1000)
        wait = decision.estimated_wait_seconds
        raise WaitingRoom(
            "The sale is busy: you have a place in line; retry after the given time.",
            retry_after=max(1, math.ceil(retry_ms / 1000)),
            details={
                "ticket": token,
                "retry_after_ms": retry_ms,
                "estimated_wait_seconds": round(wait, 1) if math.isfinite(wait) else None,
            },
        )

    def observe(self, campaign_id: str) -> RoomObservation:
        """The room of a campaign as operators see it: one query of its heartbeats (one read per
        instance that served it)."""
        now = self._clock()
        shares: list[RoomShare] = []
        live = 0
        for snapshot in room_instances_collection(self._db, campaign_id).stream():
            data = snapshot.to_dict() or {}
            if now - float(data.get("seen_at", 0)) < LIVE_SECONDS:
                live += 1
            try:
                shares.append(RoomShare.from_fields(data["share"]))
            except (KeyError, UnreadableShare):
                continue  # another version's heartbeat: its counts cannot be read
        return observe(shares, live=live, now=now, tick=self._settings.waiting_room_tick_seconds)

    def status(self, campaign: CampaignRecord) -> WaitingRoomStatus:
        if not campaign.waiting_room_enabled:
            return WaitingRoomStatus(enabled=False, engaged=False, estimated_wait_seconds=0.0)
        now = self._clock()
        room = self._room(campaign.campaign_id, now)
        with room.lock:
            backlog = room.controller.backlog(now)
            wait = room.controller.estimated_wait(now + 1e-6, now) if backlog else 0.0
        return WaitingRoomStatus(
            enabled=True,
            engaged=backlog > 0,
            estimated_wait_seconds=round(wait, 1) if math.isfinite(wait) else 0.0,
        )
