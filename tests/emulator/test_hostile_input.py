"""Hostile input through the real functions-framework apps: every answer bounded, typed and in
the documented JSON shape (one regression test per finding of the hostile test; the CSV
findings are in test_import_codes.py and tests/unit/test_csv_bounds.py, the waiting room's in
test_waiting_room_api.py, forged events in test_usage_counters.py)."""

from __future__ import annotations

import io
import json
import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from shared.clock import utcnow
from shared.container import instance_services
from shared.http import entry_points
from shared.http.entry_points import Kind
from shared.http.requests import MAX_BODY_BYTES, MAX_PROBLEMS
from tests.support.api import ADMIN, auth, function_client
from tests.support.cloudevents import PUSH_KEYS, finalized_event, published_event
from tests.support.stack import BUCKET, MAIN, MakeCampaign

pytestmark = pytest.mark.emulator

# No error answer repeats a caller's input at length.
MAX_ERROR_BYTES = 1024


def assert_error(response: TestResponse, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.get_data()[:300]
    assert response.mimetype == "application/json"
    assert len(response.get_data()) < MAX_ERROR_BYTES
    body: dict[str, Any] = response.get_json()
    assert body["error_code"] == code
    assert isinstance(body["error_message"], str)
    return body


def window(**overrides: Any) -> dict[str, Any]:
    now = utcnow()
    return {
        "title": "Sale",
        "starts_at": (now - timedelta(minutes=1)).isoformat(),
        "ends_at": (now + timedelta(hours=1)).isoformat(),
        **overrides,
    }


# --- finding 1: body size limit, bounded error details ---------------------------------------


def test_a_huge_claim_body_is_413_without_being_read(
    claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=1)
    body = json.dumps({f"key{i}": 1 for i in range(300_000)})  # 3.3 MB, as found

    response = claim_client.post(
        f"/v1/campaigns/{campaign_id}/claims",
        data=body,
        content_type="application/json",
        headers=auth("big-body"),
    )

    assert_error(response, 413, "REQUEST_TOO_LARGE")


def test_a_streamed_body_without_length_is_cut_at_the_limit(admin_client: FlaskClient) -> None:
    # Chunked transfer: no Content-Length; the limit holds while reading.
    response = admin_client.post(
        "/v1/campaigns",
        input_stream=io.BytesIO(b" " * (4 * MAX_BODY_BYTES)),
        headers={**ADMIN, "Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        environ_overrides={"wsgi.input_terminated": True},
    )

    assert_error(response, 413, "REQUEST_TOO_LARGE")


def test_many_unknown_keys_get_a_short_answer_naming_a_few(
    claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=1)
    body = json.dumps({f"k{i:04d}": 1 for i in range(4_000)})
    assert len(body) < MAX_BODY_BYTES

    response = claim_client.post(
        f"/v1/campaigns/{campaign_id}/claims",
        data=body,
        content_type="application/json",
        headers=auth("many-keys"),
    )

    message = assert_error(response, 400, "REQUEST_VALIDATION_FAILED")["error_message"]
    assert message.count("Extra inputs are not permitted") == MAX_PROBLEMS
    assert f"(and {4_000 - MAX_PROBLEMS} more)" in message


# Every function main.py declares with @functions_framework.cloud_event, read where it is declared.
EVENT_FUNCTIONS = sorted(
    name for name, kind in entry_points.entry_points(Path(MAIN)).items() if kind is Kind.CLOUD_EVENT
)


def test_the_event_functions_are_read_from_main_py() -> None:
    assert {"count_usage", "import_codes", "deliver_webhooks"} <= set(EVENT_FUNCTIONS)


def delivery(function: str) -> dict[str, Any]:
    """A well-formed envelope of the kind `function` is triggered by."""
    if function == "import_codes":
        return finalized_event(bucket=BUCKET, name="imports/x/y.csv", generation=1)
    return published_event(b"{}")


def acknowledged(
    caplog: pytest.LogCaptureFixture, response: TestResponse, message: str
) -> logging.LogRecord:
    """The delivery was acknowledged (2xx, so Pub/Sub or Eventarc never redeliver it) and logged
    once as an error with `message`."""
    assert response.status_code == 204, response.get_data()[:200]
    (record,) = [r for r in caplog.records if r.getMessage() == message]
    assert record.levelno == logging.ERROR
    return record


@pytest.mark.parametrize("function", EVENT_FUNCTIONS)
def test_a_huge_event_delivery_is_acknowledged_unread(
    function: str, caplog: pytest.LogCaptureFixture
) -> None:
    envelope = delivery(function)
    envelope["padding"] = "x" * (2 * MAX_BODY_BYTES)

    with caplog.at_level(logging.ERROR):
        response = function_client(function).post(
            "/",
            data=json.dumps(envelope),
            content_type="application/cloudevents+json",
            headers=PUSH_KEYS.authorization(),
        )

    record = acknowledged(caplog, response, "event body over the size limit acknowledged unread")
    assert record.__dict__["limit_bytes"] == MAX_BODY_BYTES


@pytest.mark.parametrize("function", EVENT_FUNCTIONS)
@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("{", "application/cloudevents+json"),
        ('{"hello": "world"}', "application/json"),
        ("\x00\x01", "text/plain"),
        ("{}", "text/plain"),
    ],
)
def test_a_delivery_that_is_not_an_event_is_acknowledged(
    function: str, body: str, content_type: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Signed as the push subscription signs (the pushed functions check it; import_codes, which
    # Eventarc calls, ignores it).
    with caplog.at_level(logging.ERROR):
        response = function_client(function).post(
            "/", data=body, content_type=content_type, headers=PUSH_KEYS.authorization()
        )

    record = acknowledged(caplog, response, "undeliverable event acknowledged")
    assert record.__dict__["reason"].startswith("not a")


# --- finding 5: nesting, huge numbers, calendar edges, reserved ids --------------------------


def test_deeply_nested_json_is_400_quickly(admin_client: FlaskClient) -> None:
    nested = "[" * 30_000 + "]" * 30_000  # just under the size limit
    started = time.monotonic()

    response = admin_client.post(
        "/v1/campaigns", data=nested, content_type="application/json", headers=ADMIN
    )

    assert_error(response, 400, "REQUEST_VALIDATION_FAILED")
    assert time.monotonic() - started < 1.0
    deeper = '{"a":' * 50_000 + "1" + "}" * 50_000  # as found: over the size limit
    assert_error(
        admin_client.post(
            "/v1/campaigns", data=deeper, content_type="application/json", headers=ADMIN
        ),
        413,
        "REQUEST_TOO_LARGE",
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"low_stock_threshold": 1e20},
        {"low_stock_threshold": 10**20},
        {"starts_at": "0001-01-01T00:00:00+14:00"},
        {"ends_at": "9999-12-31T23:59:59-14:00"},
        {"ends_at": "9999-12-31T23:59:59Z"},
        {"admissions_per_second": 1e308},
    ],
)
def test_out_of_range_values_are_400_not_500(
    admin_client: FlaskClient, new_id: str, overrides: dict[str, Any]
) -> None:
    body = window(campaign_id=new_id, **overrides)

    response = admin_client.post("/v1/campaigns", json=body, headers=ADMIN)

    assert_error(response, 400, "REQUEST_VALIDATION_FAILED")


