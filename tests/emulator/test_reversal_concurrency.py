"""Reversals under real concurrency on the emulator, round after round and in both orders: the
same cancellation delivered several times at once, a reversal racing a second redemption of its
code, a reversal racing the release of the hold it came from, a void racing a claim. Each round's
truth is read back from Firestore (the coupon, the reversal records, the audit) and, at the end,
from the counters count_usage built out of the events: never from what the threads were told."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from google.cloud import firestore

from devkit.audit import AuditReport, audit_campaign
from shared.campaigns.store import get_campaign
from shared.claims.holds import HoldReleaser
from shared.claims.policy import Shopper
from shared.claims.redemption import RedemptionService, order_key
from shared.claims.reversal import ReversalService
from shared.clock import utcnow
from shared.container import instance_services
from shared.coupons.store import CouponState, coupon_id_for, coupon_state, expired_hold
from shared.errors import CodedropError
from shared.gcp.firestore import coupons_collection, redeemed_order_ref, reversals_collection
from tests.support.stack import MakeCampaign, Pump

pytestmark = pytest.mark.emulator

ROUNDS = 12
# Who goes first in a round: both at once behind a barrier, or one after the other.
ORDERS = ("race", "reversal_first", "other_first")


def redeemer(db: firestore.Client) -> RedemptionService:
    """Another instance's checkout: its own service, the shared bus."""
    return RedemptionService(db=db, bus=instance_services().bus, clock=utcnow)


def reverser(db: firestore.Client) -> ReversalService:
    return ReversalService(
        db=db, bus=instance_services().bus, clock=utcnow, redemptions=redeemer(db)
    )


def claim(campaign_id: str, user: str) -> str:
    """A claim as the API makes it (its event published, so the counters see it): the code."""
    result = instance_services().claims.claim(campaign_id=campaign_id, shopper=Shopper(user))
    return result.claim.code


def assert_clean(db: firestore.Client, campaign_id: str) -> AuditReport:
    report = audit_campaign(db, campaign_id=campaign_id)
    assert report.ok, report.violations
    return report


@pytest.fixture
def orders(db: firestore.Client, cleanup: list[Callable[[], object]]) -> Callable[[str], str]:
    """An order id unique to the test, its record (outside the campaign) deleted after it."""
    prefix = f"{utcnow().timestamp():.0f}"

    def order(name: str) -> str:
        order_id = f"{prefix}-{name}"
        cleanup.append(redeemed_order_ref(db, order_key(order_id)).delete)
        return order_id

    return order


def in_order(order: str, first: Callable[[], Any], second: Callable[[], Any]) -> list[Any]:
    """Run both: at once behind a barrier ("race"), or one after the other."""
    if order == "reversal_first":
        return [first(), second()]
    if order == "other_first":
        results = [None, second()]
        results[0] = first()
        return results
    barrier = threading.Barrier(2)

    def at_once(call: Callable[[], Any]) -> Any:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(at_once, (first, second)))


def outcome(call: Callable[[], Any]) -> Callable[[], str]:
    """What a call answered: "ok", or the error_code that refused it."""

    def run() -> str:
        try:
            call()
        except CodedropError as exc:
            return exc.error_code
        return "ok"

    return run


def counted(campaign_id: str) -> dict[str, int]:
    services = instance_services()
    stats = services.usage.stats(get_campaign(services.db, campaign_id=campaign_id), now=utcnow())
    return stats.model_dump(
        include={"claimed", "redeemed", "released", "reversed", "held", "remaining"}
    )


