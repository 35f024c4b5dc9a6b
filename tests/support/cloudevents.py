"""CloudEvent envelopes exactly as Cloud Storage and Pub/Sub push send them (from the JSON
fixtures), re-addressed for another object or message."""

from __future__ import annotations

import base64
import copy
import json
import uuid
from typing import Any

from flask.testing import FlaskClient

from devkit.standins.push_auth import DevPushKeys
from tests.support.stack import EVENTS_TOPIC, PROJECT, PUMP_SUBSCRIPTION, ROOT

FINALIZED_EVENT = json.loads(
    (ROOT / "tests" / "fixtures" / "storage_object_finalized.json").read_text()
)
# The run's push key set (served by the `push_keys` fixture): every delivery is signed with it.
PUSH_KEYS = DevPushKeys()
PUBLISHED_EVENT = json.loads(
    (ROOT / "tests" / "fixtures" / "pubsub_message_published.json").read_text()
)


def finalized_event(
    *, bucket: str, name: str, generation: int | str | None, metadata: dict[str, str] | None = None
) -> dict[str, Any]:
    """The object-finalized CloudEvent for another object."""
    event: dict[str, Any] = copy.deepcopy(FINALIZED_EVENT)
    event["id"] = uuid.uuid4().hex
    event["source"] = f"//storage.googleapis.com/projects/_/buckets/{bucket}"
    event["subject"] = f"objects/{name}"
    event["data"].update(bucket=bucket, name=name, generation=str(generation))
    event["data"]["id"] = f"{bucket}/{name}/{generation}"
    if metadata:
        event["data"]["metadata"] = metadata
    return event


def published_event(payload: bytes, *, message_id: str | None = None) -> dict[str, Any]:
    """A Pub/Sub push delivery as count_usage receives it: a messagePublished CloudEvent."""
    event: dict[str, Any] = copy.deepcopy(PUBLISHED_EVENT)
    message_id = message_id or uuid.uuid4().hex
    event["id"] = message_id
    event["source"] = f"//pubsub.googleapis.com/projects/{PROJECT}/topics/{EVENTS_TOPIC}"
    event["data"]["message"].update(
        data=base64.b64encode(payload).decode(), messageId=message_id, message_id=message_id
    )
    event["data"]["subscription"] = f"projects/{PROJECT}/subscriptions/{PUMP_SUBSCRIPTION}"
    return event


def deliver(client: FlaskClient, event: dict[str, Any]) -> int:
    """Post the event signed as the push subscription signs it (count_usage and deliver_webhooks
    check the token; import_codes ignores it)."""
    response = client.post(
        "/",
        data=json.dumps(event),
        content_type="application/cloudevents+json",
        headers=PUSH_KEYS.authorization(),
    )
    return response.status_code
