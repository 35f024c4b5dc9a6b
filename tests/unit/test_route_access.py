"""Every route says who may call it, and the router enforces it before any handler runs."""

from __future__ import annotations

import re

import pytest

from shared.container import Services
from shared.http import admin_api, claim_api, maintenance_api
from shared.http.routing import Access, RouteInfo, Router
from shared.settings import Settings
from tests.support.api import auth, router_client


def _path(route: RouteInfo) -> str:
    return re.sub(r"<[^>]+>", "x-1", route.rule)


@pytest.fixture
def services(monkeypatch: pytest.MonkeyPatch) -> Services:
    # Unsigned emulator-format tokens are accepted only with this switch (demo- projects only).
    monkeypatch.setenv("FIREBASE_AUTH_EMULATOR_HOST", "127.0.0.1:9")
    return Services(Settings(project_id="demo-codedrop-test", auth_emulator_host="127.0.0.1:9"))


def test_every_admin_route_is_for_admins_only() -> None:
    routes = admin_api.router.routes()
    assert routes
    assert {route.access for route in routes} == {Access.ADMIN}


def test_only_the_campaign_view_of_claim_api_is_public() -> None:
    routes = claim_api.router.routes()
    public = [(r.methods, r.rule) for r in routes if r.access is Access.PUBLIC]
    assert public == [(("GET",), "/v1/campaigns/<campaign_id>")]
    assert {r.access for r in routes if r.access is not Access.PUBLIC} == {Access.SHOPPER}


def test_only_the_scheduled_sweep_relies_on_iam() -> None:
    """IAM access is for a function deployed private; every other router checks tokens."""
    assert [(r.methods, r.rule, r.access) for r in maintenance_api.router.routes()] == [
        (("POST",), "/", Access.IAM)
    ]
    for router in (admin_api.router, claim_api.router):
        assert Access.IAM not in {r.access for r in router.routes()}


@pytest.mark.parametrize("router", [admin_api.router, claim_api.router], ids=["admin", "claim"])
def test_closed_routes_refuse_a_caller_without_a_token(router: Router, services: Services) -> None:
    client = router_client(router, services)
    for route in router.routes():
        if route.access is Access.PUBLIC:
            continue
        for method in route.methods:
            response = client.open(_path(route), method=method)
            assert response.status_code == 401, (method, route.rule)
            assert response.get_json()["error_code"] == "UNAUTHENTICATED"


def test_admin_routes_refuse_a_shopper_before_the_handler_runs(services: Services) -> None:
    client = router_client(admin_api.router, services)
    for route in admin_api.router.routes():
        for method in route.methods:
            response = client.open(_path(route), method=method, headers=auth("shopper-1"))
            assert response.status_code == 403, (method, route.rule)
            assert response.get_json()["error_code"] == "FORBIDDEN"


def test_a_route_cannot_be_added_without_its_access() -> None:
    router = Router()
    with pytest.raises(TypeError):
        router.route("/v1/open", methods=["GET"])  # type: ignore[call-arg]