@pytest.mark.parametrize("policy", ["return_to_pool", "return_to_shopper", "keep_used"])
def test_a_cancellation_delivered_many_times_at_once_reverses_once(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    orders: Callable[[str], str],
    pump_events: Pump,
    policy: str,
) -> None:
    campaign_id = make_campaign(codes=ROUNDS, on_cancel=policy)
    created: list[int] = []
    for n in range(ROUNDS):
        code = claim(campaign_id, f"u{n}")
        order_id = orders(f"redelivered-{n}")
        redeemer(db).redeem(campaign_id=campaign_id, code=code, order_id=order_id)
        barrier = threading.Barrier(4)

        def deliver(i: int, order_id: str = order_id, barrier: threading.Barrier = barrier) -> bool:
            service = reverser(db)
            barrier.wait()
            if i % 2:  # Shopify's webhook and the API, side by side
                (result,) = service.reverse_shop_order(order_id).results
                return result.outcome in ("reversed", "already_reversed")
            reversal = service.reverse_order(campaign_id=campaign_id, order_id=order_id)
            return bool(reversal.reversals)

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(deliver, range(4)))
        records = list(reversals_collection(db, campaign_id).stream())
        created.append(len(records))
        assert all(answers)

    assert created == list(range(1, ROUNDS + 1))  # one record more each round, never two
    report = assert_clean(db, campaign_id)
    assert report.reversed == ROUNDS
    events = pump_events()
    assert Counter(e["type"] for e in events)["coupon.reversed"] == ROUNDS
    totals = counted(campaign_id)
    assert (totals["redeemed"], totals["reversed"]) == (ROUNDS, ROUNDS)
    assert totals["remaining"] == (ROUNDS if policy == "return_to_pool" else 0)


@pytest.mark.parametrize("policy", ["return_to_pool", "return_to_shopper"])
def test_a_reversal_racing_another_redemption_of_its_code_is_ordered_by_the_coupon(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    orders: Callable[[str], str],
    pump_events: Pump,
    policy: str,
) -> None:
    rounds = ROUNDS
    campaign_id = make_campaign(codes=rounds, on_cancel=policy)
    seen: Counter[tuple[str, str]] = Counter()
    for n in range(rounds):
        order = ORDERS[n % len(ORDERS)]
        code = claim(campaign_id, f"r{n}")
        first_order, second_order = orders(f"first-{n}"), orders(f"second-{n}")
        redeemer(db).redeem(campaign_id=campaign_id, code=code, order_id=first_order)
        ref = coupons_collection(db, campaign_id).document(coupon_id_for(code))
        before = ref.get().to_dict() or {}  # a code back in the pool may come round again

        reversal, other = in_order(
            order,
            outcome(
                partial(reverser(db).reverse_order, campaign_id=campaign_id, order_id=first_order)
            ),
            outcome(
                partial(
                    redeemer(db).redeem, campaign_id=campaign_id, code=code, order_id=second_order
                )
            ),
        )
        seen[(order, other)] += 1
        coupon = ref.get().to_dict() or {}
        assert reversal == "ok"
        assert coupon["reversals"] == before.get("reversals", 0) + 1
        if other == "ok":  # the second order came after the code came back to its shopper
            assert policy == "return_to_shopper"
            assert (coupon_state(coupon), coupon["order_id"], coupon["redemptions"]) == (
                CouponState.REDEEMED,
                second_order,
                before["redemptions"] + 1,
            )
        else:
            expected = CouponState.AVAILABLE if policy == "return_to_pool" else CouponState.CLAIMED
            assert coupon_state(coupon) is expected
            assert other in ("CODE_ALREADY_REDEEMED", "CODE_NOT_CLAIMED")
        if order == "other_first":
            assert other == "CODE_ALREADY_REDEEMED"
        if order == "reversal_first":
            assert other == ("ok" if policy == "return_to_shopper" else "CODE_NOT_CLAIMED")

    report = assert_clean(db, campaign_id)
    assert report.reversed == rounds
    pump_events()
    totals = counted(campaign_id)
    second_redemptions = sum(n for (_, other), n in seen.items() if other == "ok")
    assert totals["redeemed"] == rounds + second_redemptions
    assert totals["reversed"] == rounds
    assert totals["remaining"] == (rounds if policy == "return_to_pool" else 0)


