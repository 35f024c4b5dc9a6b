"""Exports (POST /v1/campaigns/{id}/exports, then GET /v1/jobs/{job_id}/download): the job runs
from its request object's event, as in production, and the downloaded CSV matches the database,
with every cell safe to open in a spreadsheet; import jobs download their rejected rows."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.storage import Client as StorageClient

from shared.audit.models import Actor, AuditContext
from shared.clock import utcnow
from shared.control.exports import ExportKind, ExportService
from shared.gcp.firestore import audit_collection, claims_collection
from shared.intake import jobs as job_store
from shared.settings import get_settings
from tests.support.api import ADMIN, REDEEMER, auth
from tests.support.cloudevents import deliver, finalized_event
from tests.support.stack import BUCKET, MakeCampaign

pytestmark = pytest.mark.emulator

Export = Callable[[str, str], dict[str, Any]]


@pytest.fixture
def export(
    admin_client: FlaskClient,
    import_client: FlaskClient,
    storage_client: StorageClient,
    db: firestore.Client,
    cleanup: list[Callable[[], object]],
) -> Export:
    """Ask for an export, deliver its request object's event as Cloud Storage would, and return
    the finished job."""

    def run(campaign_id: str, kind: str) -> dict[str, Any]:
        cleanup.append(lambda: _forget_audit(db, campaign_id))
        accepted = admin_client.post(
            f"/v1/campaigns/{campaign_id}/exports", json={"kind": kind}, headers=ADMIN
        )
        assert accepted.status_code == 202, accepted.get_json()
        job_id = accepted.get_json()["job_id"]
        bucket = storage_client.bucket(BUCKET)
        request = bucket.get_blob(f"export/{campaign_id}/{job_id}.json")
        assert request is not None
        cleanup.append(lambda: db.collection("jobs").document(job_id).delete())
        cleanup.append(lambda: request.delete())
        result = bucket.blob(f"exports/{campaign_id}/{job_id}.csv")
        cleanup.append(lambda: result.delete() if result.exists() else None)
        event = finalized_event(bucket=BUCKET, name=request.name, generation=request.generation)
        assert deliver(import_client, event) == 200
        job: dict[str, Any] = admin_client.get(f"/v1/jobs/{job_id}", headers=ADMIN).get_json()
        return job

    return run


def _forget_audit(db: firestore.Client, campaign_id: str) -> None:
    query = audit_collection(db).where(filter=FieldFilter("campaign_id", "==", campaign_id))
    for snapshot in query.stream():
        snapshot.reference.delete()


def _download(client: FlaskClient, job_id: str) -> list[dict[str, str]]:
    answer = client.get(f"/v1/jobs/{job_id}/download", headers=ADMIN)
    assert answer.status_code == 200
    assert answer.mimetype == "text/csv"
    assert "attachment" in answer.headers["Content-Disposition"]
    return list(csv.DictReader(io.StringIO(answer.get_data(as_text=True))))


def test_a_claims_export_matches_the_database(
    admin_client: FlaskClient,
    claim_client: FlaskClient,
    db: firestore.Client,
    make_campaign: MakeCampaign,
    export: Export,
) -> None:
    campaign_id = make_campaign(codes=5)
    for n in range(3):
        answer = claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth(f"b-{n}"))
        assert answer.status_code == 201

    job = export(campaign_id, "claims")
    rows = _download(admin_client, job["job_id"])

    assert job["state"] == "done"
    assert job["kind"] == "export"
    assert job["export_kind"] == "claims"
    assert job["exported"] == 3
    assert job["result"] == f"gs://{BUCKET}/exports/{campaign_id}/{job['job_id']}.csv"
    stored = {s.id: s.to_dict() or {} for s in claims_collection(db, campaign_id).stream()}
    assert {r["claim_id"]: (r["user_id"], r["code"]) for r in rows} == {
        claim_id: (data["user_id"], data["code"]) for claim_id, data in stored.items()
    }
    assert {r["state"] for r in rows} == {"claimed"}
    assert all(r["claimed_at"].endswith("Z") for r in rows)
    audit = admin_client.get(f"/v1/audit?campaign_id={campaign_id}", headers=ADMIN).get_json()
    assert [(e["action"], e["target"]) for e in audit["entries"]] == [("export", job["job_id"])]


def test_codes_that_look_like_formulas_are_exported_as_text(
    admin_client: FlaskClient, make_campaign: MakeCampaign, export: Export
) -> None:
    codes = ['=HYPERLINK("http://x")', "+SUM1", "-CMD", "@IMPORT", "PLAIN-1"]
    campaign_id = make_campaign(codes=codes)

    job = export(campaign_id, "codes")
    rows = _download(admin_client, job["job_id"])

    assert sorted(r["code"] for r in rows) == sorted(
        ['\'=HYPERLINK("http://x")', "'+SUM1", "'-CMD", "'@IMPORT", "PLAIN-1"]
    )
    assert {r["state"] for r in rows} == {"available"}


def test_a_redemptions_export_lists_redeemed_codes_only(
    admin_client: FlaskClient,
    claim_client: FlaskClient,
    make_campaign: MakeCampaign,
    export: Export,
) -> None:
    campaign_id = make_campaign(codes=4)
    codes = [
        claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth(f"r-{n}")).get_json()[
            "code"
        ]
        for n in range(2)
    ]
    redeemed = admin_client.post(
        f"/v1/campaigns/{campaign_id}/redemptions",
        json={"code": codes[0], "order_id": "order-1"},
        headers=REDEEMER,
    )
    assert redeemed.status_code == 201

    job = export(campaign_id, "redemptions")
    rows = _download(admin_client, job["job_id"])

    assert [(r["code"], r["order_id"], r["user_id"]) for r in rows] == [
        (codes[0], "order-1", "r-0")
    ]


def test_an_export_reads_page_after_page(
    db: firestore.Client,
    storage_client: StorageClient,
    make_campaign: MakeCampaign,
    cleanup: list[Callable[[], object]],
) -> None:
    campaign_id = make_campaign(codes=7)
    cleanup.append(lambda: _forget_audit(db, campaign_id))
    service = ExportService(
        db=db, storage_client=storage_client, settings=get_settings(), clock=utcnow, page_size=2
    )
    audit = AuditContext(actor=Actor(uid="admin-1"), at=utcnow())
    job = service.request(campaign_id=campaign_id, kind=ExportKind.CODES, audit=audit)
    try:
        done = service.run(job, ExportKind.CODES)
        body = b"".join(service.download(job)).decode()
    finally:
        job_store.job_ref(db, job.job_id).delete()
        for prefix in (f"export/{campaign_id}/", f"exports/{campaign_id}/"):
            for blob in storage_client.list_blobs(BUCKET, prefix=prefix):
                blob.delete()

    assert done is not None
    assert done.exported == 7
    rows = list(csv.DictReader(io.StringIO(body)))
    assert sorted(r["code"] for r in rows) == [f"{campaign_id}-{i:05d}" for i in range(7)]


def test_a_running_export_cannot_be_downloaded_and_an_unknown_job_is_404(
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    cleanup: list[Callable[[], object]],
) -> None:
    campaign_id = make_campaign()
    cleanup.append(lambda: _forget_audit(db, campaign_id))
    accepted = admin_client.post(
        f"/v1/campaigns/{campaign_id}/exports", json={"kind": "codes"}, headers=ADMIN
    )
    job_id = accepted.get_json()["job_id"]

    early = admin_client.get(f"/v1/jobs/{job_id}/download", headers=ADMIN)
    unknown = admin_client.get("/v1/jobs/exp-0000000000000000/download", headers=ADMIN)
    wrong_kind = admin_client.post(
        f"/v1/campaigns/{campaign_id}/exports", json={"kind": "secrets"}, headers=ADMIN
    )

    db.collection("jobs").document(job_id).delete()
    assert early.status_code == 409
    assert early.get_json()["error_code"] == "JOB_NOT_FINISHED"
    assert unknown.status_code == 404
    assert unknown.get_json()["error_code"] == "JOB_NOT_FOUND"
    assert wrong_kind.status_code == 400
