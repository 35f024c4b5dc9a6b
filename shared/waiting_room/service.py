"""The waiting room as the claim path uses it: tickets in and out, per-instance controllers,
the instance's share of the campaign's admission rate, and stock awareness.

Sharing the rate: each instance admits `admissions_per_second / live instances`, where live
instances are those that wrote a heartbeat for the campaign in the last few seconds. The
trade-off: the count lags a scale-out by a heartbeat or two, so a burst that starts new
instances briefly admits more than the target (each new instance starts with a fresh bucket),
and an instance that dies keeps its share until its heartbeat goes stale; the leaky bucket
bounds both. Coordinating one global threshold instead would put a shared document on the hot
path of every poll.
"""

from __future__ import annotations

import math
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from google.api_core.exceptions import GoogleAPIError
from google.cloud import firestore

from shared.campaigns.models import CampaignRecord, WaitingRoomStatus
from shared.errors import WaitingRoom
from shared.gcp.firestore import room_instances_collection
from shared.settings import Settings
from shared.waiting_room.admission import AdmissionController, Ticket, TicketSigner

HEARTBEAT_SECONDS = 2.0
LIVE_SECONDS = 6.0
# Admissions of the last STOCK_WINDOW seconds may not exceed this instance's share of the
# remaining codes. Short, because an admitted shopper claims at once and the counters catch up
# within about a second; after that the claim is in `remaining` and must not count twice.
STOCK_WINDOW_SECONDS = 2.0
STOCK_SLACK = 1.1


@dataclass(frozen=True, slots=True)
class RoomPass:
    ticket: str | None  # to hand back (cookie) so the next request keeps its place


@dataclass
class _Room:
    controller: AdmissionController
    admitted: deque[float]
    lock: threading.Lock


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
        self._instances: dict[str, tuple[int, float]] = {}
        self._refreshing: dict[str, threading.Lock] = {}

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

    def live_instances(self, campaign_id: str, now: float) -> int:
        """Instances serving this campaign's room, from heartbeats (this one included).

        One request per instance and campaign refreshes the count while the others go on with
        the last one (only the very first requests wait for it): without that, every request
        arriving after the count expires writes the same heartbeat document at once, and under
        a burst those writes abort on contention and fail the shoppers' claims."""
        cached = self._instances.get(campaign_id)
        if cached is not None and now - cached[1] < HEARTBEAT_SECONDS:
            return cached[0]
        with self._rooms_lock:
            refresh = self._refreshing.setdefault(campaign_id, threading.Lock())
        if not refresh.acquire(blocking=cached is None):
            assert cached is not None
            return cached[0]  # another request is refreshing it
        try:
            cached = self._instances.get(campaign_id)
            if cached is not None and now - cached[1] < HEARTBEAT_SECONDS:
                return cached[0]
            beats = room_instances_collection(self._db, campaign_id)
            try:
                beats.document(self._instance_id).set({"seen_at": now})
                live = sum(
                    1
                    for s in beats.stream()
                    if now - float((s.to_dict() or {}).get("seen_at", 0)) < LIVE_SECONDS
                )
            except GoogleAPIError:
                if cached is None:
                    raise
                return cached[0]  # keep the last count; the next request tries again
            count = max(live, 1)
            self._instances[campaign_id] = (count, now)
            return count
        finally:
            refresh.release()

    def admit(
        self,
        *,
        campaign: CampaignRecord,
        user_id: str,
        ticket_token: str | None,
        remaining: int,
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
        instances = self.live_instances(campaign.campaign_id, now)
        room = self._room(campaign.campaign_id, now)
        with room.lock:
            # Read again under the lock: the heartbeat above may have taken a while, and the
            # controller must see time in the order it decides (its bucket, its slots).
            now = self._clock()
            room.controller.set_rate(campaign.admissions_per_second / instances)
            if ticket is None:
                ticket = Ticket(campaign.campaign_id, user_id, first_attempt=now)
                decision = room.controller.arrive(now)
            else:
                decision = room.controller.decide(ticket.first_attempt, now)
            while room.admitted and now - room.admitted[0] > STOCK_WINDOW_SECONDS:
                room.admitted.popleft()
            stock_cap = max(1, math.ceil(remaining * STOCK_SLACK / instances))
            admitted = decision.admitted and len(room.admitted) < stock_cap
            if admitted:
                room.admitted.append(now)
        # Signed afresh at every poll, with the original first attempt: the ticket's life slides
        # with the shopper's polls, their place stays where it was.
        token = self._signer.issue(ticket)
        if admitted:
            return RoomPass(ticket=token)
        tick = self._settings.waiting_room_tick_seconds
        # Jitter spreads the polls; at most one tick, so an admissible shopper is seen in time.
        retry_ms = int(random.uniform(0.5, 1.0) * tick * 1000)
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

    def status(self, campaign: CampaignRecord) -> WaitingRoomStatus:
        if not campaign.waiting_room_enabled:
            return WaitingRoomStatus(enabled=False, engaged=False, estimated_wait_seconds=0.0)
        now = self._clock()
        room = self._room(campaign.campaign_id, now)
        with room.lock:
            backlog = room.controller.backlog
            wait = room.controller.estimated_wait(now + 1e-6) if backlog else 0.0
        return WaitingRoomStatus(
            enabled=True,
            engaged=backlog > 0,
            estimated_wait_seconds=round(wait, 1) if math.isfinite(wait) else 0.0,
        )
