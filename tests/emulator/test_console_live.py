"""The live view of a sale (GET /v1/campaigns/{id}/live): from the counters, the waiting room's
heartbeats and a burn-down, and shared by every console on an instance for a second."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from devkit.firestore_rpcs import RpcCounter
from shared.container import Services
from shared.http import admin
from shared.settings import get_settings
from tests.support.api import ADMIN, auth, router_client
from tests.support.stack import PROJECT, MakeCampaign, Pump

pytestmark = pytest.mark.emulator


def test_the_live_view_follows_claims_from_the_counters(
    admin_client: FlaskClient,
    claim_client: FlaskClient,
    make_campaign: MakeCampaign,
    pump_events: Pump,
) -> None:
    campaign_id = make_campaign(codes=10)
    before = admin_client.get(f"/v1/campaigns/{campaign_id}/live", headers=ADMIN).get_json()
    for n in range(3):
        answer = claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth(f"s-{n}"))
        assert answer.status_code == 201
    pump_events()
    # A fresh instance's view: the session's admin_client may keep its own for a second.
    services = Services(get_settings())
    after = router_client(admin.router, services).get(
        f"/v1/campaigns/{campaign_id}/live", headers=ADMIN
    )

    assert before["remaining"] == 10
    assert before["claimed"] == 0
    view = after.get_json()
    assert after.status_code == 200
    assert view["status"] == "active"
    assert (view["codes_total"], view["claimed"], view["remaining"]) == (10, 3, 7)
    assert (view["held"], view["redeemed"], view["released"]) == (0, 0, 0)
    assert view["claims_per_minute"] >= 1
    assert view["seconds_to_sell_out"] > 0
    assert view["waiting_room_enabled"] is False
    assert view["queue_depth"] is None
    last = view["series"][-1]
    assert last["remaining"] == 7
    assert sum(p["claimed"] for p in view["series"]) == 3
    assert view["series"][0]["remaining"] == 7 + sum(p["claimed"] for p in view["series"][1:])


def test_a_waiting_room_shows_its_queue(
    admin_client: FlaskClient, claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=50, waiting_room_enabled=True, admissions_per_second=1.0)
    statuses = [
        claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth(f"q-{n}")).status_code
        for n in range(8)
    ]

    view = admin_client.get(f"/v1/campaigns/{campaign_id}/live", headers=ADMIN).get_json()

    assert 429 in statuses
    assert view["waiting_room_enabled"] is True
    assert view["queue_depth"] is not None
    assert view["admitted_per_second"] is not None


def test_a_hundred_consoles_cost_the_reads_of_one(make_campaign: MakeCampaign) -> None:
    campaign_id = make_campaign(codes=5)
    counted = firestore.Client(project=PROJECT)
    client = router_client(admin.router, Services(get_settings(), db=counted))

    with RpcCounter(counted) as rpcs:
        first = client.get(f"/v1/campaigns/{campaign_id}/live", headers=ADMIN)
        one = rpcs.snapshot().documents_read
        answers = [
            client.get(f"/v1/campaigns/{campaign_id}/live", headers=ADMIN) for _ in range(99)
        ]
        hundred = rpcs.snapshot().documents_read

    assert first.status_code == 200
    assert {a.status_code for a in answers} == {200}
    # The campaign, the counters' config (twice on an instance's first look: the shard count is
    # cached apart) and its one shard; no waiting room to look at.
    assert one == 4
    assert hundred <= 2 * one  # at most one more view if the second passed meanwhile