@pytest.mark.parametrize("policy", ["return_to_pool", "return_to_shopper"])
def test_a_reversal_racing_the_release_of_its_hold_happens_once_or_not_at_all(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    orders: Callable[[str], str],
    pump_events: Pump,
    policy: str,
) -> None:
    """The hold has expired but is not released yet: the checkout redeems it and its order is
    cancelled, while a sweep (whose clock is past the expiry) releases it."""
    rounds = ROUNDS
    campaign_id = make_campaign(codes=rounds, hold_seconds=600, on_cancel=policy)
    later = utcnow() + timedelta(seconds=700)
    sweeper = HoldReleaser(db=db, bus=instance_services().bus, clock=lambda: later)
    released = redeemed = 0
    for n in range(rounds):
        order = ORDERS[n % len(ORDERS)]
        code = claim(campaign_id, f"h{n}")
        order_id = orders(f"held-{n}")
        ref = coupons_collection(db, campaign_id).document(coupon_id_for(code))
        read = ref.get()
        reversals_before = (read.to_dict() or {}).get("reversals", 0)
        hold = expired_hold(read, now=later)  # the sweep's read, before the checkout's
        assert hold is not None

        def checkout(code: str = code, order_id: str = order_id) -> str:
            try:
                redeemer(db).redeem(campaign_id=campaign_id, code=code, order_id=order_id)
            except CodedropError as exc:
                return exc.error_code
            reverser(db).reverse_order(campaign_id=campaign_id, order_id=order_id)
            return "reversed"

        answer, report = in_order(order, checkout, partial(sweeper.release, [hold]))
        coupon = ref.get().to_dict()
        assert coupon is not None
        # Exactly one of the two: never released after a redemption, never neither.
        assert (answer == "reversed") != (report.released == 1), (order, answer, report)
        if answer == "reversed":
            redeemed += 1
            assert coupon["reversals"] == reversals_before + 1
            expected = CouponState.AVAILABLE if policy == "return_to_pool" else CouponState.CLAIMED
        else:
            released += 1
            assert answer == "CODE_NOT_CLAIMED"
            expected = CouponState.AVAILABLE
        assert coupon_state(coupon) is expected
        if order == "other_first":
            assert answer == "CODE_NOT_CLAIMED"
        if order == "reversal_first":
            assert answer == "reversed"

    report = assert_clean(db, campaign_id)
    assert (report.reversed, report.held) == (redeemed, 0)
    pump_events()
    totals = counted(campaign_id)
    assert (totals["released"], totals["reversed"], totals["held"]) == (released, redeemed, 0)
    assert totals["remaining"] == (rounds if policy == "return_to_pool" else released)


@pytest.mark.long
def test_a_void_racing_the_claim_of_the_last_code_leaves_it_voided_and_never_free(
    db: firestore.Client, make_campaign: MakeCampaign, pump_events: Pump
) -> None:
    results: Counter[str] = Counter()
    campaigns = []
    for n in range(ROUNDS):
        order = ORDERS[n % len(ORDERS)]
        campaign_id = make_campaign(codes=[f"LAST-{n}"])
        campaigns.append(campaign_id)
        voided, claimed = in_order(
            order,
            outcome(partial(reverser(db).void, campaign_id=campaign_id, code=f"LAST-{n}")),
            outcome(partial(claim, campaign_id, f"v{n}")),
        )
        results[claimed] += 1
        coupon = coupons_collection(db, campaign_id).document(coupon_id_for(f"LAST-{n}")).get()
        data = coupon.to_dict() or {}
        assert voided == "ok"
        assert coupon_state(data) is CouponState.VOIDED
        assert claimed in ("ok", "SOLD_OUT")
        assert data["voided_from"] == ("claimed" if claimed == "ok" else "available")
        if order == "reversal_first":
            assert claimed == "SOLD_OUT"
        if order == "other_first":
            assert claimed == "ok"
        assert_clean(db, campaign_id)

    pump_events()
    for campaign_id in campaigns:
        totals = counted(campaign_id)
        assert totals["remaining"] == 0, campaign_id
