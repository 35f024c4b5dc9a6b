"""Deleting a campaign (DELETE /v1/campaigns/{id}): refused under a sale that started and was not
archived; otherwise the campaign is gone at once for admins, and its job, run from its request
object's event as in production, removes every document and object the campaign held, page by
page, while the audit log (with the `delete` entry) stays."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.storage import Client as StorageClient

from devkit import codes as fixture_codes
from devkit.cleanup import delete_tree
from shared.clock import utcnow
from shared.control import deletion
from shared.gcp.firestore import audit_collection, campaign_ref, jobs_collection
from tests.support.api import ADMIN, auth
from tests.support.cloudevents import deliver, finalized_event
from tests.support.stack import BUCKET, MakeCampaign

pytestmark = pytest.mark.emulator

Delete = Callable[[str], dict[str, Any]]


def _forget(db: firestore.Client, storage_client: StorageClient, campaign_id: str) -> None:
    """What a test's deletion leaves by design (the audit log) or by failing (the rest)."""
    delete_tree(db, campaign_ref(db, campaign_id))
    for collection in (audit_collection(db), jobs_collection(db)):
        query = collection.where(filter=FieldFilter("campaign_id", "==", campaign_id))
        for snapshot in query.stream():
            snapshot.reference.delete()
    for blob in storage_client.list_blobs(BUCKET, prefix=f"delete/{campaign_id}/"):
        blob.delete()


@pytest.fixture
def delete(
    admin_client: FlaskClient,
    import_client: FlaskClient,
    storage_client: StorageClient,
    db: firestore.Client,
    cleanup: list[Callable[[], object]],
) -> Delete:
    """Delete a campaign, deliver its request object's event as Cloud Storage would, and return
    the finished job."""

    def run(campaign_id: str) -> dict[str, Any]:
        cleanup.append(lambda: _forget(db, storage_client, campaign_id))
        accepted = admin_client.delete(f"/v1/campaigns/{campaign_id}", headers=ADMIN)
        assert accepted.status_code == 202, accepted.get_json()
        job_id = accepted.get_json()["job_id"]
        request = storage_client.bucket(BUCKET).get_blob(f"delete/{campaign_id}/{job_id}.json")
        assert request is not None
        event = finalized_event(bucket=BUCKET, name=request.name, generation=request.generation)
        assert deliver(import_client, event) == 200
        # Eventarc delivers at least once: a redelivery of a finished deletion does nothing.
        assert deliver(import_client, event) == 200
        job: dict[str, Any] = admin_client.get(f"/v1/jobs/{job_id}", headers=ADMIN).get_json()
        return job

    return run


def _documents_under(db: firestore.Client, campaign_id: str) -> int:
    return sum(
        len(list(c.recursive().stream())) for c in campaign_ref(db, campaign_id).collections()
    )


def test_a_started_campaign_is_kept_until_it_is_archived_then_deleted_with_everything(
    admin_client: FlaskClient,
    claim_client: FlaskClient,
    db: firestore.Client,
    storage_client: StorageClient,
    make_campaign: MakeCampaign,
    delete: Delete,
) -> None:
    campaign_id = make_campaign(codes=3)
    claimed = claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth("d-1"))
    hook = admin_client.post(
        f"/v1/campaigns/{campaign_id}/webhooks",
        json={"url": "http://127.0.0.1:9/hook", "events": ["coupon.claimed"]},
        headers=ADMIN,
    )
    bucket = storage_client.bucket(BUCKET)
    upload = bucket.blob(f"imports/{campaign_id}/later.csv")
    upload.upload_from_string("code\nLATER-1\n")
    other = bucket.blob(f"imports/{campaign_id}x/kept.csv")
    other.upload_from_string("code\nKEPT-1\n")
    live = admin_client.delete(f"/v1/campaigns/{campaign_id}", headers=ADMIN)
    admin_client.post(f"/v1/campaigns/{campaign_id}:end", headers=ADMIN)
    ended = admin_client.delete(f"/v1/campaigns/{campaign_id}", headers=ADMIN)
    admin_client.post(f"/v1/campaigns/{campaign_id}:archive", headers=ADMIN)

    job = delete(campaign_id)

    try:
        assert claimed.status_code == 201
        assert hook.status_code == 201
        for refused in (live, ended):
            assert refused.status_code == 409
            assert refused.get_json()["error_code"] == "CAMPAIGN_NOT_DELETABLE"
        assert job["kind"] == "delete"
        assert job["state"] == "done"
        assert job["deleted"] > 3 + 1 + 1  # coupons, the claim, counters, segments, the upload
        assert not campaign_ref(db, campaign_id).get().exists
        assert _documents_under(db, campaign_id) == 0
        webhook = db.collection("webhooks").document(hook.get_json()["webhook_id"]).get()
        assert not webhook.exists
        assert list(storage_client.list_blobs(BUCKET, prefix=f"imports/{campaign_id}/")) == []
        assert list(storage_client.list_blobs(BUCKET, prefix=f"delete/{campaign_id}/")) == []
        assert other.exists()  # another campaign's folder that begins with the same id
        gone = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ADMIN)
        assert gone.status_code == 404
        audit = admin_client.get(f"/v1/audit?campaign_id={campaign_id}", headers=ADMIN)
        entries = audit.get_json()["entries"]
        assert [e["action"] for e in entries][:3] == ["delete", "archive", "end"]
        assert entries[0]["before"]["title"] == "Test sale"
        assert entries[0]["after"] == {"job_id": job["job_id"]}
    finally:
        other.delete()


