"""Assignment jobs end to end: a recipient list dropped in the bucket, the object-finalized
CloudEvent delivered to import_codes as Cloud Storage sends it, codes assigned in Firestore,
the result file read back from the Storage emulator, counters fed through count_usage."""

from __future__ import annotations

import csv
import io
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.storage import Client as StorageClient

from devkit.audit import audit_campaign
from devkit.claims import claim_as
from shared.assignments import service as assignment_service
from shared.claims.engine import ClaimEngine, ClaimOutcome
from shared.claims.identity import IdentityKind, identity_key
from shared.claims.store import claim_id_for
from shared.clock import utcnow
from shared.container import instance_services
from shared.coupons import store as coupon_store
from shared.errors import Contended
from shared.events import models as events
from shared.gcp import client_internals
from shared.gcp import storage as storage_objects
from shared.gcp.firestore import campaign_ref, claims_collection, coupons_collection
from shared.intake import jobs as job_store
from shared.intake.service import object_from_event
from shared.settings import get_settings
from tests.support.api import ADMIN, auth
from tests.support.cloudevents import deliver, finalized_event, published_event
from tests.support.stack import BUCKET, MakeCampaign, Pump

pytestmark = pytest.mark.emulator

Upload = Callable[..., dict[str, Any]]


@pytest.fixture
def upload(
    storage_client: StorageClient, import_client: FlaskClient, cleanup: list[Callable[[], object]]
) -> Upload:
    """Drop a list under assignments/{campaign}/ and deliver its event; returns the event.
    Everything under that folder (results included) is deleted afterwards."""

    def put(
        campaign_id: str, body: bytes | str, *, name: str = "list.csv", status: int = 200
    ) -> dict[str, Any]:
        folder = f"assignments/{campaign_id}/"
        cleanup.append(
            lambda: [b.delete() for b in storage_client.list_blobs(BUCKET, prefix=folder)]
        )
        blob = storage_client.bucket(BUCKET).blob(folder + name)
        blob.upload_from_string(body, content_type="text/csv")
        event = finalized_event(bucket=BUCKET, name=blob.name, generation=blob.generation)
        assert deliver(import_client, event) == status
        return event

    return put


def job_for(admin_client: FlaskClient, event: dict[str, Any]) -> dict[str, Any]:
    job_id = assignment_service.assignment_job_id(object_from_event(event["data"]))
    response = admin_client.get(f"/v1/jobs/{job_id}", headers=ADMIN)
    assert response.status_code == 200
    body: dict[str, Any] = response.get_json()
    return body


def result_rows(storage_client: StorageClient, job: dict[str, Any]) -> list[list[str]]:
    name = job["result"].removeprefix(f"gs://{BUCKET}/")
    text = storage_client.bucket(BUCKET).blob(name).download_as_text()
    return list(csv.reader(io.StringIO(text)))


def codes_of(rows: list[list[str]]) -> dict[str, str]:
    """recipient -> code, from a result file's rows (header skipped); each recipient once."""
    found = {row[0]: row[1] for row in rows[1:]}
    assert len(found) == len(rows) - 1
    return found


def set_identity(db: firestore.Client, campaign_id: str, identity: str) -> None:
    # The campaign setting (DESIGN "Campaign fields"), written as the admin API stores it.
    campaign_ref(db, campaign_id).update({"identity": identity})


def audit_ok(db: firestore.Client, campaign_id: str) -> None:
    report = audit_campaign(db, campaign_id=campaign_id)
    assert report.ok, report.violations


