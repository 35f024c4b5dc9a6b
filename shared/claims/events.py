"""What claims tell the `coupon-events` topic: each new claim's `coupon.claimed`, many to a
message, and a campaign's `campaign.sold_out`, once, when its proof is recorded.

A claim pays no announcement marker (its two writes are the budget): the claim document is the
durable record, and the sweep re-publishes a recent claim whose event the counters never saw
(shared/claims/recovery.py). An instance's concurrent claims of one campaign share a message
(`coupon.claimed.batch`, shared/events/models.py), so a sale's rate costs one Pub/Sub message,
one count_usage invocation and one commit per batch, not per claim.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from shared.campaigns.models import CampaignRecord
from shared.claims.models import ClaimRecord, coupon_claimed
from shared.clock import utcnow
from shared.events import models as events
from shared.events.bus import EventBus


@dataclass(eq=False)
class _Batch:
    claims: list[events.CouponClaimed] = field(default_factory=list)
    encoded: list[bytes] = field(default_factory=list)  # the members' JSON
    size: int = 0  # its bytes, with a separator each
    closed: threading.Event = field(default_factory=threading.Event)  # full: publish now
    sent: threading.Event = field(default_factory=threading.Event)  # acknowledged or failed
    error: BaseException | None = None


@dataclass(eq=False)
class ClaimBatcher:
    """The first claim to publish opens its campaign's batch and closes it after
    `window_seconds`, or at once when it holds `max_claims` claims or `max_bytes` of JSON; the
    claims that arrive meanwhile join it. The leader publishes it in one awaited request within
    its own time; every claim waits for that request within its own timeout, never longer, and
    a claim whose batch failed or outlasted it keeps its own event in the outbox. Batches are
    per campaign, so the bus's routing attributes apply to all of a batch's claims; a batch of
    one is published as the plain event."""

    bus: EventBus
    window_seconds: float
    max_claims: int = events.MAX_BATCH_CLAIMS
    max_bytes: int = events.MAX_BATCH_BYTES
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _open: dict[str, _Batch] = field(default_factory=dict, init=False)  # by campaign

    def publish(self, event: events.CouponClaimed, *, now: datetime, timeout: float) -> bool:
        """True when the message holding `event` was acknowledged within `timeout`; False when
        the event was kept in the outbox for the sweeper."""
        deadline = time.monotonic() + timeout
        data = events.encode_event(event)
        size = len(data) + 1
        with self._lock:
            batch = self._open.get(event.campaign_id)
            if batch is not None and (
                len(batch.claims) >= self.max_claims or batch.size + size > self.max_bytes
            ):
                self._close(event.campaign_id, batch)
                batch = None
            lead = batch is None
            if batch is None:
                batch = self._open[event.campaign_id] = _Batch()
            # An event already in the batch (one claim published twice) rides once: a batch
            # names each claim once.
            if all(c.event_id != event.event_id for c in batch.claims):
                batch.claims.append(event)
                batch.encoded.append(data)
                batch.size += size
            if len(batch.claims) >= self.max_claims:
                self._close(event.campaign_id, batch)
        if lead:
            batch.closed.wait(min(self.window_seconds, max(deadline - time.monotonic(), 0.0)))
            with self._lock:
                self._close(event.campaign_id, batch)
            self._send(batch, timeout=max(deadline - time.monotonic(), 0.0))
        error: BaseException | None = None
        if not batch.sent.wait(max(deadline - time.monotonic(), 0.0)):
            error = TimeoutError("the claim's batch was not published in time")
        elif batch.error is not None:
            error = batch.error
        if error is not None:
            self.bus.keep(event, now=now, error=error)
            return False
        return True

    def _close(self, campaign_id: str, batch: _Batch) -> None:
        """No claim joins `batch` any more; its leader publishes it now (under the lock)."""
        if self._open.get(campaign_id) is batch:
            del self._open[campaign_id]
        batch.closed.set()

    def _send(self, batch: _Batch, *, timeout: float) -> None:
        """Publish and await the batch within its leader's remaining time (each member stops
        waiting at its own deadline)."""
        claims = batch.claims
        if len(claims) == 1:
            data, event_id, kind = batch.encoded[0], claims[0].event_id, claims[0].type.value
        else:
            data = events.encode_batch(claims, batch.encoded)
            event_id, kind = events.batch_event_id(claims), events.CLAIMED_BATCH
        try:
            self.bus.send_message(
                data, event_id=event_id, kind=kind, routed_as=claims[0], timeout=timeout
            )
        # Whatever the publish raised, each claim of the batch keeps its event in the outbox.
        except Exception as exc:  # noqa: BLE001
            batch.error = exc
        batch.sent.set()


class ClaimEvents:
    """The claims' events, one per instance: a ClaimService publishes through it, and the
    engine announces a sell-out it proved."""

    def __init__(
        self,
        bus: EventBus,
        *,
        window_seconds: float,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._bus = bus
        self._batcher = ClaimBatcher(bus, window_seconds=window_seconds)
        self._clock = clock

    def claimed(self, claim: ClaimRecord, *, timeout: float) -> bool:
        """Publish a new claim's event (see ClaimBatcher.publish)."""
        return self._batcher.publish(coupon_claimed(claim), now=self._clock(), timeout=timeout)

    def sold_out(self, campaign: CampaignRecord) -> None:
        """Announce, once across instances, that the campaign's last code is claimed."""
        now = self._clock()
        event = events.sold_out(
            campaign_id=campaign.campaign_id, codes_total=campaign.codes_total, now=now
        )
        self._bus.announce_once(event, now=now)
