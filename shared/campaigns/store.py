"""Firestore access for campaign documents."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.campaigns import segments
from shared.campaigns.models import MAX_CODES_PER_USER, CampaignRecord
from shared.errors import CampaignExists, CampaignNotFound, RequestValidationFailed
from shared.gcp.firestore import Snapshot, campaign_ref, campaigns_collection


def record_from_snapshot(snapshot: Snapshot) -> CampaignRecord:
    data = snapshot.to_dict() or {}
    return CampaignRecord(campaign_id=snapshot.id, **data)


def _fields(record: CampaignRecord) -> dict[str, Any]:
    return record.model_dump(exclude={"campaign_id"})


def create_campaign(db: firestore.Client, *, record: CampaignRecord) -> CampaignRecord:
    """The campaign and its segments (see segments.py), in one atomic batch."""
    batch = db.batch()
    batch.create(campaign_ref(db, record.campaign_id), _fields(record))
    segments.add_to_batch(batch, db, campaign_id=record.campaign_id)
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
    return record_from_snapshot(snapshot)


def iter_campaigns(db: firestore.Client, *, page_size: int = 300) -> Iterator[CampaignRecord]:
    """Every campaign, read a page at a time in document-id order (no index needed)."""
    query = campaigns_collection(db).order_by("__name__").limit(page_size)
    last: Snapshot | None = None
    while True:
        page = list((query.start_after(last) if last is not None else query).stream())
        for snapshot in page:
            yield record_from_snapshot(snapshot)
        if len(page) < page_size:
            return
        last = page[-1]


def list_campaigns(db: firestore.Client, *, limit: int = 1000) -> list[CampaignRecord]:
    query = campaigns_collection(db).order_by("created_at", direction="DESCENDING").limit(limit)
    return [record_from_snapshot(s) for s in query.stream()]


def update_campaign(
    db: firestore.Client, *, campaign_id: str, changes: Mapping[str, Any], now: datetime
) -> CampaignRecord:
    """Apply changes in a transaction so the merged window is validated against fresh data."""
    ref = campaign_ref(db, campaign_id)

    @firestore.transactional
    def apply(transaction: firestore.Transaction) -> CampaignRecord:
        snapshot = ref.get(transaction=transaction)
        if not snapshot.exists:
            raise CampaignNotFound(f"Campaign {campaign_id!r} does not exist.")
        current = record_from_snapshot(snapshot)
        merged = current.model_copy(update={**changes, "updated_at": now})
        if merged.ends_at <= merged.starts_at:
            raise RequestValidationFailed("ends_at must be after starts_at")
        if merged.codes_valid_for_seconds is not None and merged.codes_valid_until is not None:
            raise RequestValidationFailed(
                "codes_valid_for_seconds and codes_valid_until exclude each other"
            )
        # Claims are keyed on the identity: a new one would let every shopper claim again.
        if merged.identity != current.identity and now >= current.starts_at:
            raise RequestValidationFailed("identity cannot change once the campaign has started")
        update: dict[str, Any] = {**changes, "updated_at": now}
        # claims/me reads every slot a shopper may hold, so remember the widest limit ever set.
        if merged.max_per_user > current.slots_ceiling:
            update["slots_ceiling"] = min(merged.max_per_user, MAX_CODES_PER_USER)
            merged = merged.model_copy(update={"slots_ceiling": update["slots_ceiling"]})
        transaction.update(ref, update)
        return merged

    result: CampaignRecord = apply(db.transaction())
    return result


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
) -> None:
    """Called in the same batch that writes new coupons: invalidates any sold-out proof."""
    batch.update(
        campaign_ref(db, campaign_id),
        {
            "codes_total": firestore.Increment(added),
            "pool_generation": firestore.Increment(1),
            "sold_out": False,
            "updated_at": now,
        },
    )
