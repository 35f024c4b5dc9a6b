"""devkit/standins/storage_notifier.py: object-finalized CloudEvents for the Storage emulator.

The delivery tests use a small HTTP server in this process; the end-to-end tests run the real
import_codes under functions-framework (a subprocess on a free port) against the suite's
emulators, and upload with google-cloud-storage as a marketer's tool would.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore
from google.cloud.storage import Client as StorageClient

from devkit.emulators import free_port
from devkit.standins.storage_notifier import (
    EVENT_TYPE,
    Retries,
    StorageNotifier,
    deliver,
    finalized_event,
    object_resource,
)
from scripts.localstack import stack
from shared.intake import jobs as job_store
from shared.intake.models import JobRecord
from shared.intake.service import StoredObject, import_job_id
from tests.support.servers import FunctionServers, fast_notifier
from tests.support.stack import BUCKET, ROOT, MakeCampaign

# --- a functions-framework server, as the local stack runs it ---------------------------------


@pytest.fixture(scope="session")
def import_codes_url(shared_servers: FunctionServers) -> str:
    return shared_servers.urls(["import_codes"])["import_codes"]


def wait_for_job(db: firestore.Client, job_id: str, *, timeout: float = 20) -> JobRecord:
    """The job once it is finished (done or failed)."""
    deadline = time.monotonic() + timeout
    while True:
        job = job_store.find_job(db, job_id=job_id)
        if job is not None and job.state.value != "running":
            return job
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} did not finish in {timeout} s: {job}")
        time.sleep(0.1)


def eventually(condition: Callable[[], bool], *, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not true after {timeout} s: {condition}")
        time.sleep(0.05)


# --- the event --------------------------------------------------------------------------------

FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "storage_object_finalized.json").read_text())


def test_the_event_is_the_one_eventarc_sends_in_binary_mode() -> None:
    listed = {
        **FIXTURE["data"],
        "generation": 1763719200000000,  # some clients hold int64 as numbers
        "acl": [],
        "metadata": {"codedrop-generate-job": "gen-1"},
        "customerEncryption": None,
    }
    resource = object_resource(listed)
    event = finalized_event(resource)

    assert resource["generation"] == "1763719200000000"
    assert "acl" not in resource
    assert "customerEncryption" not in resource
    headers = event.headers
    assert headers["ce-specversion"] == FIXTURE["specversion"]
    assert headers["ce-type"] == FIXTURE["type"] == EVENT_TYPE
    assert headers["ce-source"] == FIXTURE["source"]
    assert headers["ce-subject"] == FIXTURE["subject"]
    assert headers["ce-time"] == FIXTURE["data"]["updated"]
    assert headers["Content-Type"] == "application/json"
    assert headers["ce-id"] != finalized_event(resource).headers["ce-id"]
    body = json.loads(event.body)
    assert body == {**FIXTURE["data"], "metadata": {"codedrop-generate-job": "gen-1"}}
    # What import_codes makes of it: the same job as Cloud Storage's own event.
    from shared.intake.service import object_from_event

    assert object_from_event(body) == object_from_event(
        {**FIXTURE["data"], "metadata": {"codedrop-generate-job": "gen-1"}}
    )


def test_backoff_doubles_up_to_the_cap() -> None:
    assert list(Retries(6, first_backoff=0.5, max_backoff=3).delays()) == [0.5, 1, 2, 3, 3]
    assert list(Retries(1).delays()) == []


# --- delivery against a small HTTP server -----------------------------------------------------


class Recorder:
    """An HTTP endpoint answering the statuses it is given, then 200; it keeps each request."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.requests: list[tuple[dict[str, str], bytes]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                recorder.requests.append((dict(self.headers.items()), self.rfile.read(length)))
                status = recorder.statuses.pop(0) if recorder.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Recorder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_failed_deliveries_are_retried_with_the_same_event() -> None:
    event = finalized_event(FIXTURE["data"])
    with Recorder([500, 503]) as endpoint:
        assert deliver(endpoint.url, event, retries=Retries(first_backoff=0.01, max_backoff=0.02))
    assert len(endpoint.requests) == 3
    for headers, body in endpoint.requests:
        lowered = {k.lower(): v for k, v in headers.items()}
        assert lowered["ce-id"] == event.event_id
        assert lowered["ce-type"] == EVENT_TYPE
        assert lowered["content-type"] == "application/json"
        assert json.loads(body)["name"] == FIXTURE["data"]["name"]


def test_delivery_gives_up_after_the_last_attempt_with_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    event = finalized_event(FIXTURE["data"])
    nobody = f"http://127.0.0.1:{free_port()}/"
    with caplog.at_level(logging.WARNING, logger="storage_notifier"):
        started = time.monotonic()
        retries = Retries(3, first_backoff=0.01, max_backoff=0.01)
        assert not deliver(nobody, event, retries=retries)
        assert time.monotonic() - started < 5
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == ["event not delivered; giving up"]
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


# --- the local stack's hook -------------------------------------------------------------------


def test_the_local_stack_starts_it_only_beside_import_codes(tmp_path: Path) -> None:
    assert stack.storage_notifier in stack.WATCHERS

    def info(functions: dict[str, str]) -> stack.StackInfo:
        return stack.StackInfo(
            project="demo-x",
            bucket="codedrop-imports",
            topic="coupon-events",
            env={"STORAGE_EMULATOR_HOST": "http://127.0.0.1:9"},
            function_urls=functions,
            log_dir=tmp_path,
        )

    assert stack.storage_notifier(info({"claim_api": "http://127.0.0.1:8001"})) is None
    watcher = stack.storage_notifier(info({"import_codes": "http://127.0.0.1:8004"}))
    assert isinstance(watcher, StorageNotifier)
    assert watcher.target_url == "http://127.0.0.1:8004/"
    assert watcher.bucket == "codedrop-imports"


