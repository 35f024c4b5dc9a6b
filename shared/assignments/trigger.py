"""import_codes: the Cloud Storage object-finalized trigger of the imports bucket.

Recipient lists under `assignments/` go to the assignment service, export requests under
`export/` to the export service, campaign deletion requests under `delete/` to the deletion
service, everything else to code intake. Raises (so the event is
retried) only on failures that may pass; an event that can never succeed (malformed, not a file
of ours, unknown campaign) is logged and acknowledged.
"""

from __future__ import annotations

import logging

from cloudevents.http import CloudEvent

from shared.assignments.service import AssignmentService
from shared.control.deletion import DeletionService
from shared.control.exports import ExportService
from shared.intake.service import IntakeService, object_from_event

log = logging.getLogger(__name__)


def handle(
    event: CloudEvent,
    *,
    intake: IntakeService,
    assignments: AssignmentService,
    exports: ExportService,
    deletions: DeletionService,
) -> None:
    try:
        obj = object_from_event(event.get_data())
    except ValueError as exc:
        log.error(
            "malformed storage event acknowledged",
            extra={"event_id": event.get("id"), "reason": str(exc)},
        )
        return
    if assignments.handles(obj):
        assignments.handle_object_finalized(obj)
    elif obj.bucket == intake.bucket and exports.handles(obj.name):
        exports.handle_request(obj.name)
    elif obj.bucket == intake.bucket and deletions.handles(obj.name):
        deletions.handle_request(obj.name)
    else:
        intake.handle_object_finalized(obj)
