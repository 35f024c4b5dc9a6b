"""deliver_webhooks: the Pub/Sub trigger on its own push subscription to `coupon-events`.

A message that can never be read is logged and acknowledged; a batch of claims is delivered as
its claims' own events, one delivery each. The event's deliveries are
recorded before anything is sent, so a failure to record raises (Pub/Sub redelivers; recording
is idempotent), while a failure to send is the deliveries' own business (retried on schedule)
and never fails the message.
"""

from __future__ import annotations

import logging

from cloudevents.http import CloudEvent

from shared.events import push
from shared.events.models import ClaimedBatch, MalformedEvent
from shared.webhooks.service import WebhookService

log = logging.getLogger(__name__)


def handle(event: CloudEvent, webhooks: WebhookService) -> None:
    try:
        parsed, payload = push.decode(event)
    except MalformedEvent as exc:
        log.error(
            "malformed message acknowledged",
            extra={"cloudevent_id": event.get("id"), "reason": str(exc)[:500]},
        )
        return
    if isinstance(parsed, ClaimedBatch):
        webhooks.handle_batch(parsed)
    else:
        webhooks.handle(parsed, payload)
