"""Who claimed what: a campaign's claims, a page at a time, for the console and for finance."""

from __future__ import annotations

from typing import Annotated

from google.cloud import firestore
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from shared.campaigns import store as campaign_store
from shared.gcp.firestore import claims_collection
from shared.types import UtcTime

DEFAULT_PAGE = 50
MAX_PAGE = 500
CLAIM_FIELDS = ["user_id", "code", "state", "claimed_at", "expires_at", "redeemed_at", "order_id"]


class ClaimsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    limit: int = Field(default=DEFAULT_PAGE, ge=1, le=MAX_PAGE)
    # The last claim id of the previous page (next_page_token).
    page_token: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,200}$")] | None = None


class ClaimRow(BaseModel):
    claim_id: str
    user_id: str
    code: str
    state: str
    claimed_at: UtcTime | None
    expires_at: UtcTime | None
    redeemed_at: UtcTime | None
    order_id: str | None


class ClaimPage(BaseModel):
    claims: list[ClaimRow]
    next_page_token: str | None


def list_claims(
    db: firestore.Client, *, campaign_id: str, limit: int, page_token: str | None
) -> ClaimPage:
    """Claims in id order (no index needed), `limit` at a time: one read per claim listed."""
    campaign_store.get_campaign(db, campaign_id=campaign_id)
    collection = claims_collection(db, campaign_id)
    query = collection.select(CLAIM_FIELDS).order_by("__name__")
    if page_token is not None:
        query = query.start_after({"__name__": collection.document(page_token)})
    snapshots = list(query.limit(limit + 1).stream())
    rows = [
        ClaimRow(
            claim_id=s.id,
            user_id=str(data.get("user_id", "")),
            code=str(data.get("code", "")),
            state=str(data.get("state") or "claimed"),
            claimed_at=data.get("claimed_at"),
            expires_at=data.get("expires_at"),
            redeemed_at=data.get("redeemed_at"),
            order_id=data.get("order_id"),
        )
        for s in snapshots[:limit]
        for data in [s.to_dict() or {}]
    ]
    more = len(snapshots) > limit
    return ClaimPage(claims=rows, next_page_token=rows[-1].claim_id if more else None)
