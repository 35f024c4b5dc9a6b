"""firestore.indexes.json against production's rules: what it serves, what it exempts.

The suite also records every query and write the code sends while it runs and checks them with
the same rules at the end of the session (tests/conftest.py, pytest_sessionfinish).
"""

from __future__ import annotations

import json

from google.auth.credentials import AnonymousCredentials
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.firestore_v1.client import Client

from devkit.firestore_indexes import IndexConfig, QueryShape, Recorder, shape_of
from shared.gcp import client_internals
from tests.conftest import HOT_COLLECTIONS, production_index_problems
from tests.support.stack import INDEXES


def _config() -> IndexConfig:
    return IndexConfig.load(INDEXES)


def _shape(query: object) -> QueryShape:
    return shape_of(client_internals.structured_query(query))  # type: ignore[arg-type]


def _client() -> Client:
    # Queries are only built here, never sent: anonymous credentials need no environment.
    return Client(project="demo-unit", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]


def test_the_file_is_valid_json_with_indexes_and_overrides() -> None:
    data = json.loads(INDEXES.read_text())
    assert {"indexes", "fieldOverrides"} <= set(data)
    # Exemptions, except the two collection-group indexes the checkout half queries across
    # campaigns; neither indexes a value that grows in write order (shared/coupons/store.py).
    enabling = {o["fieldPath"]: o["indexes"] for o in data["fieldOverrides"] if o["indexes"]}
    group_ascending = [{"order": "ASCENDING", "queryScope": "COLLECTION_GROUP"}]
    assert enabling == {"code_key": group_ascending, "expires_bucket": group_ascending}


def test_the_checkout_queries_across_campaigns_are_served_only_as_collection_groups() -> None:
    client = _client()
    expired = (
        client.collection_group("coupons")
        .where(filter=FieldFilter("expires_bucket", ">=", "a:"))
        .where(filter=FieldFilter("expires_bucket", "<=", "a:20261201120000"))
        .order_by("expires_bucket")
    )
    code = client.collection_group("coupons").where(filter=FieldFilter("code_key", "==", "ab"))
    one_campaign = client.collection("campaigns").document("c").collection("coupons")
    assert _config().serves(_shape(expired))
    assert _config().serves(_shape(code))
    # Their collection-scoped indexes are switched off: nothing queries one campaign by them.
    assert not _config().serves(_shape(one_campaign.order_by("expires_bucket")))
    assert not _config().serves(
        _shape(one_campaign.where(filter=FieldFilter("code_key", "==", "ab")))
    )
    # A collection-group query on a field without such an override is refused.
    assert not _config().serves(
        _shape(client.collection_group("coupons").where(filter=FieldFilter("state", "==", "held")))
    )


def test_the_claim_range_query_and_its_sold_out_proof_are_served() -> None:
    coupons = _client().collection("campaigns").document("c").collection("coupons")
    ranged = (
        coupons.where(filter=FieldFilter("assigned", "==", False))
        .where(filter=FieldFilter("random_float", ">", 0.1))
        .where(filter=FieldFilter("random_float", "<", 0.2))
        .order_by("random_float")
    )
    proof = coupons.where(filter=FieldFilter("assigned", "==", False)).order_by("random_float")
    assert _config().serves(_shape(ranged))
    assert _config().serves(_shape(proof))


def test_the_jobs_listing_is_served_newest_first_only() -> None:
    jobs = _client().collection("jobs").where(filter=FieldFilter("campaign_id", "==", "c"))
    assert _config().serves(_shape(jobs.order_by("created_at", direction="DESCENDING")))
    assert not _config().serves(_shape(jobs.order_by("created_at")))


def test_a_query_needing_a_missing_composite_or_an_exempt_field_is_refused() -> None:
    coupons = _client().collection("campaigns").document("c").collection("coupons")
    two_fields = coupons.where(filter=FieldFilter("assigned", "==", True)).order_by("code")
    exempt = coupons.order_by("created_at")
    assert not _config().serves(_shape(two_fields))
    assert not _config().serves(_shape(exempt))


def test_an_indexed_field_written_at_sale_rate_that_no_query_needs_is_a_problem() -> None:
    recorder = Recorder()
    recorder.written |= {("claims", "claimed_at"), ("claims", "shiny_new_timestamp")}
    problems = production_index_problems(recorder, _config())
    assert problems == [
        "claims.shiny_new_timestamp is written at sale or import rate, indexed, and no query"
        " needs it: exempt it in firestore.indexes.json (fieldOverrides)"
    ]
    assert "claims" in HOT_COLLECTIONS
