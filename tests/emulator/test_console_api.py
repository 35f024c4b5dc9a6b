"""admin_api for the console: the audit log written with each change, edits refused over another
admin's, ending and archiving a campaign, and the campaign list's stats."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from devkit.cleanup import delete_tree
from shared.clock import utcnow
from shared.gcp.firestore import audit_collection, campaign_ref
from tests.support.api import auth
from tests.support.stack import MakeCampaign

pytestmark = pytest.mark.emulator

ALICE = auth("admin-alice", admin=True, email="alice@shop.example", email_verified=True)
BOB = auth("admin-bob", admin=True, email="bob@shop.example", email_verified=True)


def _window(start: timedelta = -timedelta(minutes=1)) -> dict[str, str]:
    now = utcnow()
    return {
        "starts_at": (now + start).isoformat(),
        "ends_at": (now + timedelta(hours=1)).isoformat(),
    }


@pytest.fixture
def campaign_id(db: firestore.Client, cleanup: list[Callable[[], object]]) -> str:
    """A campaign id whose documents and audit entries are deleted after the test."""
    new = f"con-{uuid.uuid4().hex[:10]}"

    def remove() -> None:
        delete_tree(db, campaign_ref(db, new))
        query = audit_collection(db).where(filter=FieldFilter("campaign_id", "==", new))
        for snapshot in query.stream():
            snapshot.reference.delete()

    cleanup.append(remove)
    return new


def _create(client: FlaskClient, campaign_id: str) -> Any:
    """Alice creates the campaign "Drop", open from a minute ago for an hour."""
    return client.post(
        "/v1/campaigns",
        json={"campaign_id": campaign_id, "title": "Drop", **_window()},
        headers=ALICE,
    )


def _audit(client: FlaskClient, campaign_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/audit?campaign_id={campaign_id}", headers=ALICE)
    assert answer.status_code == 200, answer.get_json()
    entries: list[dict[str, Any]] = answer.get_json()["entries"]
    return entries


def test_each_admin_change_is_in_the_audit_log_newest_first_with_who_and_before_after(
    admin_client: FlaskClient, campaign_id: str
) -> None:
    created = _create(admin_client, campaign_id)
    paused = admin_client.patch(f"/v1/campaigns/{campaign_id}", json={"paused": True}, headers=BOB)
    resumed = admin_client.patch(
        f"/v1/campaigns/{campaign_id}", json={"paused": False}, headers=ALICE
    )
    edited = admin_client.patch(
        f"/v1/campaigns/{campaign_id}", json={"title": "Big drop", "max_per_user": 1}, headers=BOB
    )

    assert [a.status_code for a in (created, paused, resumed, edited)] == [201, 200, 200, 200]
    assert edited.get_json()["version"] == 4
    entries = _audit(admin_client, campaign_id)
    assert [e["action"] for e in entries] == ["update", "resume", "pause", "create"]
    update, resume, pause, create = entries
    assert create["actor"] == {"uid": "admin-alice", "email": "alice@shop.example"}
    assert create["before"] is None
    assert create["after"]["title"] == "Drop"
    assert pause["actor"]["uid"] == "admin-bob"
    assert (pause["before"], pause["after"]) == ({"paused": False}, {"paused": True})
    assert (resume["before"], resume["after"]) == ({"paused": True}, {"paused": False})
    # Only what changed: max_per_user was 1 already.
    assert (update["before"], update["after"]) == ({"title": "Drop"}, {"title": "Big drop"})
    assert all(e["target"] == campaign_id and e["campaign_id"] == campaign_id for e in entries)
    assert entries[0]["at"] >= entries[-1]["at"]


def test_a_refused_change_leaves_no_audit_entry(
    admin_client: FlaskClient, campaign_id: str
) -> None:
    _create(admin_client, campaign_id)
    backwards = (utcnow() - timedelta(days=1)).isoformat()

    refused = admin_client.patch(
        f"/v1/campaigns/{campaign_id}", json={"ends_at": backwards}, headers=BOB
    )

    assert refused.status_code == 400
    assert [e["action"] for e in _audit(admin_client, campaign_id)] == ["create"]


def test_an_edit_made_from_an_old_version_is_refused_with_what_changed(
    admin_client: FlaskClient, campaign_id: str
) -> None:
    loaded = _create(admin_client, campaign_id).get_json()
    version = loaded["version"]
    bobs = admin_client.patch(
        f"/v1/campaigns/{campaign_id}",
        json={"max_per_user": 3},
        headers={**BOB, "If-Match": f'"{version}"'},
    )

    alices = admin_client.patch(
        f"/v1/campaigns/{campaign_id}",
        json={"title": "Alice's title"},
        headers={**ALICE, "If-Match": f'"{version}"'},
    )

    assert bobs.status_code == 200
    assert alices.status_code == 409
    body = alices.get_json()
    assert body["error_code"] == "CAMPAIGN_CHANGED"
    assert body["current"]["title"] == "Drop"
    assert body["current"]["max_per_user"] == 3
    assert body["current"]["version"] == version + 1
    (change,) = body["changes"]
    assert change["actor"]["email"] == "bob@shop.example"
    assert (change["before"], change["after"]) == ({"max_per_user": 1}, {"max_per_user": 3})
    current = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ALICE).get_json()
    assert current["title"] == "Drop"
    again = admin_client.patch(
        f"/v1/campaigns/{campaign_id}",
        json={"title": "Alice's title"},
        headers={**ALICE, "If-Match": str(body["current"]["version"])},
    )
    assert again.status_code == 200
    assert again.get_json()["title"] == "Alice's title"


def test_a_malformed_if_match_is_a_validation_error(
    admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign()

    answer = admin_client.patch(
        f"/v1/campaigns/{campaign_id}", json={"title": "x"}, headers={**ALICE, "If-Match": "*"}
    )

    assert answer.status_code == 400
    assert answer.get_json()["error_code"] == "REQUEST_VALIDATION_FAILED"


def test_end_now_stops_claims_and_archive_hides_the_campaign(
    admin_client: FlaskClient, claim_client: FlaskClient, campaign_id: str
) -> None:
    _create(admin_client, campaign_id)
    too_early = admin_client.post(f"/v1/campaigns/{campaign_id}:archive", headers=ALICE)

    ended = admin_client.post(f"/v1/campaigns/{campaign_id}:end", headers=BOB)
    claim = claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth("shopper-1"))
    archived = admin_client.post(f"/v1/campaigns/{campaign_id}:archive", headers=ALICE)
    listed = admin_client.get("/v1/campaigns", headers=ALICE).get_json()["campaigns"]
    with_archived = admin_client.get(
        "/v1/campaigns?include_archived=true", headers=ALICE
    ).get_json()["campaigns"]

    assert too_early.status_code == 409
    assert too_early.get_json()["error_code"] == "CAMPAIGN_NOT_ENDED"
    assert ended.status_code == 200
    assert ended.get_json()["status"] == "ended"
    assert claim.status_code == 409
    assert claim.get_json()["error_code"] == "CAMPAIGN_NOT_ACTIVE"
    assert archived.status_code == 200
    assert archived.get_json()["archived"] is True
    assert campaign_id not in {c["campaign_id"] for c in listed}
    assert campaign_id in {c["campaign_id"] for c in with_archived}
    assert [e["action"] for e in _audit(admin_client, campaign_id)] == [
        "archive",
        "end",
        "create",
    ]


def test_generation_and_webhooks_are_audited(
    admin_client: FlaskClient, campaign_id: str, db: firestore.Client
) -> None:
    _create(admin_client, campaign_id)

    job = admin_client.post(
        f"/v1/campaigns/{campaign_id}/codes:generate", json={"count": 5}, headers=ALICE
    )
    hook = admin_client.post(
        f"/v1/campaigns/{campaign_id}/webhooks",
        json={"url": "http://127.0.0.1:9/hook", "events": ["coupon.claimed"]},
        headers=BOB,
    )
    webhook_id = hook.get_json()["webhook_id"]
    deleted = admin_client.delete(f"/v1/campaigns/{campaign_id}/webhooks/{webhook_id}", headers=BOB)

    assert (job.status_code, hook.status_code, deleted.status_code) == (202, 201, 204)
    entries = _audit(admin_client, campaign_id)
    assert [e["action"] for e in entries] == [
        "webhook.delete",
        "webhook.create",
        "generate",
        "create",
    ]
    assert entries[2]["target"] == job.get_json()["job_id"]
    assert entries[2]["after"]["count"] == 5
    assert entries[1]["after"]["url"] == "http://127.0.0.1:9/hook"
    assert entries[0]["target"] == webhook_id
    assert "secret" not in str(entries)
    db.collection("jobs").document(job.get_json()["job_id"]).delete()


def test_the_campaign_list_carries_each_campaigns_stats(
    admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=7)

    listed = admin_client.get("/v1/campaigns", headers=ALICE).get_json()["campaigns"]

    (mine,) = [c for c in listed if c["campaign_id"] == campaign_id]
    assert mine["stats"]["codes_total"] == 7
    assert mine["stats"]["remaining"] == 7
    assert mine["stats"]["claimed"] == 0


def test_who_claimed_what_is_listed_page_after_page(
    admin_client: FlaskClient, claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=6)
    held = {}
    for n in range(5):
        answer = claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth(f"w-{n}"))
        held[f"w-{n}"] = answer.get_json()["code"]

    pages, token = [], None
    while True:
        suffix = f"&page_token={token}" if token else ""
        page = admin_client.get(
            f"/v1/campaigns/{campaign_id}/claims?limit=2{suffix}", headers=ALICE
        ).get_json()
        pages.append(page["claims"])
        token = page["next_page_token"]
        if token is None:
            break
    unknown = admin_client.get("/v1/campaigns/nope-x/claims", headers=ALICE)

    assert [len(p) for p in pages] == [2, 2, 1]
    listed = {c["user_id"]: c["code"] for p in pages for c in p}
    assert listed == held
    assert all(c["state"] == "claimed" and c["claimed_at"] for p in pages for c in p)
    assert unknown.status_code == 404


def test_a_repair_of_the_counters_is_audited_with_what_it_changed(
    admin_client: FlaskClient,
    claim_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    cleanup: list[Callable[[], object]],
) -> None:
    campaign_id = make_campaign(codes=3)
    query = audit_collection(db).where(filter=FieldFilter("campaign_id", "==", campaign_id))
    cleanup.append(lambda: [s.reference.delete() for s in query.stream()])
    # Claimed, but its event never counted: the counters say 0.
    claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth("r-1"))

    repaired = admin_client.post(
        f"/v1/campaigns/{campaign_id}/reconcile", json={"repair": True}, headers=ALICE
    )

    assert repaired.status_code == 200
    assert repaired.get_json()["repaired"] is True
    (entry,) = _audit(admin_client, campaign_id)
    assert entry["action"] == "reconcile"
    assert entry["before"]["claimed"] == 0
    assert entry["after"]["claimed"] == 1
