"""Holds under real concurrency on the emulator: threads racing a release against a redemption
and against claims on the same coupons, round after round, and holds expiring while a sale runs.
Every invariant is read back from Firestore (devkit/audit.py), never taken from what the
threads were told."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from google.cloud import firestore

from devkit.audit import AuditReport, audit_campaign
from devkit.claims import claim_as
from shared.claims.engine import ClaimEngine
from shared.claims.holds import HoldReleaser
from shared.claims.redemption import RedemptionService
from shared.clock import utcnow
from shared.container import instance_services
from shared.coupons.store import CouponState, coupon_id_for, coupon_state, expired_hold
from shared.errors import CodedropError, SoldOut
from shared.gcp.firestore import campaign_ref, coupons_collection
from shared.settings import get_settings
from tests.support.stack import MakeCampaign

pytestmark = pytest.mark.emulator

HOLD = 1  # seconds: written straight into the campaign (the API's minimum is 60)
EXPIRED = timedelta(seconds=HOLD + 0.1)  # how far behind a clock writes holds expired by now


@dataclass
class ShiftedClock:
    """utcnow() moved by `shift`: an engine on it `-EXPIRED` writes holds that have expired when
    they are written, so no test waits HOLD out; set `shift` to zero and it is the real clock."""

    shift: timedelta

    def __call__(self) -> datetime:
        return utcnow() + self.shift


def hold_campaign(make_campaign: MakeCampaign, db: firestore.Client, codes: int) -> str:
    campaign_id = make_campaign(codes=codes, hold_seconds=60)
    campaign_ref(db, campaign_id).update({"hold_seconds": HOLD})
    return campaign_id


def assert_clean(db: firestore.Client, campaign_id: str) -> AuditReport:
    report = audit_campaign(db, campaign_id=campaign_id)
    assert report.ok, report.violations
    return report


def releaser(db: firestore.Client) -> HoldReleaser:
    """Another instance's sweep: its own releaser, the shared bus."""
    return HoldReleaser(db=db, bus=instance_services().bus, clock=utcnow)


def redeemer(db: firestore.Client) -> RedemptionService:
    return RedemptionService(db=db, bus=instance_services().bus, clock=utcnow)


@dataclass(frozen=True)
class Round:
    code: str
    released: bool
    redeemed: bool  # the redemption was accepted (201)
    refused: str | None  # its error_code otherwise


