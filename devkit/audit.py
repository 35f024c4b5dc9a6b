"""Read a campaign's truth back from Firestore and check the claim invariants.

Used by the tests, the claim benchmark and the load test: what the API answered is compared with
what the database holds, never with what a client believes.

The checkout half adds: no code redeemed twice (each redemption increments the coupon's
`redemptions`), none held by two shoppers (two slots on one coupon), none redeemed after its
release (a redeemed coupon must still be assigned to the very claim that redeemed it), a shopper's
slot agreeing with its coupon on state and expiry, and every hold findable by the sweep.

After the claim: each reversal recorded exactly once (the coupon's `reversals` equals its
reversal records, and redemptions less reversals is 1 exactly while it is redeemed), a slot let
go by a return to the pool backed by its record and no longer its coupon's, and no code redeemed
after its validity (the campaign's valid_until from the claim time, as it reads now).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from google.cloud import firestore

from shared.campaigns import store as campaign_store
from shared.campaigns.models import CampaignRecord
from shared.claims.models import ClaimState
from shared.coupons.store import EXPIRES_BUCKET, CouponState, coupon_state
from shared.gcp.firestore import claims_collection, coupons_collection, reversals_collection
from shared.types import OnCancel

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
    "reversals",
    "redeemed_at",
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
    reversed: int = 0  # reversal records
    voided: int = 0
    # Slots whose code went back to the pool: still counted by the per-user limit.
    slots_let_go: int = 0
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
    reversals_miscounted: list[str] = field(default_factory=list)
    redeemed_after_expiry: list[str] = field(default_factory=list)

    @property
    def over_issued(self) -> int:
        return max(0, self.claims - self.slots_let_go - self.codes_total)

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
            "reversals_miscounted": len(self.reversals_miscounted),
            "redeemed_after_expiry": len(self.redeemed_after_expiry),
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
    reversals = [s.to_dict() or {} for s in reversals_collection(db, campaign_id).stream()]
    states = Counter(coupon_state(c) for c in coupons.values())
    let_go = {
        claim_id
        for claim_id, claim in claims.items()
        if claim.get("state") == ClaimState.REVERSED.value
        and claim.get("on_cancel") == OnCancel.RETURN_TO_POOL.value
    }

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
        reversed=len(reversals),
        voided=states[CouponState.VOIDED],
        slots_let_go=len(let_go),
    )
    live = {claim_id: claim for claim_id, claim in claims.items() if claim_id not in let_go}
    _check_claims(report, coupons, claims, live, max(campaign.max_per_user, 1))
    _check_checkout(report, coupons, claims)
    _check_reversals(report, coupons, claims, let_go, reversals)
    _check_expiry(report, campaign, coupons, reversals)
    return report


def _check_claims(
    report: AuditReport,
    coupons: dict[str, dict[str, Any]],
    claims: dict[str, dict[str, Any]],
    live: dict[str, dict[str, Any]],
    per_user: int,
) -> None:
    """`live`: the claims still holding their coupon (all but the slots let go)."""
    by_coupon: defaultdict[str, list[str]] = defaultdict(list)
    for claim_id, claim in live.items():
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
        if coupon.get("assigned")
        and coupon.get("claim_id") not in live
        # A code voided while nobody held it is assigned to nobody.
        and not (coupon_state(coupon) is CouponState.VOIDED and coupon.get("claim_id") is None)
    )


def _check_checkout(
    report: AuditReport, coupons: dict[str, dict[str, Any]], claims: dict[str, dict[str, Any]]
) -> None:
    for coupon_id, coupon in coupons.items():
        state = coupon_state(coupon)
        # Redeemed now exactly when one redemption is not reversed; never two at once.
        unreversed = int(coupon.get("redemptions", 0)) - int(coupon.get("reversals", 0))
        if unreversed not in (0, 1) or (unreversed == 1) != (state is CouponState.REDEEMED):
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


def _check_reversals(
    report: AuditReport,
    coupons: dict[str, dict[str, Any]],
    claims: dict[str, dict[str, Any]],
    let_go: set[str],
    reversals: list[dict[str, Any]],
) -> None:
    """Each reversal happened once (the coupon counts as many as there are records), and a slot
    let go is backed by a return to the pool and is no longer its coupon's."""
    recorded = Counter(r["coupon_id"] for r in reversals)
    report.reversals_miscounted = sorted(
        coupon_id
        for coupon_id in set(recorded) | set(coupons)
        if recorded[coupon_id] != int(coupons.get(coupon_id, {}).get("reversals", 0))
    )
    returned = {
        r["claim_id"] for r in reversals if r.get("on_cancel") == OnCancel.RETURN_TO_POOL.value
    }
    for claim_id in sorted(let_go):
        coupon = coupons.get(claims[claim_id]["coupon_id"], {})
        if claim_id not in returned or coupon.get("claim_id") == claim_id:
            report.slots_disagreeing.append(claim_id)


def _check_expiry(
    report: AuditReport,
    campaign: CampaignRecord,
    coupons: dict[str, dict[str, Any]],
    reversals: list[dict[str, Any]],
) -> None:
    """No redemption after the code's validity: the redeemed coupons, and the redemptions
    reversed since (their records keep the claim and redemption times)."""
    redeemed = [
        (coupon_id, coupon.get("assigned_at"), coupon.get("redeemed_at"))
        for coupon_id, coupon in coupons.items()
        if coupon_state(coupon) in (CouponState.REDEEMED, CouponState.REVERSED)
    ]
    redeemed += [
        (f"{r['coupon_id']}-{r['redemption']}", r.get("claimed_at"), r.get("redeemed_at"))
        for r in reversals
    ]
    # (A redemption without its times is another check's finding: redeemed_without_holder.)
    report.redeemed_after_expiry = sorted(
        key
        for key, claimed_at, redeemed_at in redeemed
        if claimed_at is not None
        and redeemed_at is not None
        and (until := campaign.valid_until(claimed_at)) is not None
        and redeemed_at > until
    )


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