@pytest.mark.parametrize(
    "change",
    [{"starts_at": "0001-01-01T00:00:00+14:00"}, {"low_stock_threshold": 10**19}],
)
def test_out_of_range_updates_are_400_not_500(
    admin_client: FlaskClient, make_campaign: MakeCampaign, change: dict[str, Any]
) -> None:
    campaign_id = make_campaign()

    response = admin_client.patch(f"/v1/campaigns/{campaign_id}", json=change, headers=ADMIN)

    assert_error(response, 400, "REQUEST_VALIDATION_FAILED")


@pytest.mark.parametrize("job_id", ["__x__", "__.*__", "a" * 65, "%00"])
def test_reserved_or_malformed_job_ids_are_404(admin_client: FlaskClient, job_id: str) -> None:
    assert_error(admin_client.get(f"/v1/jobs/{job_id}", headers=ADMIN), 404, "JOB_NOT_FOUND")


# --- finding 6: JSON for every answer the functions give -------------------------------------


@pytest.mark.parametrize("path", ["/v1/campaigns/a%0Ab", "/robots.txt", "/favicon.ico", "/%0A"])
def test_paths_flask_cannot_route_get_json_404(claim_client: FlaskClient, path: str) -> None:
    assert_error(claim_client.get(path), 404, "NOT_FOUND")


