"""Read a campaign's truth back from Firestore and check the claim invariants.

Used by the tests, the claim benchmark and the load test: what the API answered is compared with
what the database holds, never with what a client believes.

The checkout half adds: no code redeemed twice (each redemption increments the coupon's
`redemptions`), none held by two shoppers (two slots on one coupon), none redeemed after its
release (a redeemed coupon must still be assigned to the very claim that redeemed it), a shopper's
slot agreeing with its coupon on state and expiry, and every hold findable by the sweep.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from google.cloud import firestore

from shared.campaigns import store as campaign_store
from shared.coupons.store import EXPIRES_BUCKET, CouponState, coupon_state
from shared.gcp.firestore import claims_collection, coupons_collection

COUPON_FIELDS = [
    "code",
    "assigned",
    "assigned_to",
    "claim_id",
    "assigned_at",
    "state",
    "expires_at",
    EXPIRES_BUCKET,
    "order_id",
    "redemptions",
]


@dataclass
class AuditReport:
    campaign_id: str
    codes_total: int
    assigned: int
    unassigned: int
    claims: int
    shoppers: int
    max_per_user: int
    held: int = 0
    redeemed: int = 0
    # Each list names the offending ids; an empty list is a held invariant.
    codes_held_twice: list[str] = field(default_factory=list)
    shoppers_over_limit: list[str] = field(default_factory=list)
    # Holders are what the per-user limit counts (account, phone or email): the claim id's prefix.
    holders_over_limit: list[str] = field(default_factory=list)
    claims_without_coupon: list[str] = field(default_factory=list)
    coupons_without_claim: list[str] = field(default_factory=list)
    codes_redeemed_twice: list[str] = field(default_factory=list)
    redeemed_without_holder: list[str] = field(default_factory=list)
    slots_disagreeing: list[str] = field(default_factory=list)
    holds_unfindable: list[str] = field(default_factory=list)

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
            "codes_redeemed_twice": len(self.codes_redeemed_twice),
            "redeemed_without_holder": len(self.redeemed_without_holder),
            "slots_disagreeing": len(self.slots_disagreeing),
            "holds_unfindable": len(self.holds_unfindable),
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
        for s in coupons_collection(db, campaign_id).select(COUPON_FIELDS).stream()
    }
    claims = {s.id: s.to_dict() or {} for s in claims_collection(db, campaign_id).stream()}
    states = Counter(coupon_state(c) for c in coupons.values())

    report = AuditReport(
        campaign_id=campaign_id,
        codes_total=len(coupons),
        assigned=sum(1 for c in coupons.values() if c.get("assigned")),
        unassigned=sum(1 for c in coupons.values() if not c.get("assigned")),
        claims=len(claims),
        shoppers=len({c["user_id"] for c in claims.values()}),
        max_per_user=campaign.max_per_user,
        held=states[CouponState.HELD],
        redeemed=states[CouponState.REDEEMED],
    )
    _check_claims(report, coupons, claims, max(campaign.max_per_user, 1))
    _check_checkout(report, coupons, claims)
    return report


def _check_claims(
    report: AuditReport,
    coupons: dict[str, dict[str, Any]],
    claims: dict[str, dict[str, Any]],
    per_user: int,
) -> None:
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
    per_user_claims = Counter(c["user_id"] for c in claims.values())
    report.shoppers_over_limit = sorted(u for u, n in per_user_claims.items() if n > per_user)
    per_holder = Counter(holder_of(claim_id) for claim_id in claims)
    report.holders_over_limit = sorted(h for h, n in per_holder.items() if n > per_user)
    report.coupons_without_claim = sorted(
        coupon_id
        for coupon_id, coupon in coupons.items()
        if coupon.get("assigned") and coupon.get("claim_id") not in claims
    )


def _check_checkout(
    report: AuditReport, coupons: dict[str, dict[str, Any]], claims: dict[str, dict[str, Any]]
) -> None:
    for coupon_id, coupon in coupons.items():
        state = coupon_state(coupon)
        if int(coupon.get("redemptions", 0)) > 1:
            report.codes_redeemed_twice.append(coupon_id)
        slot = claims.get(coupon.get("claim_id") or "")
        if state is CouponState.REDEEMED and not _redeemed_by_holder(coupon, slot):
            report.redeemed_without_holder.append(coupon_id)
        if state is CouponState.HELD and not str(coupon.get(EXPIRES_BUCKET, "")).startswith(
            coupon_id[0]
        ):
            report.holds_unfindable.append(coupon_id)
        if slot is not None and (
            slot.get("state", CouponState.CLAIMED.value) != state.value
            or (state is CouponState.HELD and slot.get("expires_at") != coupon.get("expires_at"))
        ):
            report.slots_disagreeing.append(coupon_id)
    for bucket in (
        report.codes_redeemed_twice,
        report.redeemed_without_holder,
        report.holds_unfindable,
        report.slots_disagreeing,
    ):
        bucket.sort()


def _redeemed_by_holder(coupon: dict[str, Any], slot: dict[str, Any] | None) -> bool:
    """The redeemed coupon is still assigned to the claim that redeemed it: the same shopper,
    the same hold (its claim time), the same order. A redemption landing after the hold's
    release would find the coupon free, or assigned to the next shopper's claim."""
    return (
        slot is not None
        and bool(coupon.get("assigned"))
        and slot.get("state") == CouponState.REDEEMED.value
        and slot.get("user_id") == coupon.get("assigned_to")
        and slot.get("claimed_at") == coupon.get("assigned_at")
        and slot.get("order_id") == coupon.get("order_id")
    )
