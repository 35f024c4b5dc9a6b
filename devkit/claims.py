"""Claims for tests and benchmarks: an account's claim through the engine alone, and claim
documents written straight into a campaign, to feed count_usage `coupon.claimed` events without
running the engine (count_usage counts only events whose claim exists,
shared/usage/verification.py)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from google.cloud import firestore

from shared.claims import policy
from shared.claims.engine import ClaimEngine, ClaimOutcome
from shared.claims.models import ClaimRecord, coupon_claimed
from shared.claims.policy import Shopper
from shared.claims.recovery import sweep_bucket
from shared.events.models import CouponClaimed
from shared.gcp.firestore import claims_collection

# Firestore's limit for one atomic batch.
MAX_BATCH_WRITES = 500


def claim_as(
    engine: ClaimEngine, campaign_id: str, user_id: str, *, idempotency_key: str | None = None
) -> ClaimOutcome:
    """The engine's claim for an account, as ClaimService makes it (the instance's copy of the
    campaign, the holder key its identity counts), without the policy's checks, the waiting
    room or the event."""
    campaign = engine.campaign(campaign_id)
    return engine.claim(
        campaign,
        user_id=user_id,
        holder=policy.holder_key(campaign, Shopper(user_id=user_id)),
        idempotency_key=idempotency_key,
    )


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
