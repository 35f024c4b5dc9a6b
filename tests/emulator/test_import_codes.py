"""import_codes and code generation, end to end on the Storage and Firestore emulators, with
the object-finalized CloudEvent as Cloud Storage sends it (tests/fixtures)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore
from google.cloud.storage import Client as StorageClient

from shared.clock import utcnow
from shared.container import Services
from shared.coupons.store import coupon_id_for
from shared.gcp.firestore import coupons_collection
from shared.intake import jobs as job_store
from shared.intake import service as import_service
from shared.intake.models import CODE_ALPHABET
from shared.intake.write_rate import RampLimiter
from shared.settings import get_settings
from tests.support.api import ADMIN, auth
from tests.support.cloudevents import deliver, finalized_event
from tests.support.stack import BUCKET, MakeCampaign

pytestmark = pytest.mark.emulator


@pytest.fixture
def upload(
    storage_client: StorageClient, import_client: FlaskClient, cleanup: list[Callable[[], object]]
) -> Callable[..., dict[str, Any]]:
    """Put an object in the imports bucket and deliver its event; returns the event."""

    def put(campaign_id: str, body: bytes | str, *, name: str | None = None) -> dict[str, Any]:
        object_name = f"imports/{campaign_id}/{name or uuid.uuid4().hex[:8] + '.csv'}"
        blob = storage_client.bucket(BUCKET).blob(object_name)
        cleanup.append(lambda: blob.delete() if blob.exists() else None)
        blob.upload_from_string(body, content_type="text/csv")
        blob.reload()
        event = finalized_event(bucket=BUCKET, name=object_name, generation=blob.generation)
        assert deliver(import_client, event) == 200
        return event

    return put


def job_for(admin_client: FlaskClient, event: dict[str, Any]) -> dict[str, Any]:
    job_id = import_service.import_job_id(import_service.object_from_event(event["data"]))
    response = admin_client.get(f"/v1/jobs/{job_id}", headers=ADMIN)
    assert response.status_code == 200
    body: dict[str, Any] = response.get_json()
    return body


def stored_codes(db: firestore.Client, campaign_id: str) -> dict[str, dict[str, Any]]:
    return {
        (s.to_dict() or {})["code"]: s.to_dict() or {}
        for s in coupons_collection(db, campaign_id).stream()
    }


def test_a_real_world_csv_is_imported_with_a_report(
    upload: Callable[..., dict[str, Any]],
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign()
    csv = (
        "\ufeffCode,Note\r\n"
        "SAVE-001,first\r\n"
        '"SAVE-002" ,quoted\r\n'
        "\r\n"
        "  SAVE-003  ,spaces\r\n"
        ",empty\r\n"
        "BAD CODE,inside space\r\n"
        "=HYPERLINK(1),formula\r\n"
        "SAVE-001,dup in file\r\n"
    )

    job = job_for(admin_client, upload(campaign_id, csv))

    assert job["state"] == "done"
    assert job["kind"] == "import"
    assert job["source"].startswith(f"gs://{BUCKET}/imports/{campaign_id}/")
    assert job["rows_read"] == 7
    assert job["imported"] == 4
    assert job["duplicates_in_file"] == 1
    assert job["duplicates"] == 1
    assert job["invalid"] == 2
    assert job["errors"] == [
        {"line": 6, "reason": "empty code", "value": ""},
        {"line": 7, "reason": "whitespace inside the code", "value": "BAD CODE"},
    ]
    assert job["duration_seconds"] is not None
    codes = stored_codes(db, campaign_id)
    assert set(codes) == {"SAVE-001", "SAVE-002", "SAVE-003", "=HYPERLINK(1)"}
    assert all(c["assigned"] is False and 0 <= c["random_float"] < 1 for c in codes.values())
    stats = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ADMIN).get_json()["stats"]
    assert (stats["codes_total"], stats["claimed"], stats["remaining"]) == (4, 0, 4)


def test_codes_already_in_the_campaign_are_skipped_and_counted(
    upload: Callable[..., dict[str, Any]],
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign(codes=["OLD-1", "OLD-2"])

    job = job_for(admin_client, upload(campaign_id, "OLD-1\nNEW-1\nOLD-2\nNEW-2\n"))

    assert (job["imported"], job["duplicates_in_campaign"]) == (2, 2)
    assert len(stored_codes(db, campaign_id)) == 4


def test_a_redelivered_event_imports_nothing_twice_and_never_resets_a_claimed_code(
    upload: Callable[..., dict[str, Any]],
    import_client: FlaskClient,
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign()
    event = upload(campaign_id, "ONLY-ONE\n")
    claimed = claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth("winner"))
    assert claimed.status_code == 201

    assert deliver(import_client, event) == 200

    job = job_for(admin_client, event)
    assert (job["imported"], job["duplicates"]) == (1, 0)
    coupon = stored_codes(db, campaign_id)["ONLY-ONE"]
    assert coupon["assigned"] is True
    assert coupon["assigned_to"] == "winner"
    jobs = admin_client.get(f"/v1/campaigns/{campaign_id}/jobs", headers=ADMIN).get_json()["jobs"]
    assert len(jobs) == 1


def test_a_crashed_attempt_is_resumed_with_exact_counts(
    upload: Callable[..., dict[str, Any]],
    import_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
) -> None:
    """The first attempt wrote part of the file and died with the job still running; the
    redelivered event finishes it, counting each row once."""
    campaign_id = make_campaign()
    event = upload(campaign_id, "\n".join(f"R-{i}" for i in range(1, 11)) + "\n")
    job_id = job_for(admin_client, event)["job_id"]
    # Roll the job back to "running" and remove the last five codes, as a crash would leave it.
    job_store.job_ref(db, job_id).update({"state": "running", "imported": 5, "finished_at": None})
    for i in range(6, 11):
        coupons_collection(db, campaign_id).document(coupon_id_for(f"R-{i}")).delete()

    assert deliver(import_client, event) == 200

    job = job_for(admin_client, event)
    assert job["state"] == "done"
    assert (job["rows_read"], job["imported"], job["duplicates"]) == (10, 10, 0)
    assert len(stored_codes(db, campaign_id)) == 10


def test_a_new_upload_under_the_same_name_is_a_new_job(
    upload: Callable[..., dict[str, Any]], admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign()

    first = job_for(admin_client, upload(campaign_id, "A-1\n", name="codes.csv"))
    second = job_for(admin_client, upload(campaign_id, "A-1\nA-2\n", name="codes.csv"))

    assert first["job_id"] != second["job_id"]
    assert (second["imported"], second["duplicates_in_campaign"]) == (1, 1)
    jobs = admin_client.get(f"/v1/campaigns/{campaign_id}/jobs", headers=ADMIN).get_json()["jobs"]
    assert [j["job_id"] for j in jobs] == [second["job_id"], first["job_id"]]


def test_non_utf8_fails_the_job_with_the_line_and_keeps_the_rows_before(
    upload: Callable[..., dict[str, Any]],
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign()

    job = job_for(admin_client, upload(campaign_id, b"GOOD-1\nGOOD-2\nCAF\xc9-3\nLATER-4\n"))

    assert job["state"] == "failed"
    assert "line 3 is not valid UTF-8" in job["failure_reason"]
    assert set(stored_codes(db, campaign_id)) == {"GOOD-1", "GOOD-2"}


def test_unknown_campaign_is_acknowledged_with_a_failed_job(
    upload: Callable[..., dict[str, Any]], admin_client: FlaskClient, db: firestore.Client
) -> None:
    campaign_id = f"ghost-{uuid.uuid4().hex[:6]}"

    job = job_for(admin_client, upload(campaign_id, "X-1\n"))
    listed = admin_client.get(f"/v1/campaigns/{campaign_id}/jobs", headers=ADMIN)

    job_store.job_ref(db, job["job_id"]).delete()
    assert job["state"] == "failed"
    assert "does not exist" in job["failure_reason"]
    assert [j["job_id"] for j in listed.get_json()["jobs"]] == [job["job_id"]]


@pytest.mark.parametrize(
    "data",
    [
        {"bucket": BUCKET, "name": "elsewhere/readme.txt", "generation": "1"},
        {"bucket": BUCKET, "name": "imports/only-two-parts.csv", "generation": "1"},
        {"bucket": "someone-elses-bucket", "name": "imports/x/y.csv", "generation": "1"},
        {"no": "bucket"},
    ],
)
def test_objects_that_are_not_imports_are_acknowledged(
    import_client: FlaskClient, data: dict[str, str]
) -> None:
    event = finalized_event(bucket=BUCKET, name="placeholder", generation=1)
    event["data"] = data

    assert deliver(import_client, event) == 200


def test_jobs_endpoints_need_admin_and_known_ids(admin_client: FlaskClient) -> None:
    assert admin_client.get("/v1/jobs/imp-nope", headers=ADMIN).get_json()["error_code"] == (
        "JOB_NOT_FOUND"
    )
    assert admin_client.get("/v1/jobs/imp-nope", headers=auth("shopper")).status_code == 403
    missing = admin_client.get("/v1/campaigns/never-existed/jobs", headers=ADMIN)
    assert missing.get_json()["error_code"] == "CAMPAIGN_NOT_FOUND"


@pytest.fixture
def generated_objects(
    storage_client: StorageClient, cleanup: list[Callable[[], object]]
) -> Iterator[None]:
    yield
    for prefix in ("generate/", "imports/"):
        for blob in storage_client.list_blobs(BUCKET, prefix=prefix):
            if "gen-" in blob.name:
                blob.delete()


def _deliver_new_objects(
    storage_client: StorageClient, import_client: FlaskClient, seen: set[str], prefix: str
) -> list[str]:
    """What the Storage emulator cannot do: announce new objects (the local stack polls)."""
    delivered = []
    for blob in storage_client.list_blobs(BUCKET, prefix=prefix):
        key = f"{blob.name}#{blob.generation}"
        if key not in seen:
            seen.add(key)
            event = finalized_event(
                bucket=BUCKET, name=blob.name, generation=blob.generation, metadata=blob.metadata
            )
            assert deliver(import_client, event) == 200
            delivered.append(blob.name)
    return delivered


@pytest.mark.usefixtures("generated_objects")
def test_generated_codes_are_written_to_the_bucket_and_imported(
    admin_client: FlaskClient,
    import_client: FlaskClient,
    storage_client: StorageClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign()

    accepted = admin_client.post(
        f"/v1/campaigns/{campaign_id}/codes:generate",
        json={"count": 250, "length": 8, "prefix": "BF-"},
        headers=ADMIN,
    )
    assert accepted.status_code == 202
    job_id = accepted.get_json()["job_id"]
    assert admin_client.get(f"/v1/jobs/{job_id}", headers=ADMIN).get_json()["state"] == "running"
    seen: set[str] = set()
    for prefix in (f"generate/{campaign_id}/", f"imports/{campaign_id}/"):
        _deliver_new_objects(storage_client, import_client, seen, prefix)

    job = admin_client.get(f"/v1/jobs/{job_id}", headers=ADMIN).get_json()
    assert job["state"] == "done"
    assert (job["requested"], job["imported"]) == (250, 250)
    codes = set(stored_codes(db, campaign_id))
    assert len(codes) == 250
    assert all(
        c.startswith("BF-") and len(c) == 11 and set(c[3:]) <= set(CODE_ALPHABET) for c in codes
    )
    # The marketer can download exactly what was issued.
    (csv_name,) = [f.split("#")[0].removeprefix(f"gs://{BUCKET}/") for f in job["files"]]
    downloaded = storage_client.bucket(BUCKET).blob(csv_name).download_as_text().split()
    assert downloaded[0] == "code"
    assert set(downloaded[1:]) == codes


@pytest.mark.usefixtures("generated_objects")
def test_colliding_generated_codes_are_regenerated(
    admin_client: FlaskClient,
    import_client: FlaskClient,
    storage_client: StorageClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    campaign_id = make_campaign(codes=["TAKEN-1", "TAKEN-2"])
    batches = iter([["TAKEN-1", "FRESH-1", "TAKEN-2", "FRESH-2"], ["FRESH-3", "FRESH-4"]])
    monkeypatch.setattr(import_service, "generate_codes", lambda count, **_: next(batches)[:count])

    job_id = admin_client.post(
        f"/v1/campaigns/{campaign_id}/codes:generate", json={"count": 4}, headers=ADMIN
    ).get_json()["job_id"]
    seen: set[str] = set()
    _deliver_new_objects(storage_client, import_client, seen, f"generate/{campaign_id}/")
    while _deliver_new_objects(storage_client, import_client, seen, f"imports/{campaign_id}/"):
        pass

    job = admin_client.get(f"/v1/jobs/{job_id}", headers=ADMIN).get_json()
    assert job["state"] == "done"
    assert (job["imported"], job["duplicates_in_campaign"]) == (4, 2)
    assert len(job["files"]) == 2
    assert set(stored_codes(db, campaign_id)) == {"TAKEN-1", "TAKEN-2"} | {
        f"FRESH-{i}" for i in range(1, 5)
    }


@pytest.mark.parametrize(
    "body", [{"count": 0}, {"count": 10, "length": 3}, {"count": 5, "prefix": "bad prefix"}]
)
def test_invalid_generation_request_is_400(
    admin_client: FlaskClient, make_campaign: MakeCampaign, body: dict[str, object]
) -> None:
    campaign_id = make_campaign()
    response = admin_client.post(
        f"/v1/campaigns/{campaign_id}/codes:generate", json=body, headers=ADMIN
    )
    assert response.status_code == 400
    assert response.get_json()["error_code"] == "REQUEST_VALIDATION_FAILED"


def test_generation_for_an_unknown_campaign_is_404(admin_client: FlaskClient) -> None:
    response = admin_client.post(
        "/v1/campaigns/nope-nope/codes:generate", json={"count": 5}, headers=ADMIN
    )
    assert response.status_code == 404


def test_a_retried_attempt_continues_the_write_ramp_where_it_stands(
    upload: Callable[..., dict[str, Any]],
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    storage_client: StorageClient,
) -> None:
    """With production's 500/50/5 ramp on, the ramp's start is kept in the job: an attempt that
    resumes a crashed one goes on at the rate the ramp had reached, instead of 500 writes/s."""
    campaign_id = make_campaign()
    event = upload(campaign_id, "code\nRAMP-1\nRAMP-2\n")
    job_id = job_for(admin_client, event)["job_id"]
    began = utcnow() - timedelta(minutes=11)
    job_store.job_ref(db, job_id).update(
        {"state": "running", "finished_at": None, "ramp_started_at": began}
    )
    services = Services(get_settings().model_copy(update={"import_ramp": True}), db=db)
    ramped = services.intake

    ramped.handle_object_finalized(import_service.object_from_event(event["data"]))

    job = job_store.get_job(db, job_id=job_id)
    assert job.state.value == "done"
    assert job.attempts == 2
    assert job.ramp_started_at == began  # the first attempt's ramp, not a new one
    assert RampLimiter(elapsed=(utcnow() - began).total_seconds()).rate() == 500 * 1.5**2
