"""Codes as cashiers type them, through HTTP on the emulators: any letter case (and, with a
pattern, spaces and dashes anywhere), a campaign's recorded pattern refusing codes that cannot be
one of its codes before any coupon is read, codes of other campaigns answering as unknown ones,
and imports reporting codes that differ only in case (shared/codes.py, docs/codes.md)."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore
from google.cloud.storage import Client as StorageClient

from devkit.audit import audit_campaign
from devkit.firestore_rpcs import RpcCounter
from shared.clock import utcnow
from shared.codes import CodeFormat
from shared.container import instance_services
from shared.coupons.store import coupon_fields
from shared.gcp.firestore import campaign_ref, coupons_collection
from shared.http.shopify import SIGNATURE_HEADER, TOPIC_HEADER, signature
from shared.intake import service as import_service
from tests.support.api import ADMIN, REDEEMER, auth
from tests.support.cloudevents import deliver, finalized_event
from tests.support.stack import BUCKET, MakeCampaign

pytestmark = pytest.mark.emulator

SALE = {"pattern": "SALE-####-####", "check": "luhn_mod_n"}


def lookup(client: FlaskClient, campaign_id: str, code: str) -> Any:
    return client.get(f"/v1/campaigns/{campaign_id}/codes/{code}", headers=REDEEMER)


def redeem(client: FlaskClient, campaign_id: str, code: str, order_id: str) -> Any:
    return client.post(
        f"/v1/campaigns/{campaign_id}/redemptions",
        json={"code": code, "order_id": order_id},
        headers=REDEEMER,
    )


def claim(client: FlaskClient, campaign_id: str, user: str) -> dict[str, Any]:
    response = client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth(user))
    assert response.status_code == 201
    body: dict[str, Any] = response.get_json()
    return body


def test_a_code_is_found_and_redeemed_in_any_letter_case(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign(codes=["SPRING-93630D12"])
    claim(claim_client, campaign_id, "cara")

    found = lookup(admin_client, campaign_id, "spring-93630d12")
    redeemed = redeem(admin_client, campaign_id, " Spring-93630d12 ", "order-1")
    again = redeem(admin_client, campaign_id, "SPRING-93630D12", "order-1")

    assert found.status_code == 200
    assert (found.get_json()["code"], found.get_json()["state"]) == ("SPRING-93630D12", "claimed")
    assert redeemed.status_code == 201
    assert redeemed.get_json()["code"] == "SPRING-93630D12"
    assert again.status_code == 200
    assert lookup(admin_client, campaign_id, "spring-93630d12").get_json()["state"] == "redeemed"
    assert audit_campaign(db, campaign_id=campaign_id).ok


def test_a_shopify_order_redeems_a_code_typed_in_another_case(
    claim_client: FlaskClient, admin_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=["SUMMER-7Q2K"])
    claim(claim_client, campaign_id, "sol")
    body = json.dumps({"id": 91, "discount_codes": [{"code": "summer-7q2k"}]}).encode()
    key = instance_services().settings.shopify_webhook_key
    assert key is not None

    response = admin_client.post(
        "/v1/webhooks/shopify/orders",
        data=body,
        headers={
            SIGNATURE_HEADER: signature(body, key),
            TOPIC_HEADER: "orders/create",
            "Content-Type": "application/json",
        },
    )

    assert response.status_code == 200
    assert response.get_json()["results"] == [
        {"code": "summer-7q2k", "campaign_id": campaign_id, "outcome": "redeemed"}
    ]


def test_a_code_imported_before_canonical_ids_is_still_found_as_it_was_spelt(
    admin_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    """Such a coupon's id hashes the code exactly as imported (docs/codes.md): its exact
    spelling finds it; other spellings are unknown codes until it is imported again."""
    campaign_id = make_campaign()
    legacy = "mixed-Case-7"
    legacy_id = hashlib.sha256(legacy.encode()).hexdigest()[:40]
    coupons_collection(db, campaign_id).document(legacy_id).create(
        coupon_fields(code=legacy, now=utcnow(), job_id=None, coupon_id=legacy_id)
    )

    exact = lookup(admin_client, campaign_id, legacy)
    other = lookup(admin_client, campaign_id, "MIXED-CASE-7")

    assert exact.status_code == 200
    assert exact.get_json()["code"] == legacy
    assert other.status_code == 404


# --- patterns ---------------------------------------------------------------------------------
def generate(
    admin_client: FlaskClient,
    import_client: FlaskClient,
    storage_client: StorageClient,
    cleanup: list[Callable[[], object]],
    campaign_id: str,
    spec: dict[str, Any],
) -> dict[str, Any]:
    """Generate codes through the API and deliver the objects' events as Cloud Storage would;
    the finished job."""
    prefixes = (f"generate/{campaign_id}/", f"imports/{campaign_id}/")
    cleanup.append(
        lambda: [
            blob.delete() for p in prefixes for blob in storage_client.list_blobs(BUCKET, prefix=p)
        ]
    )
    accepted = admin_client.post(
        f"/v1/campaigns/{campaign_id}/codes:generate", json=spec, headers=ADMIN
    )
    assert accepted.status_code == 202, accepted.get_json()
    seen: set[str] = set()
    for _ in range(3):  # the request, then each round's CSV
        for prefix in prefixes:
            for blob in storage_client.list_blobs(BUCKET, prefix=prefix):
                if (key := f"{blob.name}#{blob.generation}") not in seen:
                    seen.add(key)
                    event = finalized_event(
                        bucket=BUCKET,
                        name=blob.name,
                        generation=blob.generation,
                        metadata=blob.metadata,
                    )
                    assert deliver(import_client, event) == 200
    job: dict[str, Any] = admin_client.get(
        f"/v1/jobs/{accepted.get_json()['job_id']}", headers=ADMIN
    ).get_json()
    assert job["state"] == "done"
    return job


def stored_codes(db: firestore.Client, campaign_id: str) -> list[str]:
    return sorted((s.to_dict() or {})["code"] for s in coupons_collection(db, campaign_id).stream())


def test_generated_codes_follow_the_pattern_and_the_campaign_refuses_misfits_unread(
    admin_client: FlaskClient,
    import_client: FlaskClient,
    storage_client: StorageClient,
    claim_client: FlaskClient,
    make_campaign: MakeCampaign,
    cleanup: list[Callable[[], object]],
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign()
    generate(
        admin_client, import_client, storage_client, cleanup, campaign_id, {"count": 40, **SALE}
    )
    codes = stored_codes(db, campaign_id)
    code = claim(claim_client, campaign_id, "gus")["code"]
    typed = " ".join(code.lower().replace("-", ""))  # "s a l e 7 k 2 ..."
    typo = code[:5] + ("B" if code[5] != "B" else "C") + code[6:]

    with RpcCounter(db) as counter:
        found = lookup(admin_client, campaign_id, typed)
        after_lookup = counter.snapshot()
        malformed = lookup(admin_client, campaign_id, typo)
        after_malformed = counter.snapshot()
        refused = redeem(admin_client, campaign_id, "SALE-0000-0000", "order-1")
        redeemed = redeem(admin_client, campaign_id, typed, "order-1")

    assert len(codes) == 40
    assert all(re.fullmatch(r"SALE-[A-Z2-9]{4}-[A-Z2-9]{4}", c) for c in codes)
    assert all(CodeFormat.model_validate(SALE).matches(c) for c in codes)
    shown = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ADMIN).get_json()
    assert shown["code_format"] == {**SALE, "alphabet": "ABCDEFGHJKMNPQRSTUVWXYZ23456789"}
    assert found.status_code == 200
    assert found.get_json()["code"] == code
    assert malformed.status_code == 400
    assert malformed.get_json()["error_code"] == "CODE_MALFORMED"
    assert refused.status_code == 400
    assert refused.get_json()["error_code"] == "CODE_MALFORMED"
    assert redeemed.status_code == 201
    # A look-up reads the campaign (cached for CODEDROP_CAMPAIGN_CACHE_SECONDS, 0 in tests) and
    # the coupon; a malformed code, the campaign only.
    gets = "batch_get_documents"
    assert after_lookup.reads.get(gets) == 2
    assert after_malformed.reads.get(gets, 0) - after_lookup.reads.get(gets, 0) == 1


def test_an_upload_or_another_pattern_makes_the_campaign_mixed_for_good(
    admin_client: FlaskClient,
    import_client: FlaskClient,
    storage_client: StorageClient,
    make_campaign: MakeCampaign,
    cleanup: list[Callable[[], object]],
    db: firestore.Client,
) -> None:
    patterned = make_campaign()
    uploaded = make_campaign(codes=["FREE-FORM-1"])
    gen = (admin_client, import_client, storage_client, cleanup)
    generate(*gen, patterned, {"count": 5, **SALE})
    generate(*gen, patterned, {"count": 5, **SALE})  # the same pattern again: still one
    assert lookup(admin_client, patterned, "nope").status_code == 400
    generate(*gen, uploaded, {"count": 5, **SALE})  # codes were there before
    generate(*gen, patterned, {"count": 5, "pattern": "XMAS-######"})

    for campaign_id in (patterned, uploaded):
        data = campaign_ref(db, campaign_id).get().to_dict() or {}
        assert (data["code_format"], data["codes_mixed"]) == (None, True)
        assert lookup(admin_client, campaign_id, "nope").status_code == 404
    assert lookup(admin_client, uploaded, "free-form-1").status_code == 200


# --- guessing ---------------------------------------------------------------------------------
def test_another_campaigns_code_answers_exactly_as_an_unknown_code(
    admin_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    mine = make_campaign(codes=["MINE-AAAA-1"])
    theirs = make_campaign(codes=["THEM-BBBB-2"])
    assert lookup(admin_client, theirs, "THEM-BBBB-2").status_code == 200

    def probe(code: str) -> tuple[int, dict[str, Any], dict[str, int]]:
        with RpcCounter(db) as counter:
            for attempt in (lookup, lambda c, i, x: redeem(c, i, x, "order-1")):
                response = attempt(admin_client, mine, code)
        counts = counter.snapshot()
        body = response.get_json()
        return (
            response.status_code,
            {**body, "error_message": body["error_message"].replace(code, "<code>")},
            {"gets": counts.reads.get("batch_get_documents", 0)},
        )

    theirs_answer = probe("THEM-BBBB-2")
    unknown_answer = probe("THEM-BBBB-3")
    # The same answer for the same reads: nothing for a clock to tell apart either.
    assert theirs_answer == unknown_answer
    assert theirs_answer[0] == 404
    assert theirs_answer[1]["error_code"] == "CODE_NOT_FOUND"


# --- imports ----------------------------------------------------------------------------------
def test_an_import_reports_codes_that_differ_only_in_case_with_their_lines(
    storage_client: StorageClient,
    import_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    cleanup: list[Callable[[], object]],
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign(codes=["KEEP-ME-1"])
    name = f"imports/{campaign_id}/{uuid.uuid4().hex[:8]}.csv"
    blob = storage_client.bucket(BUCKET).blob(name)
    cleanup.append(lambda: blob.delete() if blob.exists() else None)
    blob.upload_from_string(
        "code\nAbc-1\nNEW-2\nabc-1\nABC-1\nkeep-me-1\nNEW-2\n", content_type="text/csv"
    )
    blob.reload()
    event = finalized_event(bucket=BUCKET, name=name, generation=blob.generation)
    assert deliver(import_client, event) == 200
    job_id = import_service.import_job_id(import_service.object_from_event(event["data"]))

    job = admin_client.get(f"/v1/jobs/{job_id}", headers=ADMIN).get_json()

    assert (job["imported"], job["duplicates_in_file"], job["duplicates_in_campaign"]) == (2, 3, 1)
    assert job["errors"] == [
        {
            "line": 4,
            "reason": "the same code as 'Abc-1' on line 2 but for letter case",
            "value": "abc-1",
        },
        {
            "line": 5,
            "reason": "the same code as 'Abc-1' on line 2 but for letter case",
            "value": "ABC-1",
        },
        {
            "line": 6,
            "reason": "the same code as 'KEEP-ME-1' already in the campaign but for letter case",
            "value": "keep-me-1",
        },
    ]
    assert stored_codes(db, campaign_id) == ["Abc-1", "KEEP-ME-1", "NEW-2"]
