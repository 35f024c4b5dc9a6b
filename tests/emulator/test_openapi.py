"""The OpenAPI 3.1 documents of claim_api and admin_api: served publicly, complete (every route,
every documented error), and true: live answers of a whole sale validate against them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore
from werkzeug.test import TestResponse

from devkit.cleanup import delete_tree
from shared.clock import utcnow
from shared.container import instance_services
from shared.gcp.firestore import campaign_ref
from shared.http import admin, claim_api
from shared.http.access import Access
from shared.http.routing import Router
from shared.http.shopify import signature
from shared.intake import jobs as job_store
from tests.support.api import ADMIN, REDEEMER, auth
from tests.support.stack import MakeCampaign

try:
    import schemathesis
    from schemathesis.specs.openapi.schemas import OpenApiSchema
except ImportError as exc:  # a missing dependency fails the run, it never skips it
    raise RuntimeError("schemathesis is missing: install the project's dev dependencies") from exc

pytestmark = pytest.mark.emulator

APIS = {"claim_api": claim_api.router, "admin_api": admin.router}


def _client(api: str, claim_client: FlaskClient, admin_client: FlaskClient) -> FlaskClient:
    return claim_client if api == "claim_api" else admin_client


@pytest.fixture(scope="module")
def documents(claim_client: FlaskClient, admin_client: FlaskClient) -> dict[str, dict[str, Any]]:
    served = {}
    for api in APIS:
        response = _client(api, claim_client, admin_client).get("/openapi.json")
        assert response.status_code == 200
        served[api] = response.get_json()
    return served


@pytest.fixture(scope="module")
def schemas(documents: dict[str, dict[str, Any]]) -> dict[str, OpenApiSchema]:
    return {api: schemathesis.openapi.from_dict(doc) for api, doc in documents.items()}


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


@pytest.mark.parametrize("api", APIS)
def test_the_document_is_openapi_3_1_with_every_route(
    api: str, documents: dict[str, dict[str, Any]], schemas: dict[str, OpenApiSchema]
) -> None:
    document, router = documents[api], APIS[api]

    assert document["openapi"] == "3.1.0"
    assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    schemas[api].validate()  # the OpenAPI 3.1 meta-schema
    documented = {
        (method.upper(), path) for path, item in document["paths"].items() for method in item
    }
    served = {
        (method, re.sub(r"<([a-z_]+)>", r"{\1}", route.rule))
        for route in router.routes()
        for method in route.methods
    }
    assert documented == served
    defined = set(document["components"]["schemas"])
    assert {ref.rsplit("/", 1)[-1] for ref in _refs(document)} <= defined


@pytest.mark.parametrize("api", APIS)
def test_every_operation_documents_its_errors_and_security(
    api: str, documents: dict[str, dict[str, Any]]
) -> None:
    router: Router = APIS[api]
    for route in router.routes():
        path = re.sub(r"<([a-z_]+)>", r"{\1}", route.rule)
        for method in route.methods:
            operation = documents[api]["paths"][path][method.lower()]
            statuses = set(operation["responses"])
            assert "413" in statuses  # any request may be too large
            if route.access is Access.PUBLIC:
                assert operation["security"] == []
            elif route.access is Access.SHOPIFY_WEBHOOK:
                assert operation["security"] == [{"shopifyHmac": []}]
                assert "401" in statuses
            else:
                assert operation["security"] == [{"bearerAuth": []}]
                assert "401" in statuses
            if route.access in (Access.ADMIN, Access.REDEEMER):
                assert "403" in statuses
            if route.body is not None:
                assert "400" in statuses
                assert "requestBody" in operation
            for status, answer in operation["responses"].items():
                if int(status) >= 400:
                    schema = answer["content"]["application/json"]["schema"]
                    assert schema["allOf"][0]["$ref"].endswith(("ErrorBody", "Answer"))


def test_a_whole_sale_answers_as_documented(
    documents: dict[str, dict[str, Any]],
    schemas: dict[str, OpenApiSchema],
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    cleanup: list[Callable[[], object]],
) -> None:
    """Every answer of a sale, success and error, validated against the served documents."""
    answers: list[tuple[str, str, str, TestResponse]] = []

    def call(api: str, method: str, path: str, template: str, **kwargs: Any) -> TestResponse:
        client = _client(api, claim_client, admin_client)
        response = client.open(path, method=method, **kwargs)
        answers.append((api, method, template, response))
        return response

    now = utcnow()
    window = {
        "starts_at": (now - timedelta(minutes=1)).isoformat(),
        "ends_at": (now + timedelta(hours=1)).isoformat(),
    }
    campaign_id = make_campaign(codes=2, low_stock_threshold=1)
    full = "/v1/campaigns/{campaign_id}"
    one = f"/v1/campaigns/{campaign_id}"
    claims = f"{one}/claims"

    # Shoppers.
    call("claim_api", "GET", one, full)
    call("claim_api", "GET", "/v1/campaigns/nope", full)
    for user in ("ann", "ann", "bob", "cat"):  # 201, 200 (held), 201, 410 (sold out)
        call("claim_api", "POST", claims, full + "/claims", headers=auth(user))
    call("claim_api", "POST", claims, full + "/claims")  # 401
    call("claim_api", "POST", claims, full + "/claims", headers=auth("x"), json={"bad": 1})
    call("claim_api", "GET", f"{claims}/me", full + "/claims/me", headers=auth("ann"))
    call("claim_api", "GET", f"{claims}/me", full + "/claims/me", headers=auth("zed"))
    big = b"{" + b" " * 70_000 + b"}"
    call("claim_api", "POST", claims, full + "/claims", headers=auth("x"), data=big)
    # Operators.
    other = f"{campaign_id}-b"
    cleanup.append(lambda: delete_tree(db, campaign_ref(db, other)))
    body = {"campaign_id": other, "title": "B", **window}
    created = call("admin_api", "POST", "/v1/campaigns", "/v1/campaigns", headers=ADMIN, json=body)
    assert created.status_code == 201
    call("admin_api", "POST", "/v1/campaigns", "/v1/campaigns", headers=ADMIN, json=body)  # 409
    call("admin_api", "POST", "/v1/campaigns", "/v1/campaigns", headers=ADMIN, json={})
    call("admin_api", "GET", "/v1/campaigns?status=active", "/v1/campaigns", headers=ADMIN)
    call("admin_api", "GET", one, full, headers=ADMIN)
    call("admin_api", "GET", one, full, headers=auth("shopper"))  # 403
    call("admin_api", "PATCH", one, full, headers=ADMIN, json={"paused": True})
    call("claim_api", "POST", claims, full + "/claims", headers=auth("dan"))  # 409
    generate = f"{one}/codes:generate"
    gen = call(
        "admin_api", "POST", generate, full + "/codes:generate", headers=ADMIN, json={"count": 3}
    )
    job = gen.get_json()["job_id"]
    cleanup.append(lambda: job_store.job_ref(db, job).delete())
    call("admin_api", "GET", f"/v1/jobs/{job}", "/v1/jobs/{job_id}", headers=ADMIN)
    call("admin_api", "GET", "/v1/jobs/__x__", "/v1/jobs/{job_id}", headers=ADMIN)
    call("admin_api", "GET", f"{one}/jobs", full + "/jobs", headers=ADMIN)
    call("admin_api", "GET", f"{one}/report?granularity=day", full + "/report", headers=ADMIN)
    call("admin_api", "GET", f"{one}/report?granularity=x", full + "/report", headers=ADMIN)
    call("admin_api", "POST", f"{one}/reconcile", full + "/reconcile", headers=ADMIN, json={})
    # A checkout, and Shopify.
    code = claim_client.get(f"{claims}/me", headers=auth("ann")).get_json()["claims"][0]["code"]
    codes, redemptions = full + "/codes/{code}", full + "/redemptions"
    call("admin_api", "GET", f"{one}/codes/{code}", codes, headers=REDEEMER)
    call("admin_api", "GET", f"{one}/codes/NOPE", codes, headers=REDEEMER)  # 404
    call("admin_api", "GET", f"{one}/codes/{code}", codes, headers=auth("ann"))  # 403
    for order in ("o-1", "o-1", "o-2"):  # 201, 200, 409
        redeem = {"code": code, "order_id": order}
        call("admin_api", "POST", f"{one}/redemptions", redemptions, headers=REDEEMER, json=redeem)
    payload = json.dumps({"id": 7, "discount_codes": [{"code": code}]}).encode()
    key = instance_services().settings.shopify_webhook_key
    assert key is not None
    shopify = {"X-Shopify-Hmac-Sha256": signature(payload, key), "Content-Type": "application/json"}
    webhook = "/v1/webhooks/shopify/orders"
    call("admin_api", "POST", webhook, webhook, headers=shopify, data=payload)  # 200
    call("admin_api", "POST", webhook, webhook, data=payload)  # 401

    statuses = set()
    for api, method, template, response in answers:
        documented = documents[api]["paths"][template][method.lower()]["responses"]
        assert str(response.status_code) in documented, (method, template, response.status_code)
        schemas[api][template][method].validate_response(response)  # the body, by its status
        statuses.add(response.status_code)
    assert {200, 201, 202, 400, 401, 403, 404, 409, 410, 413} <= statuses
