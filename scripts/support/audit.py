"""Read a campaign's truth back from Firestore and check the claim invariants.

Used by the tests, the claim benchmark and the load test: what the API answered is compared with
what the database holds, never with what a client believes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from google.cloud import firestore

from shared.campaigns import store as campaign_store
from shared.gcp.firestore import claims_collection, coupons_collection


@dataclass
class AuditReport:
    campaign_id: str
    codes_total: int
    assigned: int
    unassigned: int
    claims: int
    shoppers: int
    max_per_user: int
    # Each list names the offending ids; an empty list is a held invariant.
    codes_held_twice: list[str] = field(default_factory=list)
    shoppers_over_limit: list[str] = field(default_factory=list)
    # Holders are what the per-user limit counts (account, phone or email): the claim id's prefix.
    holders_over_limit: list[str] = field(default_factory=list)
    claims_without_coupon: list[str] = field(default_factory=list)
    coupons_without_claim: list[str] = field(default_factory=list)

    @property
    def over_issued(self) -> int:
        return max(0, self.claims - self.codes_total)

    @property
    def violations(self) -> dict[str, int]:
        return {
            "codes_held_twice": len(self.codes_held_twice),
            "over_issued": self.over_issued,
            "shoppers_over_limit": len(self.shoppers_over_limit),
            "holders_over_limit": len(self.holders_over_limit),
            "claims_without_coupon": len(self.claims_without_coupon),
            "coupons_without_claim": len(self.coupons_without_claim),
        }

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


def holder_of(claim_id: str) -> str:
    """The holder key of a claim id (shared/claims/store.py: `{holder}-{slot}`)."""
    return claim_id.rpartition("-")[0]


def audit_campaign(db: firestore.Client, *, campaign_id: str) -> AuditReport:
    campaign = campaign_store.get_campaign(db, campaign_id=campaign_id)
    coupons = {
        s.id: s.to_dict() or {}
        for s in coupons_collection(db, campaign_id)
        .select(["code", "assigned", "assigned_to", "claim_id"])
        .stream()
    }
    claims = {s.id: s.to_dict() or {} for s in claims_collection(db, campaign_id).stream()}

    report = AuditReport(
        campaign_id=campaign_id,
        codes_total=len(coupons),
        assigned=sum(1 for c in coupons.values() if c.get("assigned")),
        unassigned=sum(1 for c in coupons.values() if not c.get("assigned")),
        claims=len(claims),
        shoppers=len({c["user_id"] for c in claims.values()}),
        max_per_user=campaign.max_per_user,
    )
    by_coupon: defaultdict[str, list[str]] = defaultdict(list)
    for claim_id, claim in claims.items():
        by_coupon[claim["coupon_id"]].append(claim_id)
        coupon = coupons.get(claim["coupon_id"])
        if (
            coupon is None
            or not coupon.get("assigned")
            or coupon.get("assigned_to") != claim["user_id"]
            or coupon.get("claim_id") != claim_id
        ):
            report.claims_without_coupon.append(claim_id)
    report.codes_held_twice = sorted(cid for cid, ids in by_coupon.items() if len(ids) > 1)
    per_user = Counter(c["user_id"] for c in claims.values())
    report.shoppers_over_limit = sorted(
        u for u, n in per_user.items() if n > max(campaign.max_per_user, 1)
    )
    per_holder = Counter(holder_of(claim_id) for claim_id in claims)
    report.holders_over_limit = sorted(
        h for h, n in per_holder.items() if n > max(campaign.max_per_user, 1)
    )
    report.coupons_without_claim = sorted(
        coupon_id
        for coupon_id, coupon in coupons.items()
        if coupon.get("assigned") and coupon.get("claim_id") not in claims
    )
    return report
