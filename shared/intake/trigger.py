"""import_codes: the Cloud Storage object-finalized trigger.

Raises (so the event is retried) only on failures that may pass; an event that can never
succeed (malformed, not an import, unknown campaign) is logged and acknowledged.
"""

from __future__ import annotations

import logging

from cloudevents.http import CloudEvent

from shared.intake.service import IntakeService, object_from_event

log = logging.getLogger(__name__)


def handle(event: CloudEvent, intake: IntakeService) -> None:
    try:
        obj = object_from_event(event.get_data())
    except ValueError as exc:
        log.error(
            "malformed storage event acknowledged",
            extra={"event_id": event.get("id"), "reason": str(exc)},
        )
        return
    intake.handle_object_finalized(obj)
