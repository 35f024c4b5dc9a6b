"""Re-publishing claims whose event was lost.

Claims do not pay for an outbox write: the claim document is the durable record. An instance that
dies between the commit and the publish leaves a claim without its `coupon.claimed` event; the
scheduled sweep finds recent claims whose consumer marker is missing and publishes them again
(the event id derives from the claim, so a re-publish of an event that was seen is harmless).

Finding recent claims needs an indexed time, but claims are written at sale rate in time order,
and production limits a collection to about 500 writes/s while an indexed field increases in
write order. So `claimed_at` is not indexed (firestore.indexes.json exempts it); each claim
carries `sweep_bucket` = "<shard>:<minute>" with a random shard of SWEEP_SHARDS, so the indexed
values grow in SWEEP_SHARDS places at once, and the sweep reads each shard's window of minutes.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.claims.models import ClaimRecord, coupon_claimed
from shared.events.bus import PUBLISH_ERRORS, EventBus
from shared.gcp.firestore import claims_collection, processed_event_ref

SWEEP_SHARDS = 16


def sweep_bucket(at: datetime, shard: int | None = None) -> str:
    """The claim's sweep key: a shard (random unless given) and the minute of `at`."""
    shard = secrets.randbelow(SWEEP_SHARDS) if shard is None else shard
    return f"{shard:02d}:{at.astimezone(UTC):%Y%m%d%H%M}"


@dataclass
class RepublishReport:
    republished: int = 0
    failures: list[str] = field(default_factory=list)


def republish_unseen_claims(
    db: firestore.Client, bus: EventBus, *, campaign_id: str, since: datetime, until: datetime
) -> RepublishReport:
    report = RepublishReport()
    claims = [
        c for c in _claims_between(db, campaign_id, since, until) if since <= c.claimed_at < until
    ]
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


def _claims_between(
    db: firestore.Client, campaign_id: str, since: datetime, until: datetime
) -> list[ClaimRecord]:
    """Claims whose minute lies in [since, until], one range query per shard (the edge minutes
    hold claims outside the window: the caller filters on the exact time)."""
    claims: list[ClaimRecord] = []
    collection = claims_collection(db, campaign_id)
    for shard in range(SWEEP_SHARDS):
        query = collection.where(
            filter=FieldFilter("sweep_bucket", ">=", sweep_bucket(since, shard))
        ).where(filter=FieldFilter("sweep_bucket", "<=", sweep_bucket(until, shard)))
        claims += [ClaimRecord(claim_id=s.id, **(s.to_dict() or {})) for s in query.stream()]
    return claims
