"""Recount a campaign from its coupon documents and repair the usage counters.

Claimed and imported totals are recounted with aggregation queries; the per-hour series of
claims is rebuilt from the claim documents. Differences are written into the counters as
corrections, and reported. Run it when the campaign is quiet: events still in flight during a
sale show up as differences and would be corrected twice once they land.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.gcp.firestore import claims_collection, coupons_collection
from shared.usage.counters import ShardedCounters, hour_key
from shared.usage.models import CounterCheck, ReconciliationReport


def _count(query: Any) -> int:
    results = query.count().get()
    return int(results[0][0].value)


def reconcile(
    db: firestore.Client,
    *,
    counters: ShardedCounters,
    campaign_id: str,
    now: datetime,
    repair: bool,
) -> ReconciliationReport:
    coupons: Any = coupons_collection(db, campaign_id)
    imported = _count(coupons)
    claimed = _count(coupons.where(filter=FieldFilter("assigned", "==", True)))
    hours: Counter[str] = Counter(
        hour_key((s.to_dict() or {})["claimed_at"])
        for s in claims_collection(db, campaign_id).select(["claimed_at"]).stream()
    )
    totals = counters.totals(campaign_id)

    corrections: dict[str, Any] = {}
    if claimed != totals.claimed:
        corrections["claimed"] = firestore.Increment(claimed - totals.claimed)
    if imported != totals.imported:
        corrections["imported"] = firestore.Increment(imported - totals.imported)
    hour_fixes = {
        key: hours.get(key, 0) - totals.claimed_by_hour.get(key, 0)
        for key in set(hours) | set(totals.claimed_by_hour)
        if hours.get(key, 0) != totals.claimed_by_hour.get(key, 0)
    }
    if hour_fixes:
        corrections["claimed_by_hour"] = {k: firestore.Increment(v) for k, v in hour_fixes.items()}
    if repair and corrections:
        counters.add_correction(campaign_id, corrections)
    return ReconciliationReport(
        campaign_id=campaign_id,
        checked_at=now,
        repaired=repair and bool(corrections),
        claimed=CounterCheck(counted=claimed, counters=totals.claimed),
        imported=CounterCheck(counted=imported, counters=totals.imported),
        hours_differing=len(hour_fixes),
    )
