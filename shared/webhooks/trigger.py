"""deliver_webhooks: the Pub/Sub trigger on its own push subscription to `coupon-events`.

A message that can never be read is logged and acknowledged; a batch of claims is delivered as
its claims' own events, one delivery each. The event's deliveries are
recorded before anything is sent, so a failure to record raises (Pub/Sub redelivers; recording
is idempotent), while a failure to send is the deliveries' own business (retried on schedule)
and never fails the message.
"""

from __future__ import annotations

from cloudevents.http import CloudEvent

from shared.events import push
from shared.webhooks.service import WebhookService


def handle(event: CloudEvent, webhooks: WebhookService) -> None:
    push.dispatch(event, one=webhooks.handle, batch=webhooks.handle_batch)
