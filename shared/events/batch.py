"""Claims' events published many to a message.

At a sale's rate every claim published on its own cost a Pub/Sub message, a count_usage
invocation, a read to check it and a commit to count it. An instance's concurrent claims of one
campaign share a message instead (`coupon.claimed.batch`, shared/events/models.py): the first
claim to publish opens the campaign's batch and closes it after `window_seconds`, or at once when
it holds MAX_BATCH_CLAIMS claims or MAX_BATCH_BYTES of JSON; the claims that arrive meanwhile
join it. The leader publishes the message in one awaited request within its own time; every
claim waits for that request within its own timeout, never longer, and a claim whose batch failed
or outlasted it keeps its own event in the outbox, as EventBus.publish does. A batch of one is
published as the plain event.
Batches are per campaign, so the webhook attribute the bus sets applies to all of its claims.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

from shared.events.bus import EventBus
from shared.events.models import MAX_BATCH_BYTES, MAX_BATCH_CLAIMS, CouponClaimed, encode_event


@dataclass(eq=False)
class _Batch:
    claims: list[CouponClaimed] = field(default_factory=list)
    encoded: list[bytes] = field(default_factory=list)  # the members' JSON
    size: int = 0  # its bytes, with a separator each
    closed: threading.Event = field(default_factory=threading.Event)  # full: publish now
    sent: threading.Event = field(default_factory=threading.Event)  # acknowledged or failed
    error: BaseException | None = None


@dataclass(eq=False)
class ClaimBatcher:
    bus: EventBus
    window_seconds: float
    max_claims: int = MAX_BATCH_CLAIMS
    max_bytes: int = MAX_BATCH_BYTES
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _open: dict[str, _Batch] = field(default_factory=dict, init=False)  # by campaign

    def publish(self, event: CouponClaimed, *, now: datetime, timeout: float) -> bool:
        """True when the message holding `event` was acknowledged within `timeout`; False when
        the event was kept in the outbox for the sweeper."""
        deadline = time.monotonic() + timeout
        data = encode_event(event)
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
        try:
            self.bus.publish_claims(batch.claims, batch.encoded, timeout=timeout)
        # Whatever the publish raised, each claim of the batch keeps its event in the outbox.
        except Exception as exc:  # noqa: BLE001
            batch.error = exc
        batch.sent.set()
