"""Re-publishing claims whose event was lost.

Claims do not pay for an outbox write: the claim document is the durable record. An instance that
dies between the commit and the publish leaves a claim without its `coupon.claimed` event; the
scheduled sweep finds recent claims whose consumer marker is missing and publishes them again
(the event id derives from the claim, so a re-publish of an event that was seen is harmless).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.claims.models import ClaimRecord, coupon_claimed
from shared.events.bus import PUBLISH_ERRORS, EventBus
from shared.gcp.firestore import claims_collection, processed_event_ref


@dataclass
class RepublishReport:
    republished: int = 0
    failures: list[str] = field(default_factory=list)


def republish_unseen_claims(
    db: firestore.Client, bus: EventBus, *, campaign_id: str, since: datetime, until: datetime
) -> RepublishReport:
    report = RepublishReport()
    query = (
        claims_collection(db, campaign_id)
        .where(filter=FieldFilter("claimed_at", ">=", since))
        .where(filter=FieldFilter("claimed_at", "<", until))
    )
    claims = [ClaimRecord(claim_id=s.id, **(s.to_dict() or {})) for s in query.stream()]
    if not claims:
        return report
    claimed = [coupon_claimed(c) for c in claims]
    markers = db.get_all([processed_event_ref(db, campaign_id, e.event_id) for e in claimed])
    seen = {m.id for m in markers if m.exists}
    for event in claimed:
        if event.event_id in seen:
            continue
        try:
            bus.send(event)
        except PUBLISH_ERRORS as exc:
            report.failures.append(f"{event.event_id}: {exc!r}")
            continue
        report.republished += 1
    return report
