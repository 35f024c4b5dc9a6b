"""Claim models: the stored claim and what the claim API returns."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from shared.events.models import CouponClaimed
from shared.types import UtcTime


class ClaimRecord(BaseModel):
    """A claim as stored in `campaigns/{campaign_id}/claims/{claim_id}`."""

    claim_id: str
    campaign_id: str
    user_id: str
    coupon_id: str
    code: str
    slot: int
    claimed_at: datetime
    idempotency_key: str | None = None


class ClaimPublic(BaseModel):
    claim_id: str
    campaign_id: str
    user_id: str
    code: str
    claimed_at: UtcTime


class HeldClaim(BaseModel):
    claim_id: str
    code: str
    claimed_at: UtcTime


class HeldClaims(BaseModel):
    claims: list[HeldClaim]


def coupon_claimed(claim: ClaimRecord) -> CouponClaimed:
    """The claim's event; its id derives from the claim, so re-publishing it is harmless."""
    return CouponClaimed(
        event_id=f"claimed.{claim.campaign_id}.{claim.claim_id}",
        campaign_id=claim.campaign_id,
        occurred_at=claim.claimed_at,
        coupon_id=claim.coupon_id,
        user_id=claim.user_id,
        claim_id=claim.claim_id,
    )
