"""Every route says who may call it, and the router enforces it before any handler runs."""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Any

import flask
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.firestore_v1.client import Client

from shared import errors
from shared.container import Services
from shared.http import admin, claim_api, maintenance_api
from shared.http.access import Access
from shared.http.responses import ErrorBody
from shared.http.routing import Call, RouteInfo, Router, Routes, answers, raises
from shared.http.shopify import SIGNATURE_HEADER, signature
from shared.settings import Settings
from tests.support.api import REDEEMER, auth, router_client
from tests.unit.conftest import LOCAL_SWITCHES


def _path(route: RouteInfo) -> str:
    return re.sub(r"<[^>]+>", "x-1", route.rule)


@pytest.fixture
def services(monkeypatch: pytest.MonkeyPatch) -> Services:
    # Unsigned emulator-format tokens are accepted only with this switch (demo- projects only).
    monkeypatch.setenv("FIREBASE_AUTH_EMULATOR_HOST", "127.0.0.1:9")
    # Its tokens name no account: the revocation check has its own tests (test_revocation.py).
    settings = Settings(
        project_id="demo-codedrop-test", auth_emulator_host="127.0.0.1:9", check_revoked=False
    )
    return Services(settings)


CHECKOUT = {
    (("GET",), "/v1/campaigns/<campaign_id>/codes/<code>"),
    (("POST",), "/v1/campaigns/<campaign_id>/redemptions"),
    (("POST",), "/v1/campaigns/<campaign_id>/redemptions/<order_id>:reverse"),
}
WEBHOOK = (("POST",), "/v1/webhooks/shopify/orders")
WEBHOOKS = {WEBHOOK, (("POST",), "/v1/webhooks/shopify/refunds")}


def test_every_admin_route_is_for_admins_but_checkout_the_webhook_and_the_description() -> None:
    routes = admin.router.routes()
    by_access: dict[Access, set[tuple[tuple[str, ...], str]]] = {}
    for route in routes:
        by_access.setdefault(route.access, set()).add((route.methods, route.rule))
    assert set(by_access) == {
        Access.PUBLIC,
        Access.ADMIN,
        Access.REDEEMER,
        Access.SHOPIFY_WEBHOOK,
    }
    assert by_access[Access.PUBLIC] == {(("GET",), "/openapi.json")}
    assert by_access[Access.REDEEMER] == CHECKOUT
    assert by_access[Access.SHOPIFY_WEBHOOK] == WEBHOOKS
    assert len(by_access[Access.ADMIN]) >= 10


def test_only_the_campaign_view_its_fairness_proofs_and_the_api_description_are_public() -> None:
    routes = claim_api.router.routes()
    public = sorted((r.methods, r.rule) for r in routes if r.access is Access.PUBLIC)
    campaign = "/v1/campaigns/<campaign_id>"
    assert public == [
        (("GET",), "/openapi.json"),
        (("GET",), campaign),
        (("GET",), f"{campaign}/fairness"),
        (("GET",), f"{campaign}/fairness/admissions"),
        (("GET",), f"{campaign}/fairness/entries"),
        (("GET",), f"{campaign}/transparency"),
    ]
    assert {r.access for r in routes if r.access is not Access.PUBLIC} == {Access.SHOPPER}


def test_only_the_scheduled_sweep_relies_on_iam() -> None:
    """IAM access is for a function deployed private; every other router checks tokens."""
    assert [(r.methods, r.rule, r.access) for r in maintenance_api.router.routes()] == [
        (("POST",), "/", Access.IAM)
    ]
    for router in (admin.router, claim_api.router):
        assert Access.IAM not in {r.access for r in router.routes()}


@pytest.mark.parametrize("router", [admin.router, claim_api.router], ids=["admin", "claim"])
def test_closed_routes_refuse_a_caller_without_a_token(router: Router, services: Services) -> None:
    client = router_client(router, services)
    for route in router.routes():
        if route.access is Access.PUBLIC:
            continue
        # The webhook carries no token: without Shopify's signature it is refused just the same.
        expected = (
            "INVALID_SIGNATURE" if route.access is Access.SHOPIFY_WEBHOOK else "UNAUTHENTICATED"
        )
        for method in route.methods:
            response = client.open(_path(route), method=method)
            assert response.status_code == 401, (method, route.rule)
            assert response.get_json()["error_code"] == expected


