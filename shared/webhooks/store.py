"""Firestore access for webhooks (`webhooks/{webhook_id}`), their deliveries
(`webhooks/{webhook_id}/deliveries/{event_id}`) and each campaign's list of them
(`campaign_webhooks/{campaign_id}`).

deliver_webhooks looks up the webhooks of every event's campaign. It reads the campaign's list by
reference, one document whatever the database holds, rather than querying `webhooks` by campaign
(a query is billed the same in production, but the emulator answers it by scanning every document,
so at sale rate it cost more than anything else the event did). The list is written in the same
batches that create and delete webhooks, guarded by the list as read; a campaign whose webhooks
predate it has none, and its first reader, or the first change, writes it from the query.

A delivery's id is its event's id, created with `create()`: a redelivered event finds it there
and adds nothing. Deliveries are written at sale rate, in time order, so their times are never
indexed on their own: each carries `shard` (from its event id, one of SHARDS) and the two
queries (due for an attempt; the newest for the log) go through composite indexes that start
with the shard, so the indexed values grow in SHARDS places at once (firestore.indexes.json).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.audit import store as audit_store
from shared.audit.models import AuditEntry
from shared.errors import Contended, WebhookNotFound
from shared.gcp.batched_reads import ReadCoalescer
from shared.gcp.firestore import (
    Snapshot,
    campaign_webhooks_ref,
    deliveries_collection,
    webhook_ref,
    webhooks_collection,
)
from shared.webhooks.models import DeliveryRecord, DeliveryState, WebhookRecord

SHARDS = 16
ALL_SHARDS = list(range(SHARDS))
# The delivery log is kept this long after the event (a TTL policy on `expire_at`).
RETENTION = timedelta(days=7)


def shard_of(event_id: str) -> int:
    return hashlib.sha256(event_id.encode()).digest()[0] % SHARDS


# --- webhooks -----------------------------------------------------------------------------------


def _webhook(snapshot: Snapshot) -> WebhookRecord:
    return WebhookRecord(webhook_id=snapshot.id, **(snapshot.to_dict() or {}))


def get_webhook(db: firestore.Client, *, webhook_id: str) -> WebhookRecord | None:
    snapshot = webhook_ref(db, webhook_id).get()
    return _webhook(snapshot) if snapshot.exists else None


def get_webhooks(db: firestore.Client, *, webhook_ids: Sequence[str]) -> list[WebhookRecord]:
    snapshots = db.get_all([webhook_ref(db, w) for w in webhook_ids])
    return [_webhook(s) for s in snapshots if s.exists]


def campaign_webhooks(db: firestore.Client, *, campaign_id: str) -> list[WebhookRecord]:
    query = webhooks_collection(db).where(filter=FieldFilter("campaign_id", "==", campaign_id))
    return sorted((_webhook(s) for s in query.stream()), key=lambda w: w.created_at)


def all_webhooks(db: firestore.Client, *, page_size: int = 300) -> Iterator[WebhookRecord]:
    """Every webhook, a page at a time in document-id order (no index needed)."""
    query = webhooks_collection(db).order_by("__name__").limit(page_size)
    last: Snapshot | None = None
    while True:
        page = list((query.start_after(last) if last is not None else query).stream())
        yield from (_webhook(s) for s in page)
        if len(page) < page_size:
            return
        last = page[-1]


# --- a campaign's list of webhooks --------------------------------------------------------------

# webhook id -> the event types it listed (as their values)
Listing = dict[str, list[str]]
# Changes to one campaign's webhooks contend only with each other (an operator's calls).
CHANGE_ATTEMPTS = 10


def _listing(records: Iterable[WebhookRecord]) -> Listing:
    return {w.webhook_id: [e.value for e in w.events] for w in records}


def _listed(snapshot: Snapshot) -> Listing:
    webhooks = (snapshot.to_dict() or {}).get("webhooks") or {}
    return {str(w): [str(e) for e in events] for w, events in webhooks.items()}


def listed_webhooks(reader: ReadCoalescer, *, campaign_id: str) -> Listing:
    """The campaign's webhooks and their events, from a read that started after this call
    (concurrent callers share it)."""
    ref = campaign_webhooks_ref(reader.db, campaign_id)
    snapshot = reader.get([ref])[ref.path]
    if snapshot.exists:
        return _listed(snapshot)
    # Webhooks from before the list (or none yet): the query, kept as the list unless a
    # change wrote one meanwhile (a change's write is guarded by the list it read, or creates
    # it: one of the two writes fails and that side reads again).
    listing = _listing(campaign_webhooks(reader.db, campaign_id=campaign_id))
    try:
        ref.create({"webhooks": listing})
    except gexc.AlreadyExists:
        return _listed(ref.get())
    return listing


def _read_listing(db: firestore.Client, campaign_id: str) -> tuple[Listing, datetime | None]:
    """The campaign's list and the update time to guard a change with (None: no list yet, so
    it is built from the query and the change creates it)."""
    snapshot = campaign_webhooks_ref(db, campaign_id).get()
    if snapshot.exists:
        return _listed(snapshot), snapshot.update_time
    return _listing(campaign_webhooks(db, campaign_id=campaign_id)), None


def _change(
    db: firestore.Client,
    campaign_id: str,
    change: Callable[[Listing, firestore.WriteBatch], bool],
) -> bool:
    """Apply `change` to the campaign's list in one batch guarded by the list as read, again
    on a lost race (the list changed, or somebody wrote it first), with a little random wait.

    Not a transaction: two concurrent changes would both hold the list's read lock, and each
    waits out the other's lock timeout before one aborts (a handful of concurrent subscribes
    exhausted ten attempts on a loaded machine). A guarded write fails at once instead."""
    ref = campaign_webhooks_ref(db, campaign_id)
    for attempt in range(CHANGE_ATTEMPTS):
        listing, read_at = _read_listing(db, campaign_id)
        batch = db.batch()
        if not change(listing, batch):
            return False
        if read_at is None:
            batch.create(ref, {"webhooks": listing})
        else:
            guard = db.write_option(last_update_time=read_at)
            batch.update(ref, {"webhooks": listing}, option=guard)
        try:
            batch.commit()
        except (gexc.FailedPrecondition, gexc.AlreadyExists):
            time.sleep(random.uniform(0, 0.01 * 2**attempt))
            continue
        return True
    raise Contended("The campaign's webhooks are changing; retry shortly.", retry_after=1)


def create_webhook(
    db: firestore.Client, *, record: WebhookRecord, limit: int, audit: AuditEntry | None = None
) -> bool:
    """Create the webhook and add it to its campaign's list (and the audit log), in one guarded
    batch; False, and nothing written, when the campaign has `limit` webhooks already."""

    def create(listing: Listing, batch: firestore.WriteBatch) -> bool:
        if len(listing) >= limit:
            return False
        listing.update(_listing([record]))
        batch.create(webhook_ref(db, record.webhook_id), record.model_dump(exclude={"webhook_id"}))
        if audit is not None:
            audit_store.add(batch, db, audit)
        return True

    return _change(db, record.campaign_id, create)


def delete_webhook(
    db: firestore.Client, *, webhook_id: str, campaign_id: str, audit: AuditEntry | None = None
) -> None:
    """The subscription goes at once, from its campaign's list too; its deliveries stay
    readable until their TTL and are never attempted again (a drain needs the webhook)."""

    def delete(listing: Listing, batch: firestore.WriteBatch) -> bool:
        listing.pop(webhook_id, None)
        batch.delete(webhook_ref(db, webhook_id))
        if audit is not None:
            audit_store.add(batch, db, audit)
        return True

    _change(db, campaign_id, delete)


# --- the drain lease ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    webhook: WebhookRecord  # as read when the lease was taken
    owner: str
    written_at: Any  # the lease write's update time: the precondition of its release


def acquire_lease(
    db: firestore.Client, *, webhook_id: str, now: datetime, until: datetime
) -> Lease | None:
    """Hold the right to drain this webhook until `until`; None if someone else holds it (or
    it is cooling down, or gone). A read, then a write guarded by the read's update time."""
    ref = webhook_ref(db, webhook_id)
    snapshot = ref.get()
    if not snapshot.exists:
        return None
    webhook = _webhook(snapshot)
    if not webhook.lease_free(now):
        return None
    owner = secrets.token_hex(8)
    try:
        result = ref.update(
            {"lease_owner": owner, "lease_until": until},
            option=db.write_option(last_update_time=snapshot.update_time),
        )
    except (gexc.FailedPrecondition, gexc.NotFound):
        return None
    return Lease(webhook=webhook, owner=owner, written_at=result.update_time)


