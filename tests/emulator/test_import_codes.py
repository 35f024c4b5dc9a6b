"""import_codes and code generation, end to end on the Storage and Firestore emulators, with
the object-finalized CloudEvent as Cloud Storage sends it (tests/fixtures)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore
from google.cloud.storage import Client as StorageClient

from shared.clock import utcnow
from shared.codes import CODE_ALPHABET
from shared.container import Services
from shared.coupons.store import coupon_id_for
from shared.gcp.firestore import coupons_collection, jobs_collection
from shared.intake import jobs as job_store
from shared.intake import service as import_service
from shared.ratelimit.pacing import Ramp
from shared.settings import get_settings
from tests.support.api import ADMIN, auth
from tests.support.cloudevents import deliver, finalized_event
from tests.support.stack import BUCKET, ROOT, MakeCampaign

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


@pytest.fixture
def campaign_id(make_campaign: MakeCampaign) -> str:
    """A campaign with no codes yet."""
    return make_campaign()


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
    campaign_id: str,
    db: firestore.Client,
) -> None:
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
    campaign_id: str,
    db: firestore.Client,
) -> None:
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
    campaign_id: str,
    db: firestore.Client,
) -> None:
    """The first attempt wrote part of the file and died with the job still running; the
    redelivered event finishes it, counting each row once."""
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
    upload: Callable[..., dict[str, Any]], admin_client: FlaskClient, campaign_id: str
) -> None:
    first = job_for(admin_client, upload(campaign_id, "A-1\n", name="codes.csv"))
    second = job_for(admin_client, upload(campaign_id, "A-1\nA-2\n", name="codes.csv"))

    assert first["job_id"] != second["job_id"]
    assert (second["imported"], second["duplicates_in_campaign"]) == (1, 1)
    jobs = admin_client.get(f"/v1/campaigns/{campaign_id}/jobs", headers=ADMIN).get_json()["jobs"]
    assert [j["job_id"] for j in jobs] == [second["job_id"], first["job_id"]]


def test_a_non_utf8_line_is_reported_and_the_rows_after_it_are_imported(
    upload: Callable[..., dict[str, Any]],
    admin_client: FlaskClient,
    campaign_id: str,
    db: firestore.Client,
) -> None:
    job = job_for(admin_client, upload(campaign_id, b"GOOD-1\nGOOD-2\nCAF\xc9-3\nLATER-4\n"))

    assert job["state"] == "done"
    assert (job["rows_read"], job["imported"], job["invalid"]) == (4, 3, 1)
    assert job["errors"] == [
        {"line": 3, "reason": "not valid UTF-8; save the file as UTF-8", "value": ""}
    ]
    assert set(stored_codes(db, campaign_id)) == {"GOOD-1", "GOOD-2", "LATER-4"}


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
    ("data", "logged"),
    [
        (
            {"bucket": BUCKET, "name": "elsewhere/readme.txt", "generation": "1"},
            "object is not an import; ignored",
        ),
        (
            {"bucket": BUCKET, "name": "imports/only-two-parts.csv", "generation": "1"},
            "object under imports/ names no campaign; ignored",
        ),
        (
            {"bucket": "someone-elses-bucket", "name": "imports/x/y.csv", "generation": "1"},
            "object in an unexpected bucket ignored",
        ),
        (
            {"bucket": BUCKET, "name": "imports/x/y.csv", "generation": "not-a-number"},
            "malformed storage event acknowledged",
        ),
        (
            {"bucket": BUCKET, "name": "imports/x/" + "y" * 2000 + ".csv", "generation": "1"},
            "malformed storage event acknowledged",
        ),
        ({"no": "bucket"}, "malformed storage event acknowledged"),
    ],
)
def test_objects_that_are_not_imports_are_acknowledged(
    import_client: FlaskClient,
    db: firestore.Client,
    caplog: pytest.LogCaptureFixture,
    data: dict[str, str],
    logged: str,
) -> None:
    event = finalized_event(bucket=BUCKET, name="placeholder", generation=1)
    event["data"] = data
    jobs_before = {job.id for job in jobs_collection(db).select([]).stream()}

    with caplog.at_level(logging.INFO):
        assert deliver(import_client, event) == 200

    assert [r.getMessage() for r in caplog.records if r.getMessage() == logged] == [logged]
    jobs_after = {job.id for job in jobs_collection(db).select([]).stream()}
    assert jobs_after == jobs_before  # no job started, none failed


@pytest.mark.parametrize(
    ("folder", "name", "reason"),
    [
        ("UPPER", "x.csv", "lower-case"),
        ("same", "sub/x.csv", "sub-folders"),
        ("same", "codes.txt", "only .csv files"),
    ],
)
def test_files_that_cannot_be_imported_leave_a_failed_job_the_marketer_can_find(
    upload: Callable[..., dict[str, Any]],
    admin_client: FlaskClient,
    campaign_id: str,
    db: firestore.Client,
    cleanup: list[Callable[[], object]],
    folder: str,
    name: str,
    reason: str,
) -> None:
    """Finding 10: such files once left no job at all."""
    path_folder = campaign_id.upper() if folder == "UPPER" else campaign_id

    event = upload(path_folder, "GOOD-1\n", name=name)
    job = job_for(admin_client, event)
    cleanup.append(lambda: job_store.job_ref(db, job["job_id"]).delete())
    listed = admin_client.get(f"/v1/campaigns/{campaign_id}/jobs", headers=ADMIN)

    assert job["state"] == "failed"
    assert job["campaign_id"] == campaign_id
    assert reason in job["failure_reason"]
    assert [j["job_id"] for j in listed.get_json()["jobs"]] == [job["job_id"]]
    assert stored_codes(db, campaign_id) == {}


def test_a_stray_quote_loses_no_row_of_the_file(
    upload: Callable[..., dict[str, Any]],
    admin_client: FlaskClient,
    campaign_id: str,
    db: firestore.Client,
) -> None:
    """Finding 2: 20,000 codes with `"Q0000002` on line 3 once ended as a `done` job with 5,436
    imported, one invalid row and 14,563 codes neither imported nor reported (the reader took
    them all into one quoted field). The 20,000 rows themselves are read in
    tests/unit/test_csv_bounds.py; here 5,000, through the whole import."""
    lines = [f"Q{n:07d}" for n in range(5_000)]
    lines[2] = '"Q0000002'

    job = job_for(admin_client, upload(campaign_id, "\n".join(lines) + "\n"))

    assert job["state"] == "done"
    counts = (job["rows_read"], job["imported"], job["duplicates"], job["invalid"])
    assert counts == (5_000, 4_999, 0, 1)
    assert job["errors"] == [
        {
            "line": 3,
            "reason": "unterminated quote (a quoted field must end on its line)",
            "value": '"Q0000002',
        }
    ]
    assert len(stored_codes(db, campaign_id)) == 4_999


# Reads the object in a child process, through the import's own read path, and measures it.
_READ_OBJECT = textwrap.dedent(
    """
    import json, sys, tracemalloc
    from shared.container import instance_services
    from shared.gcp.storage import object_chunks
    from shared.intake.csv_rows import parse_rows

    bucket, name, generation = sys.argv[1:4]
    client = instance_services().storage
    tracemalloc.start()
    rows = parse_rows(object_chunks(client, bucket=bucket, name=name, generation=generation))
    found = [(r.line, getattr(r, "code", None) or r.reason) for r in rows]
    print(json.dumps({"rows": found, "peak": tracemalloc.get_traced_memory()[1]}))
    """
)


def test_a_huge_one_line_file_is_imported_in_bounded_memory(
    upload: Callable[..., dict[str, Any]],
    admin_client: FlaskClient,
    campaign_id: str,
    db: firestore.Client,
) -> None:
    """Finding 3: a 150 MB one-line file once peaked at 380 MB, read one byte per call."""
    body = b"A" * (50 << 20) + b"\nAFTER-1\nAFTER-2\n"
    started = time.monotonic()

    event = upload(campaign_id, body, name="huge.csv")
    job = job_for(admin_client, event)
    measured = subprocess.run(
        [
            sys.executable,
            "-c",
            _READ_OBJECT,
            BUCKET,
            event["data"]["name"],
            event["data"]["generation"],
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )

    assert job["state"] == "done"
    assert (job["rows_read"], job["imported"], job["invalid"]) == (3, 2, 1)
    assert job["errors"][0]["line"] == 1
    assert "line longer than" in job["errors"][0]["reason"]
    assert set(stored_codes(db, campaign_id)) == {"AFTER-1", "AFTER-2"}
    read = json.loads(measured.stdout)
    assert read["rows"][1:] == [[2, "AFTER-1"], [3, "AFTER-2"]]
    # 1 MiB reads and one line's limit: a few MiB, not 50 (nor 380).
    assert read["peak"] < 8 << 20, read["peak"]
    print(
        f"read 50 MiB one-line object: tracemalloc peak {read['peak'] / (1 << 20):.1f} MiB, "
        f"{time.monotonic() - started:.1f} s"
    )


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
    campaign_id: str,
    db: firestore.Client,
) -> None:
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
    admin_client: FlaskClient, campaign_id: str, body: dict[str, object]
) -> None:
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
    campaign_id: str,
    db: firestore.Client,
    storage_client: StorageClient,
) -> None:
    """With production's 500/50/5 ramp on, the ramp's start is kept in the job: an attempt that
    resumes a crashed one goes on at the rate the ramp had reached, instead of 500 writes/s."""
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
    assert Ramp(elapsed=(utcnow() - began).total_seconds()).rate == 500 * 1.5**2