def test_admin_routes_refuse_a_shopper_before_the_handler_runs(services: Services) -> None:
    client = router_client(admin.router, services)
    for route in admin.router.routes():
        if route.access in (Access.PUBLIC, Access.SHOPIFY_WEBHOOK):
            continue
        for method in route.methods:
            response = client.open(_path(route), method=method, headers=auth("shopper-1"))
            assert response.status_code == 403, (method, route.rule)
            assert response.get_json()["error_code"] == "FORBIDDEN"


def test_a_redeemer_is_refused_everything_but_checkout(services: Services) -> None:
    client = router_client(admin.router, services)
    for route in admin.router.routes():
        if route.access is not Access.ADMIN:
            continue
        for method in route.methods:
            response = client.open(_path(route), method=method, headers=REDEEMER)
            assert response.status_code == 403, (method, route.rule)
            assert response.get_json()["error_code"] == "FORBIDDEN"


def test_a_shopify_signature_is_checked_on_the_raw_body(services: Services) -> None:
    # An order without discount codes needs no database nor Pub/Sub: built, never used.
    offline = Client(project="demo-unit", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    client = router_client(
        admin.router, Services(services.settings, db=offline, publisher=object())
    )
    key = services.settings.shopify_webhook_key
    assert key is not None  # a demo- project signs with its demo key
    body = b'{"id": 1, "discount_codes": []}'

    def post(data: bytes, signed: str) -> Any:
        headers = {SIGNATURE_HEADER: signed}
        return client.post(WEBHOOK[1], data=data, headers=headers, content_type="application/json")

    good = post(body, signature(body, key))
    # The same JSON with other whitespace is another body: its signature does not carry over.
    respaced = post(body.replace(b" ", b""), signature(body, key))
    wrong_key = post(body, signature(body, b"x" * 32))
    assert good.status_code == 200
    assert good.get_json() == {"order_id": "1", "results": [], "ignored_topic": None}
    for refused in (respaced, wrong_key):
        assert refused.status_code == 401
        assert refused.get_json()["error_code"] == "INVALID_SIGNATURE"


def test_outside_demo_projects_the_webhook_needs_its_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A production project: none of the suite's local switches or secrets may leak in.
    for name in (*LOCAL_SWITCHES, "CODEDROP_TICKET_SECRET", "CODEDROP_SHOPIFY_WEBHOOK_SECRET"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="TICKET_SECRET"):
        Settings(project_id="shop-prod")
    unset = Settings(project_id="shop-prod", ticket_secret="t" * 32)
    assert unset.shopify_webhook_key is None
    client = router_client(admin.router, Services(unset))
    body = b'{"id": 1}'
    response = client.post(WEBHOOK[1], data=body, headers={SIGNATURE_HEADER: signature(body, b"")})
    assert response.status_code == 401
    assert response.get_json()["error_code"] == "INVALID_SIGNATURE"
    with pytest.raises(ValueError, match="SHOPIFY_WEBHOOK_SECRET"):
        Settings(project_id="shop-prod", ticket_secret="t" * 32, shopify_webhook_secret="short")


def test_a_route_cannot_be_added_without_its_access() -> None:
    router = Router(title="test")
    with pytest.raises(TypeError):
        router.route("/v1/open", methods=["GET"])  # type: ignore[call-arg]


def test_every_admin_resource_module_is_served() -> None:
    """A resource module whose routes are not included in admin_api's router serves nothing."""
    served = {route.endpoint for route in admin.router.routes()}
    for info in pkgutil.iter_modules(admin.__path__):
        module = importlib.import_module(f"{admin.__name__}.{info.name}")
        declared = {route.endpoint for route in module.routes.routes()}
        assert declared, info.name
        assert declared <= served, info.name


def test_a_stacked_contract_reads_top_to_bottom() -> None:
    routes = Routes()

    @routes.post("/v1/things", access=Access.ADMIN)
    @answers(201, ErrorBody)
    @answers(200)
    @raises(errors.CampaignNotFound)
    @raises(errors.Contended)
    def make_thing(call: Call) -> flask.Response:
        """Make a thing,
        or answer the one made.

        Not in the summary."""
        raise AssertionError("never called")

    (route,) = routes.routes()
    assert route.summary == "Make a thing, or answer the one made."
    assert list(route.responses.items()) == [(201, ErrorBody), (200, None)]
    assert route.raises == (errors.CampaignNotFound, errors.Contended)
    with pytest.raises(TypeError, match="below the route decorator"):
        raises(errors.Contended)(make_thing)
