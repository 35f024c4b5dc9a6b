"""ID tokens in the Auth emulator's format, and clients for one API's router."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import flask
from flask.testing import FlaskClient

from devkit.emulators.tokens import emulator_id_token
from tests.support.stack import PROJECT


def auth(
    user_id: str, *, admin: bool = False, claims: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, str]:
    """An Authorization header; `claims` adds custom claims (e.g. {"redeemer": True})."""
    token = emulator_id_token(user_id, project=PROJECT, admin=admin, **kwargs)
    if claims:
        header, payload, signature = token.split(".")
        decoded = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        raw = json.dumps({**decoded, **claims}, separators=(",", ":")).encode()
        payload = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        token = f"{header}.{payload}.{signature}"
    return {"Authorization": f"Bearer {token}"}


ADMIN = auth("operator-1", admin=True)
# A shop's checkout: may look codes up and redeem them, nothing else.
REDEEMER = auth("checkout-1", claims={"redeemer": True})


def router_client(router: Any, services: Any) -> FlaskClient:
    """A Flask client for one API's router with a container the test built itself."""
    app = flask.Flask("codedrop-test")
    methods = ["GET", "POST", "PATCH", "PUT", "DELETE", "OPTIONS"]

    @app.route("/", defaults={"path": ""}, methods=methods)
    @app.route("/<path:path>", methods=methods)
    def entry(path: str) -> Any:
        return router.dispatch(flask.request, services)

    return app.test_client()


def function_client(target: str) -> FlaskClient:
    """A test client of functions/main.py's `target`, served by the real functions-framework as
    the kind its decorator declares."""
    from functions_framework import create_app

    from shared.http.entry_points import entry_points
    from tests.support.stack import MAIN

    kind = entry_points(Path(MAIN))[target]
    app: flask.Flask = create_app(target, MAIN, str(kind))  # type: ignore[no-untyped-call]
    return app.test_client()
