"""Uploads from the console: admin_api opens a resumable upload session and the browser PUTs the
file straight to the bucket (here the Storage emulator, with the CORS answers of
devkit/emulators/storage_cors.py); the object's import then runs as for any dropped file."""

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

from devkit import http
from shared.gcp.firestore import audit_collection
from shared.intake import service as import_service
from tests.support.api import ADMIN
from tests.support.cloudevents import deliver, finalized_event
from tests.support.stack import BUCKET, CORS_ORIGIN, MakeCampaign

pytestmark = pytest.mark.emulator

CSV = b'code\nAAA-111\nBBB-222\n=HYPERLINK("x")\n'


@pytest.fixture
def campaign_id(
    make_campaign: MakeCampaign,
    db: firestore.Client,
    storage_client: StorageClient,
    cleanup: list[Callable[[], object]],
) -> str:
    campaign_id = make_campaign()

    def remove() -> None:
        for blob in storage_client.list_blobs(BUCKET, prefix=f"imports/{campaign_id}/"):
            blob.delete()
        query = audit_collection(db).where(filter=FieldFilter("campaign_id", "==", campaign_id))
        for snapshot in query.stream():
            snapshot.reference.delete()

    cleanup.append(remove)
    return campaign_id


def _open(client: FlaskClient, campaign_id: str, name: str) -> Any:
    return client.post(
        f"/v1/campaigns/{campaign_id}/uploads",
        json={"name": name},
        headers={**ADMIN, "Origin": CORS_ORIGIN},
    )


def test_a_browser_uploads_straight_to_the_bucket_and_the_file_is_imported(
    admin_client: FlaskClient,
    import_client: FlaskClient,
    storage_client: StorageClient,
    db: firestore.Client,
    campaign_id: str,
    cleanup: list[Callable[[], object]],
) -> None:
    opened = _open(admin_client, campaign_id, "Black Friday codes.csv")
    assert opened.status_code == 201, opened.get_json()
    session = opened.get_json()
    url = session["upload_url"]

    preflight = http.request(
        "OPTIONS",
        url,
        timeout=10,
        headers={
            "Origin": CORS_ORIGIN,
            "Access-Control-Request-Method": "PUT",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    put = http.request(
        "PUT",
        url,
        timeout=10,
        data=CSV,
        headers={"Origin": CORS_ORIGIN, "Content-Type": "text/csv"},
    )

    assert session["object"] == f"imports/{campaign_id}/Black Friday codes.csv"
    assert preflight.status_code in (200, 204)
    assert "PUT" in preflight.headers["Access-Control-Allow-Methods"]
    assert put.status_code in (200, 201)
    assert put.headers["Access-Control-Allow-Origin"] == CORS_ORIGIN
    blob = storage_client.bucket(BUCKET).get_blob(session["object"])
    assert blob is not None
    # Taken first: a download replaces it with a header the emulator does not send.
    generation = blob.generation
    assert blob.download_as_bytes() == CSV
    event = finalized_event(bucket=BUCKET, name=blob.name, generation=generation)
    job_id = import_service.import_job_id(import_service.object_from_event(event["data"]))
    cleanup.append(lambda: db.collection("jobs").document(job_id).delete())
    assert deliver(import_client, event) == 200
    job = admin_client.get(f"/v1/jobs/{job_id}", headers=ADMIN).get_json()
    assert job["state"] == "done"
    assert job["imported"] == 3
    audit = admin_client.get(f"/v1/audit?campaign_id={campaign_id}", headers=ADMIN).get_json()
    (entry,) = audit["entries"]
    assert entry["action"] == "upload"
    assert entry["target"] == f"gs://{BUCKET}/{session['object']}"


@pytest.mark.parametrize(
    "name",
    ["../x.csv", "a/b.csv", "..csv", ".hidden.csv", "codes.txt", "codes.csv/", "c\nodes.csv", ""],
)
def test_a_name_that_is_not_a_plain_csv_file_name_is_refused(
    admin_client: FlaskClient, campaign_id: str, name: str
) -> None:
    answer = _open(admin_client, campaign_id, name)

    assert answer.status_code == 400
    assert answer.get_json()["error_code"] == "REQUEST_VALIDATION_FAILED"


def test_an_upload_for_an_unknown_campaign_is_404(admin_client: FlaskClient) -> None:
    answer = _open(admin_client, "no-such-campaign-x", "codes.csv")

    assert answer.status_code == 404
    assert answer.get_json()["error_code"] == "CAMPAIGN_NOT_FOUND"


def test_the_rejected_rows_download_lists_every_invalid_row_duplicate_and_warning(
    admin_client: FlaskClient,
    import_client: FlaskClient,
    storage_client: StorageClient,
    db: firestore.Client,
    make_campaign: MakeCampaign,
    cleanup: list[Callable[[], object]],
) -> None:
    campaign_id = make_campaign(codes=["OLD-1"])
    bad = [f"BAD {n}" for n in range(150)]  # whitespace inside: invalid
    lines = ["code", "NEW-1", *bad, "NEW-1", "OLD-1", '"=HYPERLINK(""http://x"")"', "NEW-2"]
    name = f"imports/{campaign_id}/mixed.csv"
    blob = storage_client.bucket(BUCKET).blob(name)
    cleanup.append(lambda: blob.delete() if blob.exists() else None)
    blob.upload_from_string("\n".join(lines) + "\n", content_type="text/csv")
    blob.reload()
    event = finalized_event(bucket=BUCKET, name=name, generation=blob.generation)
    job_id = import_service.import_job_id(import_service.object_from_event(event["data"]))
    report = storage_client.bucket(BUCKET).blob(f"reports/{campaign_id}/{job_id}.csv")
    cleanup.append(lambda: report.delete() if report.exists() else None)
    cleanup.append(lambda: db.collection("jobs").document(job_id).delete())

    assert deliver(import_client, event) == 200
    job = admin_client.get(f"/v1/jobs/{job_id}", headers=ADMIN).get_json()
    download = admin_client.get(f"/v1/jobs/{job_id}/download", headers=ADMIN)

    assert (job["imported"], job["invalid"], job["duplicates"], job["warnings"]) == (3, 150, 2, 1)
    assert len(job["errors"]) == 100  # the job keeps the first; the download has them all
    assert download.status_code == 200
    rows = list(csv.DictReader(io.StringIO(download.get_data(as_text=True))))
    by_line = {int(r["line"]): r for r in rows}
    assert len(rows) == 150 + 2 + 1
    assert set(by_line) == set(range(3, 153)) | {153, 154, 155}
    assert by_line[3]["reason"] == "whitespace inside the code"
    assert by_line[153]["reason"] == "duplicate of line 2"
    assert by_line[153]["value"] == "NEW-1"
    assert by_line[154]["reason"] == "already in the campaign"
    assert by_line[155]["reason"].startswith("imported, but it starts with '='")
    assert by_line[155]["value"] == '\'=HYPERLINK("http://x")'
