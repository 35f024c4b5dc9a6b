"""Recount a campaign from its coupon documents and repair the usage counters.

Assigned, imported, redeemed and held coupons are recounted with aggregation queries; the
per-hour series of claims is rebuilt from the claim documents. Differences are written into the
counters as corrections, and reported. Run it when the campaign is quiet: events still in flight
during a sale show up as differences and would be corrected twice once they land.

Assigned coupons are what the counters call taken (claimed - released - returned +
voided_available), and a correction goes into `claimed`, so `remaining` (codes_total - taken)
comes out right. Coupons in state redeemed are the redemptions not reversed. The hourly series
of claims counts every claim ever made: the claim documents, and the records of released holds
(whose claim documents are gone).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.audit.models import AuditAction, AuditContext, entry_for
from shared.coupons.store import CouponState
from shared.gcp.firestore import (
    claims_collection,
    coupons_collection,
    released_holds_collection,
)
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
    audit: AuditContext | None = None,
) -> ReconciliationReport:
    coupons: Any = coupons_collection(db, campaign_id)
    imported = _count(coupons)
    assigned = _count(coupons.where(filter=FieldFilter("assigned", "==", True)))
    by_state = {
        state: _count(coupons.where(filter=FieldFilter("state", "==", state.value)))
        for state in (CouponState.REDEEMED, CouponState.HELD)
    }
    totals = counters.totals(campaign_id)
    checks = {
        "claimed": CounterCheck(counted=assigned, counters=totals.taken),
        "imported": CounterCheck(counted=imported, counters=totals.imported),
        "redeemed": CounterCheck(
            counted=by_state[CouponState.REDEEMED], counters=totals.redeemed - totals.reversed
        ),
        "held": CounterCheck(counted=by_state[CouponState.HELD], counters=totals.held),
    }
    corrections: dict[str, Any] = {
        name: firestore.Increment(check.difference)
        for name, check in checks.items()
        if check.difference
    }
    hours: Counter[str] = Counter(
        hour_key((s.to_dict() or {})["claimed_at"])
        for collection in (claims_collection, released_holds_collection)
        for s in collection(db, campaign_id).select(["claimed_at"]).stream()
    )
    hour_fixes = {
        key: hours.get(key, 0) - totals.claimed_by_hour.get(key, 0)
        for key in set(hours) | set(totals.claimed_by_hour)
        if hours.get(key, 0) != totals.claimed_by_hour.get(key, 0)
    }
    if hour_fixes:
        corrections["claimed_by_hour"] = {k: firestore.Increment(v) for k, v in hour_fixes.items()}
    if repair and corrections:
        differ = {n: c for n, c in checks.items() if c.difference}
        entry = entry_for(
            audit,
            AuditAction.RECONCILE,
            campaign_id=campaign_id,
            target=campaign_id,
            before={n: c.counters for n, c in differ.items()} | {"hours": len(hour_fixes)},
            after={n: c.counted for n, c in differ.items()},
        )
        counters.add_correction(campaign_id, corrections, audit=entry)
    return ReconciliationReport(
        campaign_id=campaign_id,
        checked_at=now,
        repaired=repair and bool(corrections),
        hours_differing=len(hour_fixes),
        **checks,
    )
