"""Firestore access for campaign documents."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.audit import store as audit_store
from shared.audit.models import AuditAction, AuditContext
from shared.campaigns import segments
from shared.campaigns.drop_secret import new_drop_secret
from shared.campaigns.models import AUDITED_FIELDS, MAX_CODES_PER_USER, CampaignRecord, audited
from shared.codes import CodeFormat
from shared.errors import (
    CampaignChanged,
    CampaignExists,
    CampaignNotEnded,
    CampaignNotFound,
    Contended,
    RequestValidationFailed,
)
from shared.gcp.firestore import Snapshot, campaign_ref, campaigns_collection, drop_secret_ref


def record_from_snapshot(snapshot: Snapshot) -> CampaignRecord:
    data = snapshot.to_dict() or {}
    return CampaignRecord(campaign_id=snapshot.id, **data)


def _fields(record: CampaignRecord) -> dict[str, Any]:
    return record.model_dump(exclude={"campaign_id"})


def create_campaign(
    db: firestore.Client,
    *,
    record: CampaignRecord,
    audit: AuditContext | None = None,
    drop_secret: Mapping[str, Any] | None = None,
) -> CampaignRecord:
    """The campaign, its segments (see segments.py), its audit entry and a fair drop's secret,
    in one atomic batch."""
    batch = db.batch()
    batch.create(campaign_ref(db, record.campaign_id), _fields(record))
    if drop_secret is not None:
        batch.create(drop_secret_ref(db, record.campaign_id), dict(drop_secret))
    segments.add_to_batch(batch, db, campaign_id=record.campaign_id)
    if audit is not None:
        entry = audit.entry(
            AuditAction.CREATE,
            campaign_id=record.campaign_id,
            target=record.campaign_id,
            after=audited(record),
            version=record.version,
        )
        audit_store.add(batch, db, entry)
    try:
        batch.commit()
    except gexc.AlreadyExists as exc:
        raise CampaignExists(f"Campaign {record.campaign_id!r} already exists.") from exc
    return record


def get_campaign_snapshot(db: firestore.Client, *, campaign_id: str) -> Snapshot | None:
    snapshot = campaign_ref(db, campaign_id).get()
    return snapshot if snapshot.exists else None


def get_campaign(db: firestore.Client, *, campaign_id: str) -> CampaignRecord:
    snapshot = get_campaign_snapshot(db, campaign_id=campaign_id)
    if snapshot is None:
        raise CampaignNotFound(f"Campaign {campaign_id!r} does not exist.")
    record = record_from_snapshot(snapshot)
    if record.deleting:
        raise CampaignNotFound(f"Campaign {campaign_id!r} is being deleted.")
    return record


def iter_campaigns(db: firestore.Client, *, page_size: int = 300) -> Iterator[CampaignRecord]:
    """Every campaign but those being deleted, read a page at a time in document-id order (no
    index needed)."""
    query = campaigns_collection(db).order_by("__name__").limit(page_size)
    last: Snapshot | None = None
    while True:
        page = list((query.start_after(last) if last is not None else query).stream())
        for snapshot in page:
            record = record_from_snapshot(snapshot)
            if not record.deleting:
                yield record
        if len(page) < page_size:
            return
        last = page[-1]


def list_campaigns(db: firestore.Client, *, limit: int = 1000) -> list[CampaignRecord]:
    query = campaigns_collection(db).order_by("created_at", direction="DESCENDING").limit(limit)
    return [record_from_snapshot(s) for s in query.stream()]


def update_action(before: dict[str, Any], after: dict[str, Any]) -> AuditAction:
    """How the audit log names an edit: a pause or resume alone is named as such."""
    if set(after) == {"paused"}:
        return AuditAction.PAUSE if after["paused"] else AuditAction.RESUME
    return AuditAction.UPDATE


# Once a fair drop's pre-queue is open, shoppers join against this window and commitment.
_FIXED_WHILE_PRE_QUEUED = ("starts_at", "pre_queue_seconds", "waiting_room_enabled")


def update_campaign(
    db: firestore.Client,
    *,
    campaign_id: str,
    changes: Mapping[str, Any],
    now: datetime,
    audit: AuditContext | None = None,
    expected_version: int | None = None,
    action: AuditAction | None = None,
) -> CampaignRecord:
    """Apply changes in a transaction so the merged window is validated against fresh data, and
    record them (fields that changed, before and after) in the same commit. With
    `expected_version`, a campaign edited since that version is left as it is (CampaignChanged)."""
    ref = campaign_ref(db, campaign_id)

    @firestore.transactional
    def apply(transaction: firestore.Transaction) -> CampaignRecord:
        snapshot = ref.get(transaction=transaction)
        if not snapshot.exists:
            raise CampaignNotFound(f"Campaign {campaign_id!r} does not exist.")
        current = record_from_snapshot(snapshot)
        if current.deleting:
            raise CampaignNotFound(f"Campaign {campaign_id!r} is being deleted.")
        if expected_version is not None and current.version != expected_version:
            raise CampaignChanged(
                f"Campaign {campaign_id!r} was changed by someone else since version "
                f"{expected_version} (it is at version {current.version}): reload it, then save."
            )
        version = current.version + 1
        merged = current.model_copy(update={**changes, "updated_at": now, "version": version})
        if merged.ends_at <= merged.starts_at:
            raise RequestValidationFailed("ends_at must be after starts_at")
        if merged.codes_valid_for_seconds is not None and merged.codes_valid_until is not None:
            raise RequestValidationFailed(
                "codes_valid_for_seconds and codes_valid_until exclude each other"
            )
        # Claims are keyed on the identity: a new one would let every shopper claim again.
        for name in ("identity", "email_canonicalization"):
            if getattr(merged, name) != getattr(current, name) and now >= current.starts_at:
                raise RequestValidationFailed(f"{name} cannot change once the campaign has started")
        update: dict[str, Any] = {**changes, "updated_at": now, "version": version}
        _check_pre_queue(current, merged, changes, now)
        if merged.pre_queue_seconds and current.seed_commitment is None:
            secret, commitment = new_drop_secret()
            transaction.create(drop_secret_ref(db, campaign_id), secret)
            update["seed_commitment"] = commitment
            merged = merged.model_copy(update={"seed_commitment": commitment})
        # claims/me reads every slot a shopper may hold, so remember the widest limit ever set.
        if merged.max_per_user > current.slots_ceiling:
            update["slots_ceiling"] = min(merged.max_per_user, MAX_CODES_PER_USER)
            merged = merged.model_copy(update={"slots_ceiling": update["slots_ceiling"]})
        transaction.update(ref, update)
        if audit is not None:
            names = {n for n in changes if n in AUDITED_FIELDS}
            before, after = audited(current, names), audited(merged, names)
            differ = {n for n in names if before[n] != after[n]}
            before = {n: v for n, v in before.items() if n in differ}
            after = {n: v for n, v in after.items() if n in differ}
            entry = audit.entry(
                action or update_action(before, after),
                campaign_id=campaign_id,
                target=campaign_id,
                before=before,
                after=after,
                version=version,
            )
            audit_store.add(transaction, db, entry)
        return merged

    result: CampaignRecord = apply(db.transaction())
    return result


def end_campaign(
    db: firestore.Client, *, campaign_id: str, now: datetime, audit: AuditContext
) -> CampaignRecord:
    """End the sale now: its window closes at this moment (claims answer CAMPAIGN_NOT_ACTIVE).
    A campaign already over is left as it is, and nothing is recorded."""
    current = get_campaign(db, campaign_id=campaign_id)
    if current.ends_at <= now:
        return current
    # A campaign that has not started yet ends as it would have begun: at once.
    changes: dict[str, Any] = {"ends_at": now}
    if current.starts_at >= now:
        changes["starts_at"] = now - timedelta(microseconds=1)
    return update_campaign(
        db,
        campaign_id=campaign_id,
        changes=changes,
        now=now,
        audit=audit,
        expected_version=current.version,
        action=AuditAction.END,
    )


def archive_campaign(
    db: firestore.Client, *, campaign_id: str, now: datetime, audit: AuditContext
) -> CampaignRecord:
    """Hide an ended campaign from lists; its codes, claims and reports stay readable."""
    current = get_campaign(db, campaign_id=campaign_id)
    if current.ends_at > now:
        raise CampaignNotEnded(
            f"Campaign {campaign_id!r} has not ended: end it first, then archive it."
        )
    if current.archived:
        return current
    return update_campaign(
        db,
        campaign_id=campaign_id,
        changes={"archived": True},
        now=now,
        audit=audit,
        expected_version=current.version,
        action=AuditAction.ARCHIVE,
    )


def _check_pre_queue(
    current: CampaignRecord, merged: CampaignRecord, changes: Mapping[str, Any], now: datetime
) -> None:
    opened = current.pre_queue_opens_at
    if opened is not None and now >= opened:
        fixed = [name for name in _FIXED_WHILE_PRE_QUEUED if name in changes]
        if any(changes[name] != getattr(current, name) for name in fixed):
            raise RequestValidationFailed(
                f"{', '.join(fixed)} cannot change once the pre-queue has opened"
            )
    if not merged.pre_queue_seconds:
        return
    if not merged.waiting_room_enabled:
        raise RequestValidationFailed(
            "a pre-queue admits its draw through the waiting room: enable it"
        )
    opens = merged.pre_queue_opens_at
    if opened is None and opens is not None and opens < now:
        raise RequestValidationFailed(
            "the pre-queue must open after this change: its seed's commitment is published "
            "before anyone joins"
        )


def mark_sold_out(
    db: firestore.Client, *, campaign_id: str, read_at: datetime, now: datetime
) -> datetime | None:
    """Set sold_out unless the campaign changed since `read_at` (an import may have added codes).

    Returns the campaign's new update time, or None when the precondition failed: the caller
    must look again.
    """
    try:
        result = campaign_ref(db, campaign_id).update(
            {"sold_out": True, "sold_out_at": now},
            option=db.write_option(last_update_time=read_at),
        )
    except gexc.FailedPrecondition:
        return None
    updated: datetime = result.update_time
    return updated


def record_pool_growth(
    batch: firestore.WriteBatch,
    db: firestore.Client,
    *,
    campaign_id: str,
    added: int,
    now: datetime,
    generated: bool = False,
) -> None:
    """Called in the same batch that writes new coupons: invalidates any sold-out proof. Codes
    not `generated` by the campaign's own generation jobs (an upload) fit no known format: the
    campaign stops refusing codes that do not fit one (record_generated_format)."""
    changes: dict[str, Any] = {
        "codes_total": firestore.Increment(added),
        "pool_generation": firestore.Increment(1),
        "sold_out": False,
        "updated_at": now,
    }
    if not generated:
        changes |= {"code_format": None, "codes_mixed": True}
    batch.update(campaign_ref(db, campaign_id), changes)


# A generation request racing an upload's batches rereads the campaign at most this often.
FORMAT_ROUNDS = 8


def record_generated_format(
    db: firestore.Client, *, campaign_id: str, code_format: CodeFormat
) -> CampaignRecord:
    """Before codes of `code_format` are generated: the campaign records the format if it has no
    code yet (nor a format), keeps it if it is this one, and otherwise holds codes of several
    formats for good. Guarded by the update time read, so an upload's batch committing in
    between (it marks the campaign mixed) is never overwritten."""
    ref = campaign_ref(db, campaign_id)
    for _ in range(FORMAT_ROUNDS):
        snapshot = get_campaign_snapshot(db, campaign_id=campaign_id)
        if snapshot is None:
            raise CampaignNotFound(f"Campaign {campaign_id!r} does not exist.")
        record = record_from_snapshot(snapshot)
        if record.codes_mixed or record.code_format == code_format:
            return record
        first = record.codes_total == 0 and record.code_format is None
        changes: dict[str, Any] = (
            {"code_format": code_format} if first else {"code_format": None, "codes_mixed": True}
        )
        stored = {k: v.model_dump() if isinstance(v, CodeFormat) else v for k, v in changes.items()}
        try:
            ref.update(stored, option=db.write_option(last_update_time=snapshot.update_time))
        except gexc.FailedPrecondition:
            continue
        return record.model_copy(update=changes)
    raise Contended(retry_after=1)
