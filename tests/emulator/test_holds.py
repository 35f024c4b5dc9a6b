"""Holds on the emulators: a claim on a campaign with hold_seconds is a hold; the sweep releases
the holds nobody redeemed in time, the code goes to the next shopper, the shopper may claim
again, a sold-out campaign reopens, and the counters, stats and report follow."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore
from werkzeug.test import TestResponse

from devkit.audit import audit_campaign
from devkit.claims import claim_as
from shared.campaigns import store as campaign_store
from shared.clock import utcnow
from shared.container import instance_services
from shared.coupons.store import EXPIRES_BUCKET, coupon_id_for
from shared.gcp.firestore import campaign_ref, coupons_collection
from shared.usage.counters import ShardedCounters
from tests.support.api import ADMIN, REDEEMER, auth
from tests.support.stack import MakeCampaign, Pump

pytestmark = pytest.mark.emulator


def claim(client: FlaskClient, campaign_id: str, user: str) -> TestResponse:
    return client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth(user))


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def hold_briefly(db: firestore.Client, campaign_id: str, seconds: int = 1) -> None:
    """The API allows holds of 60 s and more; a test cannot wait that long."""
    campaign_ref(db, campaign_id).update({"hold_seconds": seconds})


@pytest.fixture
def make_brief_hold_campaign(
    make_campaign: MakeCampaign, db: firestore.Client
) -> Callable[[int], str]:
    """A campaign of `codes` codes whose holds last a second: made with the shortest hold the
    API allows (60 s), then shortened."""

    def make(codes: int) -> str:
        campaign_id = make_campaign(codes=codes, hold_seconds=60)
        hold_briefly(db, campaign_id)
        return campaign_id

    return make


@pytest.fixture
def expire_holds(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Moves the hold releaser's clock past a brief hold's expiry, instead of waiting for it."""

    def later() -> None:
        releaser = instance_services().holds
        monkeypatch.setattr(releaser, "clock", lambda: utcnow() + timedelta(seconds=1.1))

    return later


def redeem(admin_client: FlaskClient, campaign_id: str, code: str, order_id: str) -> TestResponse:
    return admin_client.post(
        f"/v1/campaigns/{campaign_id}/redemptions",
        json={"code": code, "order_id": order_id},
        headers=REDEEMER,
    )


def sweep(admin_client: FlaskClient) -> dict[str, Any]:
    response = admin_client.post("/v1/maintenance/sweep", json={}, headers=ADMIN)
    assert response.status_code == 200
    body: dict[str, Any] = response.get_json()
    return body