def test_a_campaign_that_never_started_is_gone_at_once_and_deleted_page_by_page(
    admin_client: FlaskClient,
    claim_client: FlaskClient,
    db: firestore.Client,
    make_campaign: MakeCampaign,
    delete: Delete,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(deletion, "BATCH", 100)
    campaign_id = make_campaign(codes=250, starts_at=utcnow() + timedelta(hours=1))
    accepted: dict[str, Any] = {}
    original = deletion.DeletionService.request

    def request(self: deletion.DeletionService, **kwargs: Any) -> Any:
        job = original(self, **kwargs)
        if accepted:
            return job  # the repeated DELETE below
        accepted["first"] = job
        # Between the request and its job: the campaign is gone for admins, ended for shoppers.
        accepted["get"] = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ADMIN)
        accepted["listed"] = admin_client.get("/v1/campaigns", headers=ADMIN).get_json()
        accepted["edit"] = admin_client.patch(
            f"/v1/campaigns/{campaign_id}", json={"title": "x"}, headers=ADMIN
        )
        accepted["again"] = admin_client.delete(f"/v1/campaigns/{campaign_id}", headers=ADMIN)
        accepted["public"] = claim_client.get(f"/v1/campaigns/{campaign_id}")
        return job

    monkeypatch.setattr(deletion.DeletionService, "request", request)

    job = delete(campaign_id)

    assert accepted["get"].status_code == 404
    assert "being deleted" in accepted["get"].get_json()["error_message"]
    assert campaign_id not in {c["campaign_id"] for c in accepted["listed"]["campaigns"]}
    assert accepted["edit"].status_code == 404
    # A repeated DELETE (its first answer lost) answers the same job.
    assert accepted["again"].status_code == 202
    assert accepted["again"].get_json()["job_id"] == job["job_id"]
    assert accepted["public"].get_json()["status"] == "ended"
    assert job["state"] == "done"
    assert job["deleted"] >= 250 + 1
    assert _documents_under(db, campaign_id) == 0
    assert not campaign_ref(db, campaign_id).get().exists


def test_codes_imported_during_the_sweep_are_swept_again_before_the_campaign_goes(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    delete: Delete,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    campaign_id = make_campaign(codes=2, starts_at=utcnow() + timedelta(hours=1))
    sweeps: list[int] = []
    original = deletion.DeletionService._sweep

    def sweep(self: deletion.DeletionService, job: Any, progress: Any) -> None:
        original(self, job, progress)
        sweeps.append(1)
        if len(sweeps) == 1:
            # An import batch that read the campaign before it was marked commits now: its
            # codes and the campaign's pool growth in one batch.
            fixture_codes.add_codes(db, campaign_id=campaign_id, codes=["LATE-1"], now=utcnow())

    monkeypatch.setattr(deletion.DeletionService, "_sweep", sweep)

    job = delete(campaign_id)

    assert job["state"] == "done"
    assert len(sweeps) == 2
    assert _documents_under(db, campaign_id) == 0


def test_codes_assigned_before_the_sale_keep_the_campaign(
    admin_client: FlaskClient,
    db: firestore.Client,
    make_campaign: MakeCampaign,
) -> None:
    campaign_id = make_campaign(codes=1, starts_at=utcnow() + timedelta(hours=1))
    claim = campaign_ref(db, campaign_id).collection("claims").document("u-1")
    claim.set({"user_id": "u-1", "code": f"{campaign_id}-00000"})

    refused = admin_client.delete(f"/v1/campaigns/{campaign_id}", headers=ADMIN)

    assert refused.status_code == 409
    assert refused.get_json()["error_code"] == "CAMPAIGN_NOT_DELETABLE"
    assert "assigned" in refused.get_json()["error_message"]
    assert campaign_ref(db, campaign_id).get().exists
