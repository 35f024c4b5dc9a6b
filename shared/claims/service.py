"""A claim as the API performs it: the campaign read once (the instance's copy), its rules
(policy), the waiting room, the engine's atomic assignment of that record, then its event; and
the landing page's reads of the same copy."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from google.cloud import firestore

from shared.campaigns import service as campaign_service
from shared.campaigns.models import CampaignPublic, CampaignRecord, CampaignStatus
from shared.claims import policy
from shared.claims import store as claim_store
from shared.claims.engine import ClaimEngine
from shared.claims.events import ClaimEvents
from shared.claims.models import ClaimRecord, HeldClaim, HeldClaims
from shared.claims.policy import AppCheck, Shopper
from shared.errors import CampaignNotActive, ClaimNotFound, CodedropError, WaitingRoom
from shared.fairness.models import EntryPublic
from shared.fairness.service import FairnessService
from shared.gcp.batched_reads import ReadCoalescer
from shared.usage.reading import UsageReader
from shared.waiting_room.service import RoomPass, WaitingRoomService


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """What the claim API answers."""

    claim: ClaimRecord
    created: bool  # a new code (or a replay of its Idempotency-Key), not the one already held
    valid_until: datetime | None  # by the record the engine decided on: redemption's judge
    ticket: str | None  # the waiting-room ticket to keep, when the room is enabled


class ClaimService:
    def __init__(
        self,
        *,
        db: firestore.Client,
        engine: ClaimEngine,
        events: ClaimEvents,
        room: WaitingRoomService,
        usage: UsageReader,
        fairness: FairnessService,
        app_check: AppCheck,
        clock: Callable[[], datetime],
        deadline_seconds: float,
    ) -> None:
        self._engine = engine
        self._app_check = app_check
        self._deadline_seconds = deadline_seconds
        self._events = events
        self._room = room
        self._usage = usage
        self._fairness = fairness
        self._clock = clock
        # A shopper reading their codes back right after the claim: concurrent read-backs share
        # one batched read (each still started after its request arrived).
        self._reader = ReadCoalescer(db=db)

    def campaign(self, campaign_id: str) -> CampaignRecord:
        """The campaign as claims see it: the instance's copy (ClaimEngine.campaign), which
        landing pages poll."""
        return self._engine.campaign(campaign_id)

    def public_campaign(self, campaign_id: str) -> CampaignPublic:
        """The campaign as a landing page shows it: status, codes left, the room."""
        campaign = self.campaign(campaign_id)
        return campaign_service.public_view(
            campaign,
            now=self._clock(),
            remaining=self._usage.remaining(campaign),
            room=self._room.status(campaign),
        )

    def held(self, campaign_id: str, shopper: Shopper) -> HeldClaims:
        """The codes the shopper holds in the campaign, as its identity counts them: any of
        the person's accounts finds them. CLAIM_NOT_FOUND when there is none."""
        campaign = self.campaign(campaign_id)
        held = claim_store.held_claims(
            self._reader,
            campaign_id=campaign_id,
            holder=policy.holder_key(campaign, shopper),
            slots=campaign.slots,
        )
        if not held:
            raise ClaimNotFound(f"You hold no code in campaign {campaign_id!r}.")
        claims = [
            HeldClaim.model_validate(c, from_attributes=True).model_copy(
                update={"valid_until": campaign.valid_until(c.claimed_at)}
            )
            for c in held
        ]
        return HeldClaims(claims=claims)

    def enter(
        self, *, campaign_id: str, shopper: Shopper, app_check_token: str | None = None
    ) -> tuple[EntryPublic, bool]:
        """Join a fair drop's pre-queue, after the checks a claim passes (True: a new entry)."""
        campaign = self.campaign(campaign_id)
        holder = policy.admit(
            campaign, shopper, app_check=self._app_check, app_check_token=app_check_token
        )
        return self._fairness.join(campaign, holder)

    def claim(
        self,
        *,
        campaign_id: str,
        shopper: Shopper,
        idempotency_key: str | None = None,
        ticket: str | None = None,
        app_check_token: str | None = None,
    ) -> ClaimResult:
        started = time.monotonic()
        campaign = self.campaign(campaign_id)
        if not campaign.pre_queue_seconds:
            return self._claim(campaign, shopper, idempotency_key, ticket, app_check_token, started)
        # A fair drop's transparency report counts its refusals by reason, from the start (a
        # page that asks early is told to wait for it, not refused).
        try:
            return self._claim(campaign, shopper, idempotency_key, ticket, app_check_token, started)
        except CodedropError as exc:
            if not isinstance(exc, WaitingRoom) and self._clock() >= campaign.starts_at:
                self._fairness.refused(campaign, exc.error_code)
            raise

    def _claim(
        self,
        campaign: CampaignRecord,
        shopper: Shopper,
        idempotency_key: str | None,
        ticket: str | None,
        app_check_token: str | None,
        started: float,
    ) -> ClaimResult:
        user_id = shopper.user_id
        # Refused before the waiting room: a caller the sale does not accept never holds a place.
        holder = policy.admit(
            campaign, shopper, app_check=self._app_check, app_check_token=app_check_token
        )
        room_pass = RoomPass(ticket=None)
        if campaign.pre_queue_seconds and self._clock() < campaign.starts_at:
            # A fair drop's order is its draw: nobody holds a place in the room before it.
            raise CampaignNotActive("The drop has not started: join its pre-queue.")
        # Only a running sale has a room: before starts_at (or paused, or ended) the engine
        # answers at once (CAMPAIGN_NOT_ACTIVE, or a code already held), with no ticket and no
        # admission spent, so a try before the start earns no place ahead of the start's
        # arrivals.
        running = campaign.status_at(self._clock()) in (
            CampaignStatus.ACTIVE,
            CampaignStatus.SOLD_OUT,
        )
        if campaign.waiting_room_enabled and running:
            remaining = self._usage.remaining(campaign)
            # Once no code is left, nobody waits for one: the engine answers at once (SOLD_OUT,
            # or the code a holder already has).
            if remaining > 0 and not self._engine.sold_out(campaign):
                drawn = (
                    self._fairness.queue(campaign, holder) if campaign.pre_queue_seconds else None
                )
                try:
                    room_pass = self._room.admit(
                        campaign=campaign,
                        user_id=user_id,
                        ticket_token=ticket,
                        remaining=remaining,
                        drawn=drawn,
                    )
                except WaitingRoom as exc:
                    if drawn is not None:
                        exc.details.update(self._fairness.entry_of(campaign, holder))
                    raise
                if drawn is not None:
                    self._fairness.admitted(campaign, holder, room_pass)
        outcome = self._engine.claim(
            campaign, user_id=user_id, holder=holder, idempotency_key=idempotency_key
        )
        if outcome.created:
            # Awaited (with the claims that share its message), but never past the claim's own
            # deadline: on failure or timeout the event waits in the outbox and the shopper
            # still gets the code (the claim is committed). A replay publishes the same event
            # id again.
            left = started + self._deadline_seconds - time.monotonic()
            self._events.claimed(outcome.claim, timeout=max(left, 0.0))
        return ClaimResult(
            claim=outcome.claim,
            created=outcome.created,
            valid_until=outcome.valid_until,
            ticket=room_pass.ticket,
        )
