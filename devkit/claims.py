"""Writing claim documents straight into a campaign, for tests and benchmarks that feed
count_usage `coupon.claimed` events without running the claim engine (count_usage counts only
events whose claim exists, shared/usage/verification.py)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from google.cloud import firestore

from shared.claims.models import ClaimRecord, coupon_claimed
from shared.claims.recovery import sweep_bucket
from shared.events.models import CouponClaimed
from shared.gcp.firestore import claims_collection

# Firestore's limit for one atomic batch.
MAX_BATCH_WRITES = 500


def claim_record(campaign_id: str, n: int, *, claimed_at: datetime) -> ClaimRecord:
    """The n-th of a run of claims, each by its own shopper of its own code."""
    return ClaimRecord(
        claim_id=f"claim-{n}",
        campaign_id=campaign_id,
        user_id=f"user-{n}",
        coupon_id=f"coupon-{n}",
        code=f"CODE-{n}",
        slot=0,
        claimed_at=claimed_at,
    )


def add_claims(db: firestore.Client, claims: Iterable[ClaimRecord]) -> list[CouponClaimed]:
    """Create the claim documents (as the engine stores them); returns their events."""
    written: list[CouponClaimed] = []
    batch = db.batch()
    pending = 0
    for claim in claims:
        batch.create(
            claims_collection(db, claim.campaign_id).document(claim.claim_id),
            {
                **claim.model_dump(exclude={"claim_id"}),
                "sweep_bucket": sweep_bucket(claim.claimed_at),
            },
        )
        written.append(coupon_claimed(claim))
        pending += 1
        if pending == MAX_BATCH_WRITES:
            batch.commit()
            batch, pending = db.batch(), 0
    if pending:
        batch.commit()
    return written