def test_every_recipient_gets_a_code_of_their_own_and_the_result_file_lists_them(
    upload: Upload,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    storage_client: StorageClient,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign(codes=6)
    set_identity(db, campaign_id, "email")
    listing = (
        "\ufeffFirst name,Recipient,Note\r\n"
        'Ann,ann@shop.example,"=HYPERLINK(""http://x"")"\r\n'
        "Bob,BOB@Shop.Example,\r\n"
        "\r\n"
        "Cy,not-an-email,\r\n"
        "Bob again,bob@shop.example,repeat\r\n"
        'Dee,dee@shop.example,"a, b"\r\n'
    )

    job = job_for(admin_client, upload(campaign_id, listing))

    assert job["kind"] == "assignment"
    assert job["state"] == "done"
    assert job["source"].startswith(f"gs://{BUCKET}/assignments/{campaign_id}/list.csv#")
    assert job["result"] == f"gs://{BUCKET}/assignments/{campaign_id}/list.result.csv"
    counts = ("rows_read", "assigned", "already_held", "unassigned", "duplicates_in_file")
    assert [job[c] for c in counts] == [5, 3, 0, 0, 1]
    assert job["invalid"] == 1
    assert job["errors"] == [{"line": 5, "reason": "not an email address", "value": "not-an-email"}]
    rows = result_rows(storage_client, job)
    assert rows[0] == ["recipient", "code", "First name", "Note"]
    assert [r[0] for r in rows[1:]] == ["ann@shop.example", "BOB@Shop.Example", "dee@shop.example"]
    assert [(r[2], r[3]) for r in rows[1:]] == [
        ("Ann", '\'=HYPERLINK("http://x")'),  # never run as a formula
        ("Bob", ""),
        ("Dee", "a, b"),
    ]
    codes = codes_of(rows)
    assert len(set(codes.values())) == 3
    # Each recipient's code sits in the claim slot a landing-page claim as that email would
    # use (shared/claims/identity.py), and the coupon says so.
    claims = claims_collection(db, campaign_id)
    for recipient, code in codes.items():
        slot = claims.document(f"{identity_key(IdentityKind.EMAIL, recipient)}-0").get()
        assert slot.exists
        assert (slot.get("code"), slot.get("user_id")) == (code, recipient.lower())
    assert sum(1 for c in coupons_collection(db, campaign_id).stream() if c.get("assigned")) == 3
    audit_ok(db, campaign_id)


def test_a_redelivered_event_does_nothing_and_a_reupload_gives_nobody_a_second_code(
    upload: Upload,
    import_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    storage_client: StorageClient,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign(codes=10)
    listing = "recipient,segment\n" + "".join(f"cust-{i},s{i}\n" for i in range(4))
    event = upload(campaign_id, listing)
    first = job_for(admin_client, event)

    assert deliver(import_client, event) == 200  # Eventarc delivers at least once
    again = upload(campaign_id, listing)  # the marketer uploads the same list again

    assert job_for(admin_client, event) == first
    second = job_for(admin_client, again)
    assert second["job_id"] != first["job_id"]
    assert (second["assigned"], second["already_held"], second["unassigned"]) == (0, 4, 0)
    # Same codes for the same people, columns carried again: the email tool may send either.
    assert result_rows(storage_client, second) == result_rows(storage_client, first)
    assigned = [c for c in coupons_collection(db, campaign_id).stream() if c.get("assigned")]
    assert len(assigned) == 4
    jobs = admin_client.get(f"/v1/campaigns/{campaign_id}/jobs", headers=ADMIN).get_json()["jobs"]
    assert [j["job_id"] for j in jobs] == [second["job_id"], first["job_id"]]


def test_a_recipient_who_claimed_on_the_landing_page_keeps_that_one_code(
    upload: Upload,
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    storage_client: StorageClient,
    db: firestore.Client,
) -> None:
    """The campaign counts accounts (identity "uid"): the list names customer ids."""
    campaign_id = make_campaign(codes=5)
    claimed = claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth("shopper-1"))
    assert claimed.status_code == 201

    job = job_for(admin_client, upload(campaign_id, "recipient\nshopper-1\nshopper-2\n"))

    assert (job["assigned"], job["already_held"]) == (1, 1)
    codes = codes_of(result_rows(storage_client, job))
    assert codes["shopper-1"] == claimed.get_json()["code"]
    # And the other way round: the emailed recipient claiming on the page gets the same code.
    later = claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth("shopper-2"))
    assert later.status_code == 200
    assert later.get_json()["code"] == codes["shopper-2"]
    mine = claim_client.get(f"/v1/campaigns/{campaign_id}/claims/me", headers=auth("shopper-2"))
    assert [c["code"] for c in mine.get_json()["claims"]] == [codes["shopper-2"]]
    audit_ok(db, campaign_id)


def test_when_the_pool_runs_out_the_rest_are_unassigned_with_their_lines(
    upload: Upload,
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    storage_client: StorageClient,
    pump_events: Pump,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign(codes=3, low_stock_threshold=1)
    listing = "recipient\n" + "".join(f"r-{i}\n" for i in range(1, 7)) + "bad id\nr-7\n"

    job = job_for(admin_client, upload(campaign_id, listing))

    assert (job["assigned"], job["unassigned"], job["invalid"]) == (3, 4, 1)
    # Rows 2-4 got the codes (one batch, in line order); 5-7 and 9 did not; 8 is invalid.
    assert job["unassigned_lines"] == [{"first": 5, "last": 9}]
    assert [r[0] for r in result_rows(storage_client, job)[1:]] == ["r-1", "r-2", "r-3"]
    # Counters: one codes.assigned event for the batch, exact however often it is delivered;
    # the low-stock and sold-out announcements fire once.
    delivered = pump_events()
    assigned = [e for e in delivered if e["type"] == "codes.assigned"]
    assert [e["count"] for e in assigned] == [3]
    types = sorted(e["type"] for e in delivered + pump_events())
    assert types.count("campaign.low_stock") == 1
    assert types.count("campaign.sold_out") == 1
    stats = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ADMIN).get_json()["stats"]
    assert (stats["codes_total"], stats["claimed"], stats["remaining"]) == (3, 3, 0)
    # The landing page proves the pool empty itself and says so.
    late = claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth("late"))
    assert late.get_json()["error_code"] == "SOLD_OUT"
    audit_ok(db, campaign_id)