def release_lease(
    db: firestore.Client, *, lease: Lease, hold_until: datetime | None, down_streak: int
) -> None:
    """Give the lease up, keeping the endpoint to itself until `hold_until` (a cool-down) when
    given. Nothing happens if another drainer took over an expired lease or the webhook went."""
    with contextlib.suppress(gexc.FailedPrecondition, gexc.NotFound):
        webhook_ref(db, lease.webhook.webhook_id).update(
            {"lease_owner": None, "lease_until": hold_until, "down_streak": down_streak},
            option=db.write_option(last_update_time=lease.written_at),
        )


# --- deliveries ---------------------------------------------------------------------------------


def _delivery(snapshot: Snapshot) -> DeliveryRecord:
    return DeliveryRecord(event_id=snapshot.id, **(snapshot.to_dict() or {}))


def record_deliveries(
    db: firestore.Client,
    *,
    webhook_ids: Sequence[str],
    event_id: str,
    event_type: str,
    body: str,
    now: datetime,
    audit: AuditEntry | None = None,
) -> int:
    """One pending delivery of the event per webhook, due now; how many were new. An audit
    entry (an admin's test event, whose id is new) is written in the same commit."""
    fields = {
        "event_type": event_type,
        "body": body,
        "state": DeliveryState.PENDING.value,
        "attempts": 0,
        "created_at": now,
        "due_at": now,
        "shard": shard_of(event_id),
        "expire_at": now + RETENTION,
    }
    refs = [deliveries_collection(db, w).document(event_id) for w in webhook_ids]
    batch = db.batch()
    for ref in refs:
        batch.create(ref, fields)
    if audit is not None:
        audit_store.add(batch, db, audit)
    try:
        batch.commit()
    except gexc.AlreadyExists:
        if audit is not None:
            raise
        # A redelivered event (or one recorded before a webhook was added): each on its own.
        created = 0
        for ref in refs:
            try:
                ref.create(fields)
            except gexc.AlreadyExists:
                continue
            created += 1
        return created
    return len(refs)


