"""Re-publishing claims whose event was lost.

Claims do not pay for an outbox write: the claim document is the durable record. An instance that
dies between the commit and the publish leaves a claim without its `coupon.claimed` event; the
scheduled sweep finds recent claims whose consumer marker is missing and publishes them again
(the event id derives from the claim, so a re-publish of an event that was seen is harmless).

Finding recent claims needs an indexed time, but claims are written at sale rate in time order,
and production limits a collection to about 500 writes/s while an indexed field increases in
write order. So `claimed_at` is not indexed (firestore.indexes.json exempts it); each claim
carries `sweep_bucket` = "<shard>:<second>" with a random shard of SWEEP_SHARDS, so the indexed
values grow in SWEEP_SHARDS places at once, and the sweep reads each shard's range of seconds.

Each claim is checked once: the campaign's checkpoint (`checked_until`) says how far the sweep has
checked, and a pass reads only the claims made since (within the window, the bound for a first
pass and for a checkpoint older than the window), then moves the checkpoint to where it stopped,
unless a re-publish failed (the next pass checks those claims again). The checkpoint only moves
forward, in a transaction, so two passes at once leave the further one. A pass that dies leaves
it where it was. The sweep's `grace` keeps a pass's end behind claims still committing or
stamped by a clock behind the sweeper's (docs/architecture.md, "Events and counters").
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.claims.models import ClaimRecord, coupon_claimed
from shared.events.bus import PUBLISH_ERRORS, EventBus
from shared.events.models import CouponClaimed
from shared.gcp.firestore import (
    Snapshot,
    claims_collection,
    processed_event_ref,
    sweep_checkpoint_ref,
)

SWEEP_SHARDS = 16


def sweep_bucket(at: datetime, shard: int | None = None) -> str:
    """The claim's sweep key: a shard (random unless given) and the second of `at` (a pass
    starts where the last one stopped: only that second's earlier claims are read twice)."""
    shard = secrets.randbelow(SWEEP_SHARDS) if shard is None else shard
    return f"{shard:02d}:{at.astimezone(UTC):%Y%m%d%H%M%S}"


@dataclass
class RepublishReport:
    republished: int = 0
    failures: list[str] = field(default_factory=list)


def republish_unseen_claims(
    db: firestore.Client, bus: EventBus, *, campaign_id: str, since: datetime, until: datetime
) -> RepublishReport:
    """Re-publish the events of the claims made in [checkpoint or `since`, whichever is later,
    `until`) that their consumer has not marked; advance the checkpoint to `until` if all went."""
    report = RepublishReport()
    checkpoint = sweep_checkpoint_ref(db, campaign_id)
    since = max(since, _checked_until(checkpoint.get()) or since)
    if since >= until:
        return report
    claims = [
        c for c in _claims_between(db, campaign_id, since, until) if since <= c.claimed_at < until
    ]
    for event in _unseen(db, campaign_id, [coupon_claimed(c) for c in claims]):
        try:
            bus.send(event)
        except PUBLISH_ERRORS as exc:
            report.failures.append(f"{event.event_id}: {exc!r}")
            continue
        report.republished += 1
    if not report.failures:
        _advance(db.transaction(), checkpoint, until)
    return report


def _unseen(
    db: firestore.Client, campaign_id: str, claimed: list[CouponClaimed]
) -> list[CouponClaimed]:
    """The events without their consumer's marker (one batched read; none for no events)."""
    if not claimed:
        return []
    markers = db.get_all([processed_event_ref(db, campaign_id, e.event_id) for e in claimed])
    seen = {m.id for m in markers if m.exists}
    return [e for e in claimed if e.event_id not in seen]


def _checked_until(snapshot: Snapshot) -> datetime | None:
    checked: datetime | None = (snapshot.to_dict() or {}).get("checked_until")
    return checked


@firestore.transactional
def _advance(
    transaction: firestore.Transaction, checkpoint: firestore.DocumentReference, until: datetime
) -> None:
    """Never backwards: a slower pass that started earlier may finish after a later one."""
    checked = _checked_until(checkpoint.get(transaction=transaction))
    if checked is None or checked < until:
        transaction.set(checkpoint, {"checked_until": until})


def _claims_between(
    db: firestore.Client, campaign_id: str, since: datetime, until: datetime
) -> list[ClaimRecord]:
    """Claims whose second lies in [since, until], one range query per shard (the edge seconds
    hold claims outside the range: the caller filters on the exact time)."""
    claims: list[ClaimRecord] = []
    collection = claims_collection(db, campaign_id)
    for shard in range(SWEEP_SHARDS):
        query = collection.where(
            filter=FieldFilter("sweep_bucket", ">=", sweep_bucket(since, shard))
        ).where(filter=FieldFilter("sweep_bucket", "<=", sweep_bucket(until, shard)))
        claims += [ClaimRecord(claim_id=s.id, **(s.to_dict() or {})) for s in query.stream()]
    return claims
