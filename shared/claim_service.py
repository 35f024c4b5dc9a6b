"""A claim as the API performs it: the engine's atomic assignment, then its event."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from shared import events
from shared.claim_engine import ClaimEngine, ClaimOutcome
from shared.event_bus import EventBus


class ClaimService:
    def __init__(
        self, *, engine: ClaimEngine, bus: EventBus, clock: Callable[[], datetime]
    ) -> None:
        self.engine = engine
        self._bus = bus
        self._clock = clock

    def claim(
        self, *, campaign_id: str, user_id: str, idempotency_key: str | None = None
    ) -> ClaimOutcome:
        outcome = self.engine.claim(
            campaign_id=campaign_id, user_id=user_id, idempotency_key=idempotency_key
        )
        if outcome.created:
            # Awaited; on failure the event waits in the outbox and the shopper still gets
            # the code (the claim is committed). A replay publishes the same event id again.
            self._bus.publish(events.coupon_claimed(outcome.claim), now=self._clock())
        return outcome
