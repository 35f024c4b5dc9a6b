"""What codedrop adds to the Flask app functions-framework builds for each function, before any
request: no body larger than MAX_BODY_BYTES is ever read into memory, and every answer the app
gives on its own (404 for a path it cannot route, 405, 413, 500) is the documented JSON error.

functions-framework reads the whole body of every request (after an HTTP function answers, and
before a CloudEvent function runs), so the limit has to sit in front of it, in WSGI.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

import flask
from cloudevents.exceptions import GenericException as CloudEventError
from werkzeug.exceptions import ClientDisconnected, HTTPException, RequestEntityTooLarge
from werkzeug.wsgi import get_content_length, get_input_stream

from shared.gcp.push_auth import PushRefused, PushUnverifiable, PushVerifier
from shared.http.requests import BODY_REFUSED, MAX_BODY_BYTES
from shared.http.responses import error_body
from shared.settings import Settings, get_settings

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

# The functions Pub/Sub pushes to (scripts/deployment/functions.py: Trigger.PUSH_SUBSCRIPTION).
PUSHED_FUNCTIONS = ("count_usage", "deliver_webhooks")

_CODES = {
    400: "REQUEST_VALIDATION_FAILED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "REQUEST_TOO_LARGE",
    500: "INTERNAL",
}


class BoundedBody:
    """WSGI middleware: reads at most `limit` bytes of a body. A larger body is never read; the
    request goes on marked (environ[BODY_REFUSED]) with an empty body, so an HTTP function
    answers 413 through its router, or, for an event function, is acknowledged and logged here:
    an event that large can never be processed, and a retry would not change that."""

    def __init__(self, app: WsgiApp, *, limit: int, acknowledge_refused: bool) -> None:
        self._app = app
        self._limit = limit
        self._acknowledge = acknowledge_refused

    def _read(self, environ: dict[str, Any]) -> bytes | None:
        """The whole body, or None when it is longer than the limit (never read past it)."""
        if get_content_length(environ) is not None:
            try:  # Content-Length over the limit raises before a byte is read
                return get_input_stream(environ, max_content_length=self._limit).read()
            except RequestEntityTooLarge:
                return None
        if not environ.get("wsgi.input_terminated"):
            return b""  # no length and no end: Werkzeug's safe reading is an empty body
        # Chunked: read one byte past the limit to know whether the body is longer.
        stream, body = environ["wsgi.input"], bytearray()
        while len(body) <= self._limit:
            piece = stream.read(min(1 << 16, self._limit + 1 - len(body)))
            if not piece:
                return bytes(body)
            body += piece
        return None

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            body = self._read(environ)
        except ClientDisconnected:
            body = b""
        environ["wsgi.input"] = io.BytesIO(body or b"")
        environ["CONTENT_LENGTH"] = str(len(body or b""))
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        if body is None:
            environ[BODY_REFUSED] = True
            if self._acknowledge:
                log.error(
                    "event body over the size limit acknowledged unread",
                    extra={"limit_bytes": self._limit, "path": environ.get("PATH_INFO", "")[:200]},
                )
                start_response("204 No Content", [])
                return [b""]
        return self._app(environ, start_response)


def _json_error(status: int, code: str, message: str) -> flask.Response:
    return flask.Response(
        json.dumps(error_body(code, message), separators=(",", ":")),
        status=status,
        mimetype="application/json",
    )


def _code_for(exc: HTTPException) -> str:
    status = exc.code or 500
    return _CODES.get(status) or re.sub(r"[^A-Z]+", "_", (exc.name or "error").upper()).strip("_")


def http_error(exc: HTTPException) -> flask.Response:
    """Werkzeug's and functions-framework's own answers as the documented JSON. Their
    description is never echoed: it may quote the request (headers, body)."""
    status = exc.code or 500
    response = _json_error(status, _code_for(exc), f"{exc.name}.")
    for name, value in exc.get_headers():
        if name.lower() != "content-type":
            response.headers[name] = value  # Allow on a 405
    return response


def internal_error(exc: Exception) -> flask.Response:
    response = _json_error(500, "INTERNAL", "Internal error; retry later.")
    # What functions-framework's own crash answer carries, so the platform logs a crash.
    response.headers["X-Google-Status"] = "crash"
    return response


def acknowledge(reason: str) -> flask.Response:
    """An event delivery that can never be processed: 2xx, so it is not redelivered."""
    log.error("undeliverable event acknowledged", extra={"reason": reason[:300]})
    return flask.Response(status=204)


def check_pushes(app: flask.Flask, settings: Settings) -> None:
    """A pushed function (PUSHED_FUNCTIONS) serves only requests signed as its push
    subscription. Outside demo- projects it refuses to start without the audience and account
    to check; in a demo- project without them (a bare functions-framework run) nothing is
    checked, while the local stack and the tests configure and sign
    (devkit/standins/push_auth.py)."""
    if app.name not in PUSHED_FUNCTIONS:
        return
    if settings.push_audience is None:
        if not settings.is_local:
            raise ValueError(
                f"{app.name} is pushed by Pub/Sub: CODEDROP_PUSH_AUDIENCE and "
                "CODEDROP_PUSH_SERVICE_ACCOUNT are required outside demo- projects"
            )
        log.warning(
            "push tokens not checked (no CODEDROP_PUSH_AUDIENCE)", extra={"function": app.name}
        )
        return
    verifier = PushVerifier(settings)

    def verify_push() -> flask.Response | None:
        try:
            verifier.verify(flask.request.headers.get("Authorization"))
        except PushRefused as exc:
            return _json_error(401, "UNAUTHENTICATED", str(exc))
        except PushUnverifiable as exc:
            return _json_error(503, "UNAVAILABLE", str(exc))
        return None

    app.before_request(verify_push)


def harden(app: flask.Flask, *, event_function: bool) -> None:
    """Bound bodies and answer every framework-level error as JSON. For an event function a
    body that is not an event at all (or too large) is acknowledged and logged, not refused.
    A pushed function also checks each push's OIDC token (check_pushes)."""
    app.wsgi_app = BoundedBody(  # type: ignore[method-assign]
        app.wsgi_app, limit=MAX_BODY_BYTES, acknowledge_refused=event_function
    )
    check_pushes(app, get_settings())
    # Registered for 500 explicitly: functions-framework registers its plain-text one there.
    app.register_error_handler(500, internal_error)
    if not event_function:
        app.register_error_handler(HTTPException, http_error)
        return

    def event_http_error(exc: HTTPException) -> flask.Response:
        # functions-framework could not read a delivery as a CloudEvent nor a legacy event.
        if exc.code in (400, 415):
            return acknowledge(f"not an event: {exc.name}")
        return http_error(exc)

    def event_parse_error(exc: CloudEventError) -> flask.Response:
        return acknowledge(f"not a CloudEvent: {type(exc).__name__}")

    app.register_error_handler(HTTPException, event_http_error)
    app.register_error_handler(CloudEventError, event_parse_error)
