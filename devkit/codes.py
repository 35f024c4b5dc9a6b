"""Writing codes straight into a campaign, for tests, benchmarks and the demo (the product
imports codes through the bucket, shared/intake)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from google.cloud import firestore

from shared.campaigns.store import record_pool_growth
from shared.coupons.store import coupon_fields, coupon_id_for
from shared.gcp.firestore import coupons_collection

# Firestore's limit for one atomic batch.
MAX_BATCH_WRITES = 500


def add_codes(
    db: firestore.Client,
    *,
    campaign_id: str,
    codes: Iterable[str],
    now: datetime,
    job_id: str | None = None,
) -> int:
    """Create coupons for codes known to be new (fixtures, demo). Raises AlreadyExists otherwise."""
    collection = coupons_collection(db, campaign_id)
    written = 0
    chunk: list[str] = []

    def flush() -> None:
        nonlocal written
        if not chunk:
            return
        batch = db.batch()
        for code in chunk:
            batch.create(
                collection.document(coupon_id_for(code)),
                coupon_fields(code=code, now=now, job_id=job_id),
            )
        record_pool_growth(batch, db, campaign_id=campaign_id, added=len(chunk), now=now)
        batch.commit()
        written += len(chunk)
        chunk.clear()

    for code in codes:
        chunk.append(code)
        if len(chunk) == MAX_BATCH_WRITES - 1:
            flush()
    flush()
    return written