def test_a_wrong_method_is_405_with_allow(claim_client: FlaskClient) -> None:
    response = claim_client.delete("/v1/campaigns/some-sale")

    assert_error(response, 405, "METHOD_NOT_ALLOWED")
    assert "GET" in response.headers["Allow"]


@pytest.mark.parametrize("function", ["count_usage", "import_codes"])
def test_event_functions_answer_json_too(
    usage_client: FlaskClient, import_client: FlaskClient, function: str
) -> None:
    client = usage_client if function == "count_usage" else import_client

    response = client.get("/", headers=PUSH_KEYS.authorization())

    assert_error(response, 405, "METHOD_NOT_ALLOWED")
    assert "POST" in response.headers["Allow"]


def test_a_broken_body_is_json_400(admin_client: FlaskClient) -> None:
    for body, content_type in [
        ("{", "application/json"),
        ("[1, 2]", "application/json"),
        ('{"title": "x"}', "text/plain"),
        (b"\xff\xfe", "application/json"),
    ]:
        response = admin_client.post(
            "/v1/campaigns", data=body, content_type=content_type, headers=ADMIN
        )
        assert_error(response, 400, "REQUEST_VALIDATION_FAILED")


def test_a_crash_in_an_event_function_is_json_500_so_pubsub_retries(
    usage_client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(event: object) -> None:
        raise RuntimeError("Firestore is down")

    monkeypatch.setattr(instance_services().usage_counter, "handle", broken)
    event = {
        "event_id": "claimed.x.y",
        "type": "coupon.claimed",
        "campaign_id": "x",
        "occurred_at": "2026-11-21T10:00:00Z",
        "coupon_id": "c",
        "user_id": "u",
        "claim_id": "y",
    }

    response = usage_client.post(
        "/",
        data=json.dumps(published_event(json.dumps(event).encode())),
        content_type="application/cloudevents+json",
        headers=PUSH_KEYS.authorization(),
    )

    body = assert_error(response, 500, "INTERNAL")
    assert "Firestore" not in body["error_message"]


# --- finding 8: strict types and safe text ---------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"max_per_user": "3"},
        {"max_per_user": True},
        {"max_per_user": 2.0},
        {"starts_at": 1_700_000_000},
        {"waiting_room_enabled": "yes"},
        {"title": "Nul\x00Sale"},
        {"title": "Line\nbreak"},
        {"title": "Tab\there"},
        {"title": "Bidi \u202egnp.exe"},
        {"title": "Isolate \u2066x\u2069"},
    ],
)
def test_coerced_types_and_unsafe_titles_are_refused(
    admin_client: FlaskClient, new_id: str, overrides: dict[str, Any]
) -> None:
    response = admin_client.post(
        "/v1/campaigns", json=window(campaign_id=new_id, **overrides), headers=ADMIN
    )

    assert_error(response, 400, "REQUEST_VALIDATION_FAILED")