# --- end to end: the emulators and the real import_codes --------------------------------------

Notifier = Callable[[], StorageNotifier]


@pytest.fixture
def notifier(storage_client: StorageClient, import_codes_url: str) -> Iterator[Notifier]:
    """Start a notifier on the test bucket (called when the test wants it); stopped at the end."""
    started: list[StorageNotifier] = []

    def start() -> StorageNotifier:
        watcher = fast_notifier(storage_client, f"{import_codes_url}/")
        watcher.start()
        started.append(watcher)
        return watcher

    yield start
    for watcher in started:
        watcher.stop()
        assert watcher.failure() is None


@pytest.fixture
def put(
    storage_client: StorageClient, cleanup: list[Callable[[], object]]
) -> Callable[[str, str], StoredObject]:
    """Upload an object as any client would; the stored object (with its generation)."""

    def upload(name: str, body: str) -> StoredObject:
        blob = storage_client.bucket(BUCKET).blob(name)
        cleanup.append(lambda: blob.delete() if blob.exists() else None)
        blob.upload_from_string(body, content_type="text/csv")
        return StoredObject(bucket=BUCKET, name=name, generation=str(blob.generation))

    return upload


@pytest.mark.emulator
def test_an_upload_is_imported_and_a_reupload_is_a_second_job(
    notifier: Notifier,
    put: Callable[[str, str], StoredObject],
    make_campaign: MakeCampaign,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign()
    name = f"imports/{campaign_id}/codes.csv"
    watcher = notifier()

    first = put(name, "code\nNOTE-1\nNOTE-2\nNOTE-2\nBAD CODE\n")
    job = wait_for_job(db, import_job_id(first))
    assert job.state.value == "done"
    assert (job.rows_read, job.imported, job.invalid) == (4, 2, 1)
    assert job.duplicates_in_file == 1
    assert job.source == f"gs://{BUCKET}/{name}#{first.generation}"

    second = put(name, "NOTE-2\nNOTE-3\n")
    assert second.generation != first.generation
    again = wait_for_job(db, import_job_id(second))
    assert again.job_id != job.job_id
    assert (again.imported, again.duplicates_in_campaign) == (1, 1)
    assert job_store.get_job(db, job_id=job.job_id).imported == 2  # the first job is untouched

    # import_codes answers the delivery just after it wrote the job. (Each import's report,
    # written beside the file, is announced too, as Eventarc would.)
    def uploads() -> list[tuple[str, str]]:
        return [d for d in watcher.delivered if d[0] == name]

    eventually(lambda: len(uploads()) == 2)
    assert uploads() == [(name, first.generation), (name, second.generation)]


@pytest.mark.emulator
def test_objects_there_before_it_started_are_not_announced(
    notifier: Notifier,
    put: Callable[[str, str], StoredObject],
    make_campaign: MakeCampaign,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign()
    old = put(f"imports/{campaign_id}/old.csv", "OLD-1\n")
    watcher = notifier()
    assert (old.name, old.generation) in watcher.snapshot

    new = put(f"imports/{campaign_id}/new.csv", "NEW-1\n")
    assert wait_for_job(db, import_job_id(new)).imported == 1
    time.sleep(0.3)  # a few more polls
    assert watcher.announced == [(new.name, new.generation)]
    assert job_store.find_job(db, job_id=import_job_id(old)) is None


@pytest.mark.emulator
def test_generated_codes_go_through_the_bucket_and_are_imported(
    notifier: Notifier,
    storage_client: StorageClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    cleanup: list[Callable[[], object]],
) -> None:
    """codes:generate writes a request object, import_codes answers it with a CSV, which is
    imported: two events the notifier must deliver in turn."""
    from shared.container import instance_services
    from shared.intake.models import GenerateCodes

    campaign_id = make_campaign()
    notifier()
    job = instance_services().intake.request_generation(
        campaign_id=campaign_id, spec=GenerateCodes(count=25, length=8, prefix="G")
    )

    def remove_objects() -> None:
        for prefix in (f"generate/{campaign_id}/", f"imports/{campaign_id}/"):
            for blob in storage_client.list_blobs(BUCKET, prefix=prefix):
                blob.delete()

    cleanup.append(remove_objects)
    done = wait_for_job(db, job.job_id)
    assert done.state.value == "done"
    assert done.imported == 25
    assert len(done.files) == 1


@pytest.mark.emulator
def test_an_unreachable_import_codes_is_retried_then_given_up(
    storage_client: StorageClient,
    put: Callable[[str, str], StoredObject],
    caplog: pytest.LogCaptureFixture,
) -> None:
    watcher = fast_notifier(
        storage_client, f"http://127.0.0.1:{free_port()}/", max_attempts=2, first_backoff=0.05
    )
    name = f"imports/nobody-{uuid.uuid4().hex[:8]}/codes.csv"
    with caplog.at_level(logging.WARNING, logger="storage_notifier"):
        watcher.start()
        try:
            stored = put(name, "X-1\n")
            eventually(lambda: bool(watcher.given_up))
        finally:
            watcher.stop()
    assert watcher.given_up == [(name, stored.generation)]
    assert watcher.delivered == []
    assert watcher.failure() is None
    assert any(r.getMessage() == "event not delivered; giving up" for r in caplog.records)