def failing_after(lines: int) -> Callable[..., Iterator[bytes]]:
    """object_chunks, failing after N lines as a dying instance would."""
    real = storage_objects.object_chunks

    def failing(*args: Any, **kwargs: Any) -> Iterator[bytes]:
        data = b"".join(real(*args, **kwargs))
        for number, line in enumerate(data.splitlines(keepends=True), start=1):
            if number > lines:
                raise ConnectionResetError("instance lost its connection")
            yield line

    return failing


def test_a_crashed_job_is_resumed_by_the_redelivered_event_with_exact_counts(
    upload: Upload,
    import_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    storage_client: StorageClient,
    pump_events: Pump,
    monkeypatch: pytest.MonkeyPatch,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign(codes=700)
    listing = "recipient,n\n" + "".join(f"c-{i},{i}\n" for i in range(600)) + "c-5,again\n"
    # One batch of 249 committed, the next being filled, then the instance dies.
    monkeypatch.setattr(storage_objects, "object_chunks", failing_after(400))

    event = upload(campaign_id, listing, status=500)  # failed: Eventarc will deliver it again
    crashed = job_for(admin_client, event)
    assert crashed["state"] == "running"
    held_before = sum(1 for _ in claims_collection(db, campaign_id).stream())
    assert held_before == 249

    monkeypatch.undo()
    assert deliver(import_client, event) == 200

    job = job_for(admin_client, event)
    assert job["state"] == "done"
    assert (job["rows_read"], job["assigned"], job["already_held"]) == (601, 600, 0)
    assert job["duplicates_in_file"] == 1
    assert job_store.get_job(db, job_id=job["job_id"]).attempts == 2
    rows = result_rows(storage_client, job)
    assert len(codes_of(rows)) == 600
    assert len({r[1] for r in rows[1:]}) == 600
    assert rows[-1][2] == "599"  # the whole file again, in order
    # Counters: each commit's event once, whichever attempt made it.
    pump_events()
    stats = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ADMIN).get_json()["stats"]
    assert stats["claimed"] == 600
    audit_ok(db, campaign_id)


def test_a_list_without_a_recipient_column_fails_with_the_reason(
    upload: Upload, admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=2)

    job = job_for(admin_client, upload(campaign_id, "email,name\na@x.example,A\n"))

    assert job["state"] == "failed"
    assert "must name a `recipient` column" in job["failure_reason"]
    assert job["result"] is None