def test_rfc3339_times_and_real_types_are_accepted(admin_client: FlaskClient, new_id: str) -> None:
    body = window(campaign_id=new_id, title="Été ☀ sale", max_per_user=3, low_stock_threshold=5)
    body["starts_at"] = "2026-11-21T10:00:00+01:00"
    body["ends_at"] = "2099-12-31T23:59:59.999Z"

    response = admin_client.post("/v1/campaigns", json=body, headers=ADMIN)

    assert response.status_code == 201
    assert response.get_json()["starts_at"] == "2026-11-21T09:00:00.000Z"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("codes:generate", {"count": True}),
        ("codes:generate", {"count": "5"}),
        ("codes:generate", {"count": 5.0}),
        ("reconcile", {"repair": "yes"}),
        ("reconcile", {"repair": 1}),
    ],
)
def test_coerced_types_are_refused_on_every_body(
    admin_client: FlaskClient, make_campaign: MakeCampaign, path: str, body: dict[str, Any]
) -> None:
    campaign_id = make_campaign()

    response = admin_client.post(f"/v1/campaigns/{campaign_id}/{path}", json=body, headers=ADMIN)

    assert_error(response, 400, "REQUEST_VALIDATION_FAILED")


def test_query_parameters_are_strict_too(admin_client: FlaskClient) -> None:
    for query in ("status=nope", "status=active&status=ended", "unknown=1"):
        assert_error(
            admin_client.get(f"/v1/campaigns?{query}", headers=ADMIN),
            400,
            "REQUEST_VALIDATION_FAILED",
        )


# --- finding 9: a holder asking again on a paused or ended campaign -------------------------


@pytest.mark.parametrize("state", ["paused", "ended"])
def test_a_holder_gets_the_code_held_on_a_paused_or_ended_campaign(
    claim_client: FlaskClient, admin_client: FlaskClient, make_campaign: MakeCampaign, state: str
) -> None:
    campaign_id = make_campaign(codes=3)
    path = f"/v1/campaigns/{campaign_id}/claims"
    first = claim_client.post(path, headers={**auth("holder"), "Idempotency-Key": "k-1"})
    change = (
        {"paused": True}
        if state == "paused"
        else {"ends_at": (utcnow() - timedelta(seconds=1)).isoformat()}
    )
    updated = admin_client.patch(f"/v1/campaigns/{campaign_id}", json=change, headers=ADMIN)
    assert updated.status_code == 200

    without_key = claim_client.post(path, headers=auth("holder"))
    new_key = claim_client.post(path, headers={**auth("holder"), "Idempotency-Key": "k-2"})
    same_key = claim_client.post(path, headers={**auth("holder"), "Idempotency-Key": "k-1"})
    stranger = claim_client.post(path, headers=auth("stranger"))

    code = first.get_json()["code"]
    assert first.status_code == 201
    assert (without_key.status_code, without_key.get_json()["code"]) == (200, code)
    assert (new_key.status_code, new_key.get_json()["code"]) == (200, code)
    assert (same_key.status_code, same_key.get_json()["code"]) == (201, code)  # a replay
    assert_error(stranger, 409, "CAMPAIGN_NOT_ACTIVE")


# --- finding 12: no echo of tokens or long ids ----------------------------------------------


def test_errors_never_echo_long_ids(claim_client: FlaskClient, admin_client: FlaskClient) -> None:
    long_id = "x" * 5_000

    for response, code in [
        (claim_client.get(f"/v1/campaigns/{long_id}"), "CAMPAIGN_NOT_FOUND"),
        (admin_client.get(f"/v1/jobs/{long_id}", headers=ADMIN), "JOB_NOT_FOUND"),
        (claim_client.get(f"/v1/{long_id}"), "NOT_FOUND"),
    ]:
        message = assert_error(response, 404, code)["error_message"]
        assert len(message) < 120
        assert "x" * 100 not in message


def test_errors_never_echo_token_fragments(claim_client: FlaskClient) -> None:
    secretish = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJTRUNSRVQtUEFZTE9BRCJ9.c2lnbmF0dXJlLXBhcnQ"

    for header in (f"Bearer {secretish}", f"Bearer {'A' * 5000}", "Bearer a.b.c"):
        response = claim_client.post(
            "/v1/campaigns/some-sale/claims", headers={"Authorization": header}
        )
        message = assert_error(response, 401, "UNAUTHENTICATED")["error_message"]
        for fragment in [*secretish.split("."), "AAAA", "a.b.c"]:
            assert fragment not in message
