"""count_usage: the Pub/Sub trigger on `coupon-events`.

A message that can never be processed (not base64, not JSON, not a codedrop event nor a batch of
claims' events within its bounds) is logged and acknowledged; a failure that may pass (Firestore
unavailable, counters still contended) raises, so Pub/Sub redelivers it with the subscription's
backoff, and dead-letters it in the end.
"""

from __future__ import annotations

import logging

from cloudevents.http import CloudEvent

from shared.events import push
from shared.events.models import ClaimedBatch, MalformedEvent
from shared.usage.service import UsageService

log = logging.getLogger(__name__)


def handle(event: CloudEvent, usage: UsageService) -> None:
    try:
        parsed, _ = push.decode(event)
    except MalformedEvent as exc:
        log.error(
            "malformed message acknowledged",
            extra={"cloudevent_id": event.get("id"), "reason": str(exc)[:500]},
        )
        return
    if isinstance(parsed, ClaimedBatch):
        usage.handle_batch(parsed)
    else:
        usage.handle(parsed)