def _race_release_and_redeem(db: firestore.Client, campaign_id: str, code: str) -> Round:
    barrier = threading.Barrier(2)
    outcome: dict[str, object] = {}
    ref = coupons_collection(db, campaign_id).document(coupon_id_for(code))

    def release() -> None:
        barrier.wait()
        hold = expired_hold(ref.get(), now=utcnow())
        outcome["released"] = hold is not None and releaser(db).release([hold]).released == 1

    def redeem() -> None:
        barrier.wait()
        try:
            result = redeemer(db).redeem(campaign_id=campaign_id, code=code, order_id=f"o-{code}")
        except CodedropError as exc:
            outcome["refused"] = exc.error_code
        else:
            outcome["redeemed"] = result.created

    threads = [threading.Thread(target=release), threading.Thread(target=redeem)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return Round(
        code=code,
        released=bool(outcome.get("released")),
        redeemed=bool(outcome.get("redeemed")),
        refused=outcome.get("refused"),  # type: ignore[arg-type]
    )


def test_release_racing_redemption_lets_exactly_one_win_every_round(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = hold_campaign(make_campaign, db, codes=16)
    engine = ClaimEngine(db=db, settings=get_settings(), clock=ShiftedClock(-EXPIRED))
    rounds: list[Round] = []
    for wave in range(3):
        # Everything still available is held again, by new shoppers, holds expired already.
        available = [
            s.id
            for s in coupons_collection(db, campaign_id).stream()
            if coupon_state(s.to_dict() or {}) is CouponState.AVAILABLE
        ]
        codes = [
            claim_as(engine, campaign_id, f"w{wave}-{i}").claim.code for i in range(len(available))
        ]
        with ThreadPoolExecutor(8) as pool:
            rounds += pool.map(lambda c: _race_release_and_redeem(db, campaign_id, c), codes)

    assert len(rounds) > 16
    for r in rounds:
        # Exactly one wins: never both (redeemed after release), never neither.
        assert r.released != r.redeemed, r
        if r.released:
            assert r.refused == "CODE_NOT_CLAIMED", r
    coupons = {
        s.get("code"): s.to_dict() or {} for s in coupons_collection(db, campaign_id).stream()
    }
    last = {r.code: r for r in rounds}  # a code's last round decides what it is now
    for code, r in last.items():
        expected = CouponState.REDEEMED if r.redeemed else CouponState.AVAILABLE
        assert coupon_state(coupons[code]) is expected, r
    report = assert_clean(db, campaign_id)
    assert report.redeemed == sum(r.redeemed for r in rounds)
    assert report.held == 0


def _claim_until_served(
    engine: ClaimEngine, campaign_id: str, user: str, final: Callable[[], bool]
) -> tuple[str, str | None]:
    """A shopper retrying SOLD_OUT (the landing page polls) until a code comes or a SOLD_OUT
    asked for once `final()` held is the last word: what the last answer was, and the code it
    gave."""
    while True:
        last_word = final()
        try:
            outcome = claim_as(engine, campaign_id, user)
        except SoldOut:
            if last_word:
                return "SOLD_OUT", None
            time.sleep(0.02)
            continue
        except CodedropError as exc:
            return exc.error_code, None
        return ("created" if outcome.created else "already_held"), outcome.claim.code


@pytest.mark.parametrize("round_", range(3))
def test_releases_racing_claims_never_leave_a_code_free_and_held(
    db: firestore.Client, make_campaign: MakeCampaign, round_: int
) -> None:
    codes = 20
    campaign_id = hold_campaign(make_campaign, db, codes=codes)
    clock = ShiftedClock(-EXPIRED)
    engines = [ClaimEngine(db=db, settings=get_settings(), clock=clock) for _ in range(2)]
    holders = [f"h{round_}-{i}" for i in range(codes)]
    for i, user in enumerate(holders):
        claim_as(engines[i % 2], campaign_id, user)
    late = ClaimEngine(db=db, settings=get_settings())
    with pytest.raises(SoldOut):
        claim_as(late, campaign_id, "nobody-yet")
    clock.shift = timedelta(0)  # the holds have expired; the holds written from now on have not

    # Two sweeps at once (two instances), new shoppers, and the old holders clicking again.
    shoppers = [f"n{round_}-{i}" for i in range(codes)] + holders
    random.Random(round_).shuffle(shoppers)
    start = threading.Barrier(2 + len(shoppers))
    # Once both sweeps are over nothing is released again: a SOLD_OUT asked for after that is
    # final (before, a shopper keeps asking, as the landing page polls).
    both_swept = threading.Event()
    swept = threading.Barrier(2, action=both_swept.set)

    def sweep() -> int:
        start.wait()
        try:
            return releaser(db).release_expired().by_campaign.get(campaign_id, 0)
        finally:
            swept.wait()

    def shop(i: int, user: str) -> str:
        start.wait()
        return _claim_until_served(engines[i % 2], campaign_id, user, both_swept.is_set)[0]

    with ThreadPoolExecutor(2 + len(shoppers)) as pool:
        sweeps = [pool.submit(sweep) for _ in range(2)]
        answers = list(pool.map(shop, range(len(shoppers)), shoppers))

    # Every expired hold released exactly once, however the two sweeps interleaved.
    assert sum(s.result() for s in sweeps) == codes
    report = assert_clean(db, campaign_id)
    assert report.assigned == codes  # the freed codes all found new holders
    assert report.claims == codes
    outcomes = Counter(answers)
    assert set(outcomes) <= {"created", "already_held", "SOLD_OUT"}
    # Each freed code went to exactly one shopper told so; a holder who clicked again before
    # the release was given back the hold it then lost ("already_held").
    assert outcomes["created"] == codes


@pytest.mark.long
def test_holds_expiring_during_a_running_sale_reach_later_shoppers(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    """30 codes, 120 shoppers arriving over 4 s, half of the holders never check out; the sweep
    runs every 0.2 s. Abandoned codes go to later shoppers; nothing is lost or doubled."""
    codes = 30
    campaign_id = hold_campaign(make_campaign, db, codes=codes)
    engine = ClaimEngine(db=db, settings=get_settings())
    checkout = redeemer(db)
    sweeper = releaser(db)
    stop = threading.Event()
    released: list[int] = []

    def sweep_every_200ms() -> None:
        while not stop.wait(0.2):
            released.append(sweeper.release_expired().by_campaign.get(campaign_id, 0))

    def shopper(i: int) -> tuple[str, str | None, bool]:
        user = f"s-{i}"
        give_up = time.monotonic() + 1.5
        outcome, held = _claim_until_served(
            engine, campaign_id, user, lambda: time.monotonic() > give_up
        )
        if outcome != "created" or held is None:
            return user, None, False
        if random.Random(i).random() < 0.5:
            return user, held, False  # abandons the checkout
        time.sleep(0.1)
        try:
            checkout.redeem(campaign_id=campaign_id, code=held, order_id=f"order-{i}")
        except CodedropError:
            return user, held, False
        return user, held, True

    background = threading.Thread(target=sweep_every_200ms)
    background.start()
    try:
        with ThreadPoolExecutor(32) as pool:
            futures = []
            for i in range(120):
                futures.append(pool.submit(shopper, i))
                time.sleep(4 / 120)
            results = [f.result() for f in futures]
    finally:
        stop.set()
        background.join()
    # The sale is over: the last sweep runs when the last holds have expired.
    last_sweep = HoldReleaser(db=db, bus=instance_services().bus, clock=ShiftedClock(EXPIRED))
    released.append(last_sweep.release_expired().by_campaign.get(campaign_id, 0))

    report = assert_clean(db, campaign_id)
    redeemed = [code for _, code, ok in results if ok]
    assert len(redeemed) == len(set(redeemed)) == report.redeemed
    assert report.held == 0  # every hold ended: redeemed or released
    assert report.redeemed + report.unassigned == codes
    # Without holds the first 30 shoppers would have kept every code, and about half of them
    # would have been used; with holds the abandoned codes were used by later shoppers.
    assert report.redeemed >= 20
    reused = [
        s
        for s in coupons_collection(db, campaign_id).stream()
        if int((s.to_dict() or {}).get("releases", 0)) >= 1
        and coupon_state(s.to_dict() or {}) is CouponState.REDEEMED
    ]
    assert reused
    assert sum(released) == sum(1 for _, code, ok in results if code and not ok)
