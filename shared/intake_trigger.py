"""import_codes: the Cloud Storage object-finalized trigger.

Raises (so the event is retried) only on failures that may pass; an event that can never
succeed (malformed, not an import, unknown campaign) is logged and acknowledged.
"""

from __future__ import annotations

import logging

from cloudevents.http import CloudEvent

from shared.import_service import object_from_event
from shared.runtime import get_intake

log = logging.getLogger(__name__)


def handle(event: CloudEvent) -> None:
    try:
        obj = object_from_event(event.get_data())
    except ValueError as exc:
        log.error(
            "malformed storage event acknowledged",
            extra={"event_id": event.get("id"), "reason": str(exc)},
        )
        return
    get_intake().handle_object_finalized(obj)
