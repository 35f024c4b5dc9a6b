"""The OpenAPI 3.1 document of one API, generated from its router: every route's parameters,
body, answers and documented errors, with the pydantic models as components. Served at
`GET /openapi.json`; the tests validate live answers against it and fuzz the API with it."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import flask
from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from shared import errors
from shared.claims.models import OrderId
from shared.http.access import NEEDS_TOKEN, Access
from shared.http.requests import MAX_BODY_BYTES
from shared.http.responses import ErrorBody, json_response
from shared.http.routing import Call, RouteInfo, Router
from shared.http.shopify import SIGNATURE_HEADER
from shared.intake.csv_rows import MAX_CODE_LENGTH
from shared.types import CampaignId, FirebaseUid, JobId

OPENAPI_VERSION = "3.1.0"
REF = "#/components/schemas/{model}"
BEARER = "bearerAuth"
SHOPIFY = "shopifyHmac"

# Path parameters by name (every rule names them the same way).
_PATH_PARAMETERS: dict[str, dict[str, Any]] = {
    "campaign_id": TypeAdapter(CampaignId).json_schema(),
    "job_id": TypeAdapter(JobId).json_schema(),
    "uid": TypeAdapter(FirebaseUid).json_schema(),
    "code": {"type": "string", "minLength": 1, "maxLength": MAX_CODE_LENGTH},
    "order_id": TypeAdapter(OrderId).json_schema(),
}
_RULE_PARAMETER = re.compile(r"<(?:[a-z_]+:)?([a-z_]+)>")


def _path(rule: str) -> str:
    return _RULE_PARAMETER.sub(r"{\1}", rule)


def _models(routes: list[RouteInfo]) -> list[tuple[type[BaseModel], JsonSchemaMode]]:
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [(ErrorBody, "serialization")]
    for route in routes:
        for model in (route.body, route.query):
            if model is not None:
                wanted.append((model, "validation"))
        wanted.extend((m, "serialization") for m in route.responses.values() if m is not None)
        wanted.extend((m, "serialization") for m in route.error_bodies.values())
    return list(dict.fromkeys(wanted))


def _error_schema(
    classes: list[type[errors.CodedropError]], refs: Mapping[Any, dict[str, Any]], route: RouteInfo
) -> dict[str, Any]:
    models = {route.error_bodies.get(cls, ErrorBody) for cls in classes}
    base = refs[(models.pop() if len(models) == 1 else ErrorBody, "serialization")]
    codes = sorted({cls.error_code for cls in classes})
    return {"allOf": [base, {"properties": {"error_code": {"enum": codes}}}]}


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A query parameter is a string or absent, never null: drop pydantic's null option."""
    options = [o for o in schema.get("anyOf", []) if o.get("type") != "null"]
    if len(options) != 1:
        return schema
    rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
    return {**rest, **options[0]}


def _parameters(
    route: RouteInfo, refs: Mapping[Any, dict[str, Any]], defs: dict[str, Any]
) -> list[dict[str, Any]]:
    parameters: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": _PATH_PARAMETERS.get(name, {"type": "string"}),
        }
        for name in _RULE_PARAMETER.findall(route.rule)
    ]
    if route.query is not None:
        # The query model's own schema lives in the components; its fields become parameters.
        schema = defs[refs[(route.query, "validation")]["$ref"].rsplit("/", 1)[-1]]
        required = set(schema.get("required", []))
        for name, field_schema in schema.get("properties", {}).items():
            field_schema = _not_null(field_schema)
            parameters.append(
                {"name": name, "in": "query", "required": name in required, "schema": field_schema}
            )
    for name, header_schema in route.headers.items():
        parameters.append(
            {"name": name, "in": "header", "required": False, "schema": header_schema}
        )
    return parameters


def _responses(route: RouteInfo, refs: Mapping[Any, dict[str, Any]]) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    for status, model in route.responses.items():
        if route.content_type != "application/json":
            responses[str(status)] = {
                "description": "Success: a file.",
                "content": {route.content_type: {"schema": {"type": "string"}}},
            }
            continue
        schema = refs[(model, "serialization")] if model is not None else {"type": "object"}
        responses[str(status)] = {
            "description": "Success.",
            "content": {"application/json": {"schema": schema}},
        }
    for status, classes in route.documented_errors().items():
        answer: dict[str, Any] = {
            "description": ", ".join(cls.error_code for cls in classes),
            "content": {"application/json": {"schema": _error_schema(classes, refs, route)}},
        }
        if status in (429, 503):
            answer["headers"] = {
                "Retry-After": {"description": "Seconds to wait.", "schema": {"type": "string"}}
            }
        responses[str(status)] = answer
    return responses


def _security(access: Access) -> list[dict[str, list[str]]]:
    if access in NEEDS_TOKEN:
        return [{BEARER: []}]
    if access is Access.SHOPIFY_WEBHOOK:
        return [{SHOPIFY: []}]
    return []


def _operation(
    route: RouteInfo, method: str, refs: Mapping[Any, dict[str, Any]], defs: dict[str, Any]
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": route.handler.__name__,
        "summary": route.summary,
        "parameters": _parameters(route, refs, defs),
        "responses": _responses(route, refs),
        "security": _security(route.access),
    }
    if route.access is Access.ADMIN:
        operation["description"] = "Needs an ID token with the `admin` custom claim."
    if route.access is Access.REDEEMER:
        operation["description"] = "Needs an ID token with the `redeemer` or `admin` custom claim."
    if route.access is Access.SHOPIFY_WEBHOOK:
        operation["description"] = (
            f"Called by Shopify: `{SIGNATURE_HEADER}` is the base64 HMAC-SHA256 of the raw body "
            "with the app's secret."
        )
    if route.body is not None:
        operation["requestBody"] = {
            "required": False,  # an empty body counts as {}
            "description": f"A JSON object of at most {MAX_BODY_BYTES} bytes.",
            "content": {"application/json": {"schema": refs[(route.body, "validation")]}},
        }
    return operation


def document(router: Router, *, version: str = "1.0.0") -> dict[str, Any]:
    """The OpenAPI 3.1 document of `router`."""
    routes = router.routes()
    refs, schema = models_json_schema(_models(routes), ref_template=REF)
    defs: dict[str, Any] = schema.get("$defs", {})
    paths: dict[str, Any] = {}
    for route in routes:
        item = paths.setdefault(_path(route.rule), {})
        for method in route.methods:
            item[method.lower()] = _operation(route, method, refs, defs)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": router.title,
            "version": version,
            "description": (
                'Every error is `{"error_code": "UPPER_SNAKE", "error_message": "…"}`; times '
                "are RFC 3339 UTC strings; bodies are JSON objects of at most "
                f"{MAX_BODY_BYTES} bytes (larger: 413 REQUEST_TOO_LARGE)."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": defs,
            "securitySchemes": {
                BEARER: {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "Firebase ID token",
                },
                SHOPIFY: {"type": "apiKey", "in": "header", "name": SIGNATURE_HEADER},
            },
        },
    }


@functools.cache
def cached_document(router: Router) -> dict[str, Any]:
    """The document is fixed once the routes are registered: built on first request."""
    return document(router)


def serve(router: Router) -> None:
    """Add the route that answers the router's own document."""

    @router.route(
        "/openapi.json",
        methods=["GET"],
        access=Access.PUBLIC,
        summary="This API's OpenAPI 3.1 document.",
    )
    def openapi_document(call: Call) -> flask.Response:
        return json_response(cached_document(router))
