"""count_usage: the Pub/Sub trigger on `coupon-events`.

A message that can never be processed (not base64, not JSON, not a codedrop event nor a batch of
claims' events within its bounds) is logged and acknowledged; a failure that may pass (Firestore
unavailable, counters still contended) raises, so Pub/Sub redelivers it with the subscription's
backoff, and dead-letters it in the end.
"""

from __future__ import annotations

from cloudevents.http import CloudEvent

from shared.events import push
from shared.usage.counting import UsageCounter


def handle(event: CloudEvent, counter: UsageCounter) -> None:
    push.dispatch(event, one=lambda parsed, _: counter.handle(parsed), batch=counter.handle_batch)