def get_delivery(db: firestore.Client, *, webhook_id: str, event_id: str) -> DeliveryRecord | None:
    snapshot = deliveries_collection(db, webhook_id).document(event_id).get()
    return _delivery(snapshot) if snapshot.exists else None


def requeue_delivery(
    db: firestore.Client,
    *,
    webhook_id: str,
    delivery: DeliveryRecord,
    now: datetime,
    audit: AuditEntry,
) -> None:
    """Send a delivery again, from its first attempt: pending, due now, a new 24 hours of
    retries from now (its `created_at`), with the audit entry in the same commit."""
    batch = db.batch()
    batch.update(
        deliveries_collection(db, webhook_id).document(delivery.event_id),
        {
            "state": DeliveryState.PENDING.value,
            "attempts": 0,
            "created_at": now,
            "due_at": now,
            "expire_at": now + RETENTION,
        },
    )
    audit_store.add(batch, db, audit)
    batch.commit()


def replace_secret(
    db: firestore.Client, *, webhook_id: str, secret_sealed: str, audit: AuditEntry
) -> None:
    """The webhook's new sealed secret, with the audit entry (which never holds it)."""
    batch = db.batch()
    batch.update(webhook_ref(db, webhook_id), {"secret_sealed": secret_sealed})
    audit_store.add(batch, db, audit)
    try:
        batch.commit()
    except gexc.NotFound as exc:
        raise WebhookNotFound(f"Webhook {webhook_id!r} does not exist.") from exc


def due_deliveries(
    db: firestore.Client, *, webhook_id: str, now: datetime, limit: int
) -> list[DeliveryRecord]:
    """Pending and retrying deliveries whose time has come, the longest waiting first."""
    query = (
        deliveries_collection(db, webhook_id)
        .where(filter=FieldFilter("shard", "in", ALL_SHARDS))
        .where(filter=FieldFilter("due_at", "<=", now))
        .order_by("due_at")
        .limit(limit)
    )
    return [_delivery(s) for s in query.stream()]


def recent_deliveries(db: firestore.Client, *, webhook_id: str, limit: int) -> list[DeliveryRecord]:
    query = (
        deliveries_collection(db, webhook_id)
        .where(filter=FieldFilter("shard", "in", ALL_SHARDS))
        .order_by("created_at", direction=firestore.Query.DESCENDING)
        .limit(limit)
    )
    return [_delivery(s) for s in query.stream()]


def save_attempts(
    db: firestore.Client, *, webhook_id: str, updates: Sequence[tuple[str, dict[str, Any]]]
) -> None:
    """Each attempt's outcome, (event_id, fields), in one commit per 500."""
    collection = deliveries_collection(db, webhook_id)
    for start in range(0, len(updates), 500):
        batch = db.batch()
        for event_id, fields in updates[start : start + 500]:
            batch.update(collection.document(event_id), fields)
        batch.commit()
