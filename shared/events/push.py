"""Events as Pub/Sub push delivers them: a `messagePublished` CloudEvent whose `message.data`
is the event's JSON (or a batch of claims' events), base64-encoded."""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable

from cloudevents.http import CloudEvent

from shared.events.models import ClaimedBatch, Event, MalformedEvent, parse_message

log = logging.getLogger(__name__)


def decode(event: CloudEvent) -> tuple[Event | ClaimedBatch, bytes]:
    """The message and its JSON exactly as published; MalformedEvent if it can never be read."""
    data = event.get_data()
    try:
        message = data["message"]  # type: ignore[index]
        payload = base64.b64decode(message["data"], validate=True)
    except (KeyError, TypeError, binascii.Error) as exc:
        raise MalformedEvent(f"not a Pub/Sub push message: {exc!r}") from exc
    return parse_message(payload), payload


def dispatch(
    event: CloudEvent,
    *,
    one: Callable[[Event, bytes], object],
    batch: Callable[[ClaimedBatch], object],
) -> None:
    """Hand a pushed message to `one` (an event and its JSON as published) or `batch` (a batch
    of claims' events). A message that can never be read is logged and acknowledged: redelivering
    it would never help."""
    try:
        parsed, payload = decode(event)
    except MalformedEvent as exc:
        log.error(
            "malformed message acknowledged",
            extra={"cloudevent_id": event.get("id"), "reason": str(exc)[:500]},
        )
        return
    if isinstance(parsed, ClaimedBatch):
        batch(parsed)
    else:
        one(parsed, payload)
