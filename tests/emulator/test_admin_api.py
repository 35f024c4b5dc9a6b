"""admin_api's HTTP contract: campaigns CRUD behind the admin claim."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from devkit.cleanup import delete_tree
from shared.clock import utcnow
from shared.gcp.firestore import campaign_ref
from tests.support.api import ADMIN, auth
from tests.support.stack import MakeCampaign, Pump

pytestmark = pytest.mark.emulator


def _window(
    start: timedelta = -timedelta(minutes=1), end: timedelta = timedelta(hours=1)
) -> dict[str, str]:
    now = utcnow()
    return {"starts_at": (now + start).isoformat(), "ends_at": (now + end).isoformat()}


def test_create_returns_the_campaign_and_a_second_create_is_409(
    admin_client: FlaskClient, new_id: str
) -> None:
    body = {"campaign_id": new_id, "title": "Black Friday", "max_per_user": 2, **_window()}

    created = admin_client.post("/v1/campaigns", json=body, headers=ADMIN)
    again = admin_client.post("/v1/campaigns", json=body, headers=ADMIN)

    assert created.status_code == 201
    campaign = created.get_json()
    assert campaign["campaign_id"] == new_id
    assert campaign["title"] == "Black Friday"
    assert campaign["max_per_user"] == 2
    assert campaign["status"] == "active"
    assert again.status_code == 409
    assert again.get_json()["error_code"] == "CAMPAIGN_EXISTS"


def test_create_without_an_id_generates_one(
    admin_client: FlaskClient, db: firestore.Client, cleanup: list[Callable[[], object]]
) -> None:
    created = admin_client.post(
        "/v1/campaigns", json={"title": "Summer Sale!", **_window()}, headers=ADMIN
    )

    assert created.status_code == 201
    campaign_id = created.get_json()["campaign_id"]
    cleanup.append(lambda: delete_tree(db, campaign_ref(db, campaign_id)))
    assert campaign_id.startswith("summer-sale-")


@pytest.mark.parametrize(
    "body",
    [
        {
            "title": "Backwards",
            "starts_at": "2026-12-02T00:00:00Z",
            "ends_at": "2026-12-01T00:00:00Z",
        },
        {"title": "", "starts_at": "2026-12-01T00:00:00Z", "ends_at": "2026-12-02T00:00:00Z"},
        {"title": "Naive", "starts_at": "2026-12-01T00:00:00", "ends_at": "2026-12-02T00:00:00"},
        {
            "title": "Greedy",
            "max_per_user": 0,
            "starts_at": "2026-12-01T00:00:00Z",
            "ends_at": "2026-12-02T00:00:00Z",
        },
        {
            "title": "Extra",
            "colour": "red",
            "starts_at": "2026-12-01T00:00:00Z",
            "ends_at": "2026-12-02T00:00:00Z",
        },
        {
            "title": "Bad id",
            "campaign_id": "Has Spaces",
            "starts_at": "2026-12-01T00:00:00Z",
            "ends_at": "2026-12-02T00:00:00Z",
        },
    ],
)
def test_invalid_campaign_is_400(admin_client: FlaskClient, body: dict[str, object]) -> None:
    response = admin_client.post("/v1/campaigns", json=body, headers=ADMIN)

    assert response.status_code == 400
    assert response.get_json()["error_code"] == "REQUEST_VALIDATION_FAILED"
    assert response.get_json()["error_message"]


def test_get_has_stats(
    admin_client: FlaskClient,
    claim_client: FlaskClient,
    make_campaign: MakeCampaign,
    pump_events: Pump,
) -> None:
    campaign_id = make_campaign(codes=4)
    claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth("s1"))
    pump_events()

    response = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ADMIN)

    assert response.status_code == 200
    stats = response.get_json()["stats"]
    assert (stats["codes_total"], stats["claimed"], stats["remaining"]) == (4, 1, 3)
    assert stats["claims_last_minute"] == 1
    assert stats["projected_sold_out_at"] is not None
    missing = admin_client.get("/v1/campaigns/never-made", headers=ADMIN)
    assert missing.status_code == 404
    assert missing.get_json()["error_code"] == "CAMPAIGN_NOT_FOUND"


def test_list_filters_by_status(admin_client: FlaskClient, make_campaign: MakeCampaign) -> None:
    now = utcnow()
    active = make_campaign()
    scheduled = make_campaign(starts_at=now + timedelta(days=1), ends_at=now + timedelta(days=2))

    listed_active = admin_client.get("/v1/campaigns?status=active", headers=ADMIN)
    listed_scheduled = admin_client.get("/v1/campaigns?status=scheduled", headers=ADMIN)
    everything = admin_client.get("/v1/campaigns", headers=ADMIN)
    bad = admin_client.get("/v1/campaigns?status=bogus", headers=ADMIN)

    active_ids = {c["campaign_id"] for c in listed_active.get_json()["campaigns"]}
    scheduled_ids = {c["campaign_id"] for c in listed_scheduled.get_json()["campaigns"]}
    all_ids = {c["campaign_id"] for c in everything.get_json()["campaigns"]}
    assert active in active_ids
    assert scheduled not in active_ids
    assert scheduled in scheduled_ids
    assert {active, scheduled} <= all_ids
    assert bad.status_code == 400
    assert bad.get_json()["error_code"] == "REQUEST_VALIDATION_FAILED"


def test_patch_updates_title_window_limit_and_pause(
    admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign()
    new_end = (utcnow() + timedelta(days=3)).replace(microsecond=0)

    response = admin_client.patch(
        f"/v1/campaigns/{campaign_id}",
        json={
            "title": "Renamed",
            "ends_at": new_end.isoformat(),
            "max_per_user": 3,
            "paused": True,
        },
        headers=ADMIN,
    )

    assert response.status_code == 200
    body = response.get_json()
    assert body["title"] == "Renamed"
    assert body["ends_at"] == new_end.isoformat().replace("+00:00", ".000Z")
    assert body["max_per_user"] == 3
    assert body["paused"] is True
    assert body["status"] == "paused"
    stored = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ADMIN).get_json()
    assert stored["title"] == "Renamed"
    assert stored["paused"] is True


@pytest.mark.parametrize(
    "patch",
    [
        {},
        {"ends_at": "2000-01-01T00:00:00Z"},
        {"title": None},
        {"max_per_user": 99},
        {"sold_out": True},
    ],
)
def test_invalid_patch_is_400_and_changes_nothing(
    admin_client: FlaskClient, make_campaign: MakeCampaign, patch: dict[str, object]
) -> None:
    campaign_id = make_campaign(title="Original")

    response = admin_client.patch(f"/v1/campaigns/{campaign_id}", json=patch, headers=ADMIN)

    assert response.status_code == 400
    assert response.get_json()["error_code"] == "REQUEST_VALIDATION_FAILED"
    stored = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ADMIN).get_json()
    assert stored["title"] == "Original"


def test_patch_of_unknown_campaign_is_404(admin_client: FlaskClient) -> None:
    response = admin_client.patch("/v1/campaigns/no-such", json={"title": "x"}, headers=ADMIN)
    assert response.status_code == 404
    assert response.get_json()["error_code"] == "CAMPAIGN_NOT_FOUND"