def test_a_line_that_is_not_utf8_is_one_invalid_row_and_the_rest_get_codes(
    upload: Upload,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    storage_client: StorageClient,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign(codes=5)

    job = job_for(admin_client, upload(campaign_id, b"recipient\nu-1\nu-2\nu-\xff3\nu-4\n"))

    assert job["state"] == "done"
    assert (job["assigned"], job["invalid"]) == (3, 1)
    assert job["errors"][0]["line"] == 4
    assert "UTF-8" in job["errors"][0]["reason"]
    assert sorted(codes_of(result_rows(storage_client, job))) == ["u-1", "u-2", "u-4"]
    audit_ok(db, campaign_id)


def test_unknown_campaigns_and_result_files_are_acknowledged(
    upload: Upload, admin_client: FlaskClient, storage_client: StorageClient, db: firestore.Client
) -> None:
    campaign_id = f"ghost-{uuid.uuid4().hex[:6]}"

    job = job_for(admin_client, upload(campaign_id, "recipient\nx\n"))
    result = upload(campaign_id, "recipient,code\nx,ABC\n", name="list.result.csv")

    job_store.job_ref(db, job["job_id"]).delete()
    assert job["state"] == "failed"
    assert "does not exist" in job["failure_reason"]
    result_job = assignment_service.assignment_job_id(object_from_event(result["data"]))
    assert job_store.find_job(db, job_id=result_job) is None


def test_a_list_and_the_landing_page_share_the_pool_without_a_code_twice(
    upload: Upload,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    storage_client: StorageClient,
    db: firestore.Client,
) -> None:
    """Another instance's claimers take codes from the same pool while the job runs, some of
    them recipients of the list: every code goes to one person, every person holds one."""
    campaign_id = make_campaign(codes=600)
    recipients = [f"p-{i}" for i in range(500)]
    shoppers = [f"p-{i}" for i in range(400, 600)]  # 100 of them are on the list too
    engine = ClaimEngine(db=db, settings=get_settings())

    def claim(user: str) -> ClaimOutcome:
        for _ in range(300):  # as the landing page does: CONTENDED is safe to retry
            try:
                return claim_as(engine, campaign_id, user)
            except Contended:
                time.sleep(0.1)
        pytest.fail(f"{user} was answered CONTENDED for 30 s")

    with ThreadPoolExecutor(8) as claimers:
        answers = claimers.map(claim, shoppers)
        job = job_for(admin_client, upload(campaign_id, "recipient\n" + "\n".join(recipients)))
        claimed = {a.claim.user_id: a.claim.code for a in answers}

    assert job["assigned"] + job["already_held"] == 500
    assert job["unassigned"] == 0
    emailed = codes_of(result_rows(storage_client, job))
    for user in set(emailed) & set(claimed):
        assert emailed[user] == claimed[user]  # the one code they hold, whoever gave it
    report = audit_campaign(db, campaign_id=campaign_id)
    assert report.ok, report.violations
    assert report.assigned == report.claims == report.shoppers == 600


def test_a_walk_that_outlasts_its_deadline_is_resumed_above_the_last_code_read(
    make_campaign: MakeCampaign, db: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A million codes are read for longer than a stream's deadline: it is resumed, every
    unassigned code read once, in order. Here 400 codes read at 3 ms each outlast a 0.5 s
    deadline at least twice: more codes would only make the walk longer."""
    campaign_id = make_campaign(codes=400)
    monkeypatch.setattr(coupon_store, "STREAM_TIMEOUT_SECONDS", 0.5)
    calls = 0
    real_run_query = client_internals.gapic(db).run_query

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real_run_query(*args, **kwargs)

    monkeypatch.setattr(client_internals.gapic(db), "run_query", counted)
    read = []
    for candidate in coupon_store.stream_unassigned(db, campaign_id=campaign_id, limit=10_000):
        read.append(candidate)
        time.sleep(0.003)  # a slow reader: the batches are committing

    assert calls > 1
    assert len({c.coupon_id for c in read}) == len(read) == 400
    assert [c.random_float for c in read] == sorted(c.random_float for c in read)


def test_assigned_codes_are_final_claims_that_redeem_and_forged_events_are_never_counted(
    upload: Upload,
    admin_client: FlaskClient,
    usage_client: FlaskClient,
    make_campaign: MakeCampaign,
    storage_client: StorageClient,
    pump_events: Pump,
    db: firestore.Client,
) -> None:
    """On a campaign whose landing page holds codes for checkout, a list's codes are claimed
    for good (never released), redeem like any claim, and count once; a codes.assigned event
    that its commit's first claim does not back is acknowledged and never counted."""
    campaign_id = make_campaign(codes=6, hold_seconds=600)
    job = job_for(admin_client, upload(campaign_id, "recipient\nr-1\nr-2\n"))
    codes = codes_of(result_rows(storage_client, job))
    for coupon in (
        coupons_collection(db, campaign_id)
        .where(filter=FieldFilter("assigned", "==", True))
        .stream()
    ):
        assert (coupon.get("state"), coupon.get("expires_at")) == ("claimed", None)
    redeemed = admin_client.post(
        f"/v1/campaigns/{campaign_id}/redemptions",
        headers=ADMIN,
        json={"code": codes["r-1"], "order_id": "order-1"},
    )
    assert redeemed.status_code == 201
    # The commit's event as its first claim (line 2, r-1) backs it, not delivered yet.
    real = events.CodesAssigned(
        event_id=events.assigned_event_id(job["job_id"], 2),
        campaign_id=campaign_id,
        occurred_at=utcnow(),
        count=2,
        job_id=job["job_id"],
        claim_id=claim_id_for(identity_key(IdentityKind.UID, "r-1"), 0),
    )
    second_claim = claim_id_for(identity_key(IdentityKind.UID, "r-2"), 0)
    forged = [
        real.model_copy(update={"count": 5}),
        real.model_copy(update={"event_id": f"{real.event_id}-again"}),
        real.model_copy(update={"job_id": "asg-elsewhere", "event_id": "assigned.asg-elsewhere.2"}),
        real.model_copy(update={"claim_id": second_claim}),  # records no commit's count
        real.model_copy(update={"campaign_id": make_campaign()}),
    ]

    statuses = [deliver(usage_client, published_event(events.encode_event(e))) for e in forged]

    assert set(statuses) == {200}  # acknowledged: redelivering them could never help
    assert instance_services().counters.totals(campaign_id).claimed == 0
    assert [e["event_id"] for e in pump_events() if e["type"] == "codes.assigned"] == [
        real.event_id
    ]
    stats = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ADMIN).get_json()["stats"]
    counted = ("claimed", "held", "redeemed", "remaining")
    assert [stats[c] for c in counted] == [2, 0, 1, 4]
    audit_ok(db, campaign_id)
