"""The invariant audit (devkit/audit.py) behind the claim, hold and load tests: each of its checks
finds a violation seeded into a sale that was clean, and names exactly the offending document, so
an audit that always said "ok" would fail here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from devkit.audit import AuditReport, audit_campaign
from shared.gcp.firestore import claims_collection, coupons_collection
from tests.support.api import auth
from tests.support.stack import MakeCampaign

SHOPPERS = ("ann", "bob", "cat")


@dataclass(frozen=True)
class Sale:
    """A campaign of four codes that three shoppers claimed one each, through claim_api."""

    db: firestore.Client
    campaign_id: str
    claims: dict[str, dict[str, Any]]  # by shopper: the claim document, with its id

    def claim_ref(self, shopper: str) -> firestore.DocumentReference:
        return claims_collection(self.db, self.campaign_id).document(self.claims[shopper]["id"])

    def coupon_ref(self, shopper: str) -> firestore.DocumentReference:
        coupon_id = self.claims[shopper]["coupon_id"]
        return coupons_collection(self.db, self.campaign_id).document(coupon_id)

    def coupon_id(self, shopper: str) -> str:
        coupon_id: str = self.claims[shopper]["coupon_id"]
        return coupon_id


@pytest.fixture
def sale(claim_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client) -> Sale:
    campaign_id = make_campaign(codes=4)
    for shopper in SHOPPERS:
        response = claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth(shopper))
        assert response.status_code == 201, response.get_json()
    claims = {
        snapshot.get("user_id"): {"id": snapshot.id, **(snapshot.to_dict() or {})}
        for snapshot in claims_collection(db, campaign_id).stream()
    }
    assert sorted(claims) == sorted(SHOPPERS)
    return Sale(db=db, campaign_id=campaign_id, claims=claims)


def test_a_clean_sale_passes(sale: Sale) -> None:
    report = audit_campaign(sale.db, campaign_id=sale.campaign_id)

    assert report.ok, report.violations
    assert (report.codes_total, report.assigned, report.claims, report.shoppers) == (4, 3, 3, 3)


def copy_claim(sale: Sale, shopper: str, *, claim_id: str, **changes: Any) -> None:
    data = {k: v for k, v in sale.claims[shopper].items() if k != "id"}
    claims_collection(sale.db, sale.campaign_id).document(claim_id).set({**data, **changes})


def holder(sale: Sale, shopper: str) -> str:
    claim_id: str = sale.claims[shopper]["id"]
    return claim_id.rpartition("-")[0]


def held_twice(sale: Sale) -> str:
    copy_claim(sale, "ann", claim_id="intruder-0", user_id="intruder")
    return sale.coupon_id("ann")


def over_issued(sale: Sale) -> int:
    for n in range(2):  # 3 + 2 claims for 4 codes
        copy_claim(sale, "bob", claim_id=f"ghost{n}-0", user_id=f"ghost{n}", coupon_id=f"g{n}")
    return 1


def shopper_over_limit(sale: Sale) -> str:
    # bob's code moves to ann under bob's holder key: ann holds two codes.
    sale.claim_ref("bob").update({"user_id": "ann"})
    sale.coupon_ref("bob").update({"assigned_to": "ann"})
    return "ann"


def holder_over_limit(sale: Sale) -> str:
    # bob's claim re-keyed as ann's second slot, still bob's account.
    moved = f"{holder(sale, 'ann')}-1"
    copy_claim(sale, "bob", claim_id=moved)
    sale.claim_ref("bob").delete()
    sale.coupon_ref("bob").update({"claim_id": moved})
    return holder(sale, "ann")


def claim_without_coupon(sale: Sale) -> str:
    sale.coupon_ref("cat").update({"assigned_to": "someone-else"})
    claim_id: str = sale.claims["cat"]["id"]
    return claim_id


def coupon_without_claim(sale: Sale) -> str:
    sale.claim_ref("cat").delete()
    return sale.coupon_id("cat")


def redeemed_twice(sale: Sale) -> str:
    sale.coupon_ref("ann").update({"redemptions": 2})
    return sale.coupon_id("ann")


def redeemed_without_holder(sale: Sale) -> str:
    sale.coupon_ref("bob").update({"state": "redeemed", "order_id": "order-1", "redemptions": 1})
    return sale.coupon_id("bob")


def slot_disagreeing(sale: Sale) -> str:
    sale.claim_ref("cat").update({"state": "held"})
    return sale.coupon_id("cat")


def hold_unfindable(sale: Sale) -> str:
    expires_at = sale.claims["ann"]["claimed_at"]
    sale.coupon_ref("ann").update(
        {"state": "held", "expires_at": expires_at, "expires_bucket": "not-a-shard"}
    )
    sale.claim_ref("ann").update({"state": "held", "expires_at": expires_at})
    return sale.coupon_id("ann")


def reported(report: AuditReport, check: str) -> Any:
    return report.over_issued if check == "over_issued" else getattr(report, check)


@pytest.mark.parametrize(
    ("check", "seed", "as_reported"),
    [
        ("codes_held_twice", held_twice, lambda found: [found]),
        ("over_issued", over_issued, lambda found: found),
        ("shoppers_over_limit", shopper_over_limit, lambda found: [found]),
        ("holders_over_limit", holder_over_limit, lambda found: [found]),
        ("claims_without_coupon", claim_without_coupon, lambda found: [found]),
        ("coupons_without_claim", coupon_without_claim, lambda found: [found]),
        ("codes_redeemed_twice", redeemed_twice, lambda found: [found]),
        ("redeemed_without_holder", redeemed_without_holder, lambda found: [found]),
        ("slots_disagreeing", slot_disagreeing, lambda found: [found]),
        ("holds_unfindable", hold_unfindable, lambda found: [found]),
    ],
)
def test_each_check_finds_its_seeded_violation(
    sale: Sale,
    check: str,
    seed: Callable[[Sale], Any],
    as_reported: Callable[[Any], Any],
) -> None:
    found = seed(sale)

    report = audit_campaign(sale.db, campaign_id=sale.campaign_id)

    assert not report.ok
    assert reported(report, check) == as_reported(found)
    assert report.violations[check] >= 1


def test_every_check_of_the_audit_is_seeded_above() -> None:
    seeded = {
        mark.args[1][i][0]
        for mark in test_each_check_finds_its_seeded_violation.pytestmark
        if mark.name == "parametrize"
        for i in range(len(mark.args[1]))
    }
    clean = AuditReport(
        campaign_id="c",
        codes_total=0,
        assigned=0,
        unassigned=0,
        claims=0,
        shoppers=0,
        max_per_user=1,
    )
    assert seeded == set(clean.violations)
