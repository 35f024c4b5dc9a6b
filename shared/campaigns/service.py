"""Campaign use cases: create, read, list, update, and the views the two APIs return."""

from __future__ import annotations

import re
import secrets
from datetime import datetime
from typing import Any, TypeVar

from google.cloud import firestore
from pydantic import BaseModel

from shared.audit import store as audit_store
from shared.audit.models import AuditContext
from shared.campaigns import store as campaign_store
from shared.campaigns.drop_secret import new_drop_secret
from shared.campaigns.models import (
    CampaignAdmin,
    CampaignCreate,
    CampaignPublic,
    CampaignRecord,
    CampaignStats,
    CampaignStatus,
    CampaignUpdate,
    WaitingRoomStatus,
)
from shared.errors import CampaignChanged, RequestValidationFailed

# A refused save lists the edits made since its version among the campaign's latest entries.
CHANGES_SHOWN = 20
# A view of a campaign (the landing page's, the console's).
V = TypeVar("V", bound=BaseModel)


def new_campaign_id(title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].strip("-") or "campaign"
    return f"{slug}-{secrets.token_hex(3)}"


def create_campaign(
    db: firestore.Client,
    *,
    data: CampaignCreate,
    now: datetime,
    audit: AuditContext | None = None,
) -> CampaignRecord:
    secret, commitment = new_drop_secret() if data.pre_queue_seconds else (None, None)
    record = CampaignRecord(
        campaign_id=data.campaign_id or new_campaign_id(data.title),
        title=data.title,
        starts_at=data.starts_at,
        ends_at=data.ends_at,
        max_per_user=data.max_per_user,
        slots_ceiling=data.max_per_user,
        low_stock_threshold=data.low_stock_threshold,
        waiting_room_enabled=data.waiting_room_enabled,
        admissions_per_second=data.admissions_per_second,
        hold_seconds=data.hold_seconds,
        identity=data.identity,
        email_canonicalization=data.email_canonicalization,
        allowed_sign_in_providers=data.allowed_sign_in_providers,
        require_app_check=data.require_app_check,
        on_cancel=data.on_cancel,
        codes_valid_for_seconds=data.codes_valid_for_seconds,
        codes_valid_until=data.codes_valid_until,
        version=1,
        pre_queue_seconds=data.pre_queue_seconds,
        seed_commitment=commitment,
        created_at=now,
        updated_at=now,
    )
    opens_at = record.pre_queue_opens_at
    if opens_at is not None and opens_at < now:
        raise RequestValidationFailed(
            "the pre-queue must open after the campaign is created: its seed's commitment is "
            "published before anyone joins"
        )
    return campaign_store.create_campaign(db, record=record, audit=audit, drop_secret=secret)


def update_campaign(
    db: firestore.Client,
    *,
    campaign_id: str,
    data: CampaignUpdate,
    now: datetime,
    audit: AuditContext | None = None,
    expected_version: int | None = None,
) -> CampaignRecord:
    """Apply an admin's edit. A save made from an older version than the campaign's is refused
    with the campaign as it is now and the edits made since (who, when, before and after)."""
    changes = data.model_dump(include=data.model_fields_set)
    try:
        return campaign_store.update_campaign(
            db,
            campaign_id=campaign_id,
            changes=changes,
            now=now,
            audit=audit,
            expected_version=expected_version,
        )
    except CampaignChanged as exc:
        current = campaign_store.get_campaign(db, campaign_id=campaign_id)
        entries, _ = audit_store.list_entries(
            db, campaign_id=campaign_id, limit=CHANGES_SHOWN, page_token=None
        )
        since = [
            e for e in entries if e.version is not None and e.version > (expected_version or 0)
        ]
        exc.details = {
            "current": admin_view(current, now=now, stats=None).model_dump(mode="json"),
            "changes": [audit_store.public(e).model_dump(mode="json") for e in reversed(since)],
        }
        raise


def public_view(
    campaign: CampaignRecord, *, now: datetime, remaining: int, room: WaitingRoomStatus
) -> CampaignPublic:
    status = campaign.status_at(now)
    return _view(campaign, CampaignPublic, status=status, remaining=remaining, waiting_room=room)


def admin_view(
    campaign: CampaignRecord, *, now: datetime, stats: CampaignStats | None
) -> CampaignAdmin:
    return _view(campaign, CampaignAdmin, status=campaign.status_at(now), stats=stats)


def _view(campaign: CampaignRecord, view: type[V], **computed: Any) -> V:
    """The view's fields: those computed for it, the others as the campaign has them."""
    return view(
        **{
            name: computed[name] if name in computed else getattr(campaign, name)
            for name in view.model_fields
        }
    )


def list_campaigns(
    db: firestore.Client,
    *,
    status: CampaignStatus | None,
    now: datetime,
    include_archived: bool = False,
) -> list[CampaignRecord]:
    campaigns = campaign_store.list_campaigns(db)
    return [
        c
        for c in campaigns
        if (status is None or c.status_at(now) is status)
        and (include_archived or not c.archived)
        and not c.deleting
    ]
