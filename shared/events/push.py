"""Events as Pub/Sub push delivers them: a `messagePublished` CloudEvent whose `message.data`
is the event's JSON (or a batch of claims' events), base64-encoded."""

from __future__ import annotations

import base64
import binascii

from cloudevents.http import CloudEvent

from shared.events.models import ClaimedBatch, Event, MalformedEvent, parse_message


def decode(event: CloudEvent) -> tuple[Event | ClaimedBatch, bytes]:
    """The message and its JSON exactly as published; MalformedEvent if it can never be read."""
    data = event.get_data()
    try:
        message = data["message"]  # type: ignore[index]
        payload = base64.b64decode(message["data"], validate=True)
    except (KeyError, TypeError, binascii.Error) as exc:
        raise MalformedEvent(f"not a Pub/Sub push message: {exc!r}") from exc
    return parse_message(payload), payload