def test_hold_seconds_is_set_read_and_switched_off_through_the_admin_api(
    admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(hold_seconds=900)
    path = f"/v1/campaigns/{campaign_id}"

    read = admin_client.get(path, headers=ADMIN).get_json()
    shorter = admin_client.patch(path, json={"hold_seconds": 120}, headers=ADMIN)
    too_short = admin_client.patch(path, json={"hold_seconds": 59}, headers=ADMIN)
    off = admin_client.patch(path, json={"hold_seconds": None}, headers=ADMIN)

    assert read["hold_seconds"] == 900
    assert shorter.get_json()["hold_seconds"] == 120
    assert too_short.status_code == 400
    assert too_short.get_json()["error_code"] == "REQUEST_VALIDATION_FAILED"
    assert off.status_code == 200
    assert off.get_json()["hold_seconds"] is None
    assert admin_client.get(path, headers=ADMIN).get_json()["hold_seconds"] is None


def test_a_claim_on_a_hold_campaign_is_a_hold_until_its_expiry(
    claim_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    campaign_id = make_campaign(codes=3, hold_seconds=600)

    first = claim(claim_client, campaign_id, "holly")
    again = claim(claim_client, campaign_id, "holly")
    mine = claim_client.get(f"/v1/campaigns/{campaign_id}/claims/me", headers=auth("holly"))

    assert first.status_code == 201
    body = first.get_json()
    assert body["state"] == "held"
    assert parse(body["expires_at"]) - parse(body["claimed_at"]) == timedelta(seconds=600)
    assert again.status_code == 200
    assert again.get_json() == body
    (listed,) = mine.get_json()["claims"]
    assert (listed["state"], listed["expires_at"]) == ("held", body["expires_at"])
    coupon = coupons_collection(db, campaign_id).document(coupon_id_for(body["code"])).get()
    stored = coupon.to_dict() or {}
    assert (stored["state"], stored["assigned"]) == ("held", True)
    assert stored[EXPIRES_BUCKET].startswith(coupon.id[0] + ":")
    assert audit_campaign(db, campaign_id=campaign_id).ok


def test_an_expired_hold_goes_back_to_the_pool_and_its_shopper_may_claim_again(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_brief_hold_campaign: Callable[[int], str],
    db: firestore.Client,
    pump_events: Pump,
    expire_holds: Callable[[], None],
) -> None:
    campaign_id = make_brief_hold_campaign(1)
    held = claim(claim_client, campaign_id, "abandoner").get_json()
    assert claim(claim_client, campaign_id, "patient").status_code == 410

    expire_holds()
    swept = sweep(admin_client)
    events = pump_events()

    assert swept["holds_released"] >= 1
    released = [e for e in events if e["type"] == "coupon.released"]
    assert [(e["campaign_id"], e["user_id"]) for e in released] == [(campaign_id, "abandoner")]
    # The slot is freed: the shopper no longer holds anything...
    mine = claim_client.get(f"/v1/campaigns/{campaign_id}/claims/me", headers=auth("abandoner"))
    assert mine.status_code == 404
    # ...the sold-out campaign reopened, and the code reaches the next shopper.
    campaign = campaign_store.get_campaign(db, campaign_id=campaign_id)
    assert campaign.sold_out is False
    assert campaign.pool_generation >= 2
    assert claim_client.get(f"/v1/campaigns/{campaign_id}").get_json()["status"] == "active"
    second = claim(claim_client, campaign_id, "patient")
    assert second.status_code == 201
    assert second.get_json()["code"] == held["code"]
    redemption = redeem(admin_client, campaign_id, held["code"], "order-late")
    assert redemption.status_code == 201
    assert redemption.get_json()["user_id"] == "patient"
    # The first shopper may claim again; nothing is left for them now.
    assert claim(claim_client, campaign_id, "abandoner").status_code == 410
    assert audit_campaign(db, campaign_id=campaign_id).ok


def test_a_hold_is_not_released_before_its_expiry_nor_after_its_redemption(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    expire_holds: Callable[[], None],
) -> None:
    campaign_id = make_campaign(codes=3, hold_seconds=60)
    long_hold = claim(claim_client, campaign_id, "slow").get_json()
    hold_briefly(db, campaign_id)
    redeemed = claim(claim_client, campaign_id, "quick").get_json()
    redeem(admin_client, campaign_id, redeemed["code"], "o-1")

    expire_holds()
    sweep(admin_client)

    report = audit_campaign(db, campaign_id=campaign_id)
    assert report.ok, report.violations
    assert (report.held, report.redeemed, report.assigned) == (1, 1, 2)
    status = admin_client.get(
        f"/v1/campaigns/{campaign_id}/codes/{long_hold['code']}", headers=REDEEMER
    ).get_json()
    assert status["state"] == "held"


def test_stats_and_reports_follow_holds_redemptions_and_releases(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_brief_hold_campaign: Callable[[int], str],
    db: firestore.Client,
    pump_events: Pump,
    expire_holds: Callable[[], None],
) -> None:
    campaign_id = make_brief_hold_campaign(5)
    answers = {user: claim(claim_client, campaign_id, user).get_json() for user in "abcd"}
    for user, order in (("a", "o-a"), ("b", "o-b")):
        redeem(admin_client, campaign_id, answers[user]["code"], order)
    expire_holds()
    assert sweep(admin_client)["holds_released"] >= 2  # c and d abandoned their holds
    claim(claim_client, campaign_id, "e")  # a hold again, outstanding
    pump_events()
    pump_events()

    stats = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ADMIN).get_json()["stats"]
    report = admin_client.get(
        f"/v1/campaigns/{campaign_id}/report?granularity=week", headers=ADMIN
    ).get_json()
    hourly = admin_client.get(
        f"/v1/campaigns/{campaign_id}/report?granularity=hour", headers=ADMIN
    ).get_json()

    assert {k: stats[k] for k in ("claimed", "held", "redeemed", "released", "remaining")} == {
        "claimed": 5,
        "held": 1,
        "redeemed": 2,
        "released": 2,
        "remaining": 2,  # 5 codes - 5 claims + 2 released: exactly the coupons free now
    }
    assert audit_campaign(db, campaign_id=campaign_id).unassigned == 2
    assert (report["claimed"], report["redeemed"], report["released"]) == (5, 2, 2)
    (week,) = report["series"]
    assert parse(week["period_start"]).weekday() == 0
    assert (week["claimed"], week["redeemed"], week["released"]) == (5, 2, 2)
    assert sum(p["released"] for p in hourly["series"]) == 2
    public = claim_client.get(f"/v1/campaigns/{campaign_id}").get_json()
    assert public["remaining"] == 2


def test_reconciliation_counts_held_and_redeemed_codes_after_releases(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_brief_hold_campaign: Callable[[int], str],
    pump_events: Pump,
    expire_holds: Callable[[], None],
) -> None:
    campaign_id = make_brief_hold_campaign(4)
    for user in ("r1", "r2", "r3"):
        claim(claim_client, campaign_id, user)
    expire_holds()
    sweep(admin_client)
    kept = claim(claim_client, campaign_id, "r4").get_json()
    redeem(admin_client, campaign_id, kept["code"], "o-r4")
    claim(claim_client, campaign_id, "r5")
    pump_events()
    pump_events()

    checked = admin_client.post(
        f"/v1/campaigns/{campaign_id}/reconcile", json={"repair": False}, headers=ADMIN
    ).get_json()

    assert checked["claimed"] == {"counted": 2, "counters": 2, "difference": 0}
    assert checked["redeemed"]["difference"] == 0
    assert checked["held"] == {"counted": 1, "counters": 1, "difference": 0}
    assert checked["hours_differing"] == 0


def test_events_of_a_slot_held_twice_are_both_counted(
    make_brief_hold_campaign: Callable[[int], str],
    expire_holds: Callable[[], None],
) -> None:
    """A released hold frees the shopper's slot; their next claim lands in the same slot. Its
    coupon.claimed must not be taken for a redelivery of the first one."""
    from shared.claims.models import coupon_claimed

    campaign_id = make_brief_hold_campaign(2)
    services = instance_services()
    engine = services.engine
    first = claim_as(engine, campaign_id, "twice").claim
    expire_holds()
    assert services.holds.release_expired().released >= 1
    second = claim_as(engine, campaign_id, "twice").claim

    assert first.claim_id == second.claim_id
    assert coupon_claimed(first).event_id != coupon_claimed(second).event_id
    counters: ShardedCounters = services.counters
    assert counters.apply(coupon_claimed(first)) is True
    assert counters.apply(coupon_claimed(second)) is True
    assert counters.totals(campaign_id).claimed == 2


def test_a_sweep_pages_through_more_expired_holds_than_a_page(
    db: firestore.Client,
    make_brief_hold_campaign: Callable[[int], str],
    monkeypatch: pytest.MonkeyPatch,
    expire_holds: Callable[[], None],
) -> None:
    from shared.claims import holds

    monkeypatch.setattr(holds, "PAGE_SIZE", 2)  # several pages per shard, and page cursors
    campaign_id = make_brief_hold_campaign(40)
    engine = instance_services().engine
    for i in range(40):
        claim_as(engine, campaign_id, f"pager-{i}")
    expire_holds()

    report = instance_services().holds.release_expired()

    assert report.by_campaign[campaign_id] == 40
    audit = audit_campaign(db, campaign_id=campaign_id)
    assert audit.ok, audit.violations
    assert (audit.assigned, audit.claims) == (0, 0)


def test_hold_events_count_as_their_records_say_and_never_twice(
    make_brief_hold_campaign: Callable[[int], str],
    usage_client: FlaskClient,
    pump_events: Pump,
    expire_holds: Callable[[], None],
) -> None:
    """A hold whose claim event was lost, released, then the claim event delivered late: the
    release counts the claim (same id), the late event finds the released record and changes
    nothing; forged releases and redemptions are acknowledged and never counted."""
    from shared.claims.models import coupon_claimed
    from shared.events import models as events
    from tests.support.cloudevents import deliver, published_event

    def send(event: events.Event) -> int:
        return deliver(usage_client, published_event(events.encode_event(event)))

    campaign_id = make_brief_hold_campaign(2)
    services = instance_services()
    hold = claim_as(services.engine, campaign_id, "lost-event").claim
    expire_holds()
    assert services.holds.release_expired().by_campaign[campaign_id] == 1
    delivered = [e for e in pump_events() if e["campaign_id"] == campaign_id]
    assert [e["type"] for e in delivered] == ["coupon.released"]
    released = events.event_from_dict(delivered[0])
    assert isinstance(released, events.CouponReleased)

    late = send(coupon_claimed(hold))
    forged_release = send(
        released.model_copy(update={"event_id": released.event_id[:-1] + "0" + "1"})
    )
    forged_redemption = send(
        events.CouponRedeemed(
            event_id=events.redeemed_event_id(campaign_id, hold.coupon_id),
            campaign_id=campaign_id,
            occurred_at=hold.claimed_at,
            coupon_id=hold.coupon_id,
            user_id="lost-event",
            claim_id=hold.claim_id,
            order_id="never-placed",
            was_held=True,
        )
    )

    assert (late, forged_release, forged_redemption) == (200, 200, 200)
    totals = services.counters.totals(campaign_id)
    assert (totals.claimed, totals.released, totals.held, totals.redeemed) == (1, 1, 0, 0)
