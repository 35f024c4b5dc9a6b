"""The HTTP edge: routing with access declared per route, JSON bodies, CORS, and the one place
errors become status codes. The only package that imports Flask."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

import flask
from pydantic import BaseModel, ValidationError
from werkzeug.exceptions import MethodNotAllowed as WerkzeugMethodNotAllowed
from werkzeug.exceptions import NotFound as WerkzeugNotFound
from werkzeug.routing import Map, Rule

from shared import errors
from shared.container import Services
from shared.http.auth import Principal, authenticate
from shared.logs import request_context, trace_fields

log = logging.getLogger(__name__)

# The status of each error family; subclasses inherit their family's status.
_STATUS: dict[type[errors.CodedropError], int] = {
    errors.RequestValidationFailed: 400,
    errors.Unauthenticated: 401,
    errors.Forbidden: 403,
    errors.NotFound: 404,
    errors.MethodNotAllowed: 405,
    errors.Conflict: 409,
    errors.SoldOut: 410,
    errors.WaitingRoom: 429,
    errors.Contended: 503,
}

M = TypeVar("M", bound=BaseModel)
_CAMPAIGN_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


class ErrorBody(BaseModel):
    error_code: str
    error_message: str


class Access(Enum):
    """Who may call a route; the router checks it before the handler runs."""

    PUBLIC = "public"
    SHOPPER = "shopper"  # any valid Firebase ID token
    ADMIN = "admin"  # an ID token with the `admin` custom claim
    # Behind IAM: Cloud Run admits only callers granted the invoker role (Cloud Scheduler's
    # service account), so the function itself checks no token. Never on a public function.
    IAM = "iam"


@dataclass(frozen=True)
class Call:
    """One request as a handler sees it."""

    request: flask.Request
    services: Services
    principal: Principal | None

    @property
    def user(self) -> Principal:
        """The caller of a shopper or admin route (the router has authenticated them)."""
        if self.principal is None:
            raise errors.Unauthenticated()
        return self.principal


Handler = Callable[..., flask.Response]


@dataclass(frozen=True)
class RouteInfo:
    rule: str
    methods: tuple[str, ...]
    access: Access
    handler: Handler


def status_for(error: errors.CodedropError) -> int:
    for cls in type(error).__mro__:
        if cls in _STATUS:
            return _STATUS[cls]
    return 500


def json_response(
    body: BaseModel | dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> flask.Response:
    payload = body.model_dump(mode="json") if isinstance(body, BaseModel) else body
    response = flask.Response(
        json.dumps(payload, separators=(",", ":")), status=status, mimetype="application/json"
    )
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def error_response(error: errors.CodedropError) -> flask.Response:
    headers = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    body = ErrorBody(error_code=error.error_code, error_message=error.message).model_dump()
    if error.details:
        body.update(error.details)
    return json_response(body, status_for(error), headers)


def _describe(exc: ValidationError) -> str:
    parts = []
    for item in exc.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "body"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def parse_body(request: flask.Request, model: type[M]) -> M:
    """Validate a JSON object body (an empty body counts as {})."""
    data = request.get_json(silent=True)
    if data is None:
        if request.get_data():
            raise errors.RequestValidationFailed("The body must be a JSON object.")
        data = {}
    if not isinstance(data, dict):
        raise errors.RequestValidationFailed("The body must be a JSON object.")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise errors.RequestValidationFailed(_describe(exc)) from exc


def campaign_id_param(value: str) -> str:
    """A malformed id names no campaign; it never reaches Firestore (which reserves __x__)."""
    if not _CAMPAIGN_ID.match(value):
        raise errors.CampaignNotFound(f"Campaign {value!r} does not exist.")
    return value


def parse_query(request: flask.Request, model: type[M]) -> M:
    try:
        return model.model_validate(request.args.to_dict())
    except ValidationError as exc:
        raise errors.RequestValidationFailed(_describe(exc)) from exc


@dataclass(frozen=True)
class Cors:
    """CORS for browser callers (the landing pages' origins)."""

    origins: tuple[str, ...]
    allow_headers: str = (
        "Authorization, Content-Type, Idempotency-Key, X-Waiting-Room-Ticket, X-Firebase-AppCheck"
    )
    expose_headers: str = "Retry-After"

    def headers_for(self, origin: str | None) -> dict[str, str]:
        allowed = set(self.origins)
        if origin is None or ("*" not in allowed and origin not in allowed):
            return {}
        return {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Expose-Headers": self.expose_headers,
            # The waiting-room ticket cookie travels only with credentials.
            "Access-Control-Allow-Credentials": "true",
            "Vary": "Origin",
        }

    def preflight(self, origin: str | None, methods: Iterable[str]) -> flask.Response:
        response = flask.Response(status=204)
        headers = self.headers_for(origin)
        if headers:
            headers |= {
                "Access-Control-Allow-Methods": ", ".join(sorted(methods)),
                "Access-Control-Allow-Headers": self.allow_headers,
                "Access-Control-Max-Age": "3600",
            }
        response.headers.update(headers)
        return response


class Router:
    """Maps method + path to a handler and every failure to the documented error body."""

    def __init__(self, *, cors: bool = False) -> None:
        self._map = Map(strict_slashes=False)
        self._handlers: dict[str, tuple[Handler, Access]] = {}
        self._cors = cors

    def route(
        self, rule: str, *, methods: list[str], access: Access
    ) -> Callable[[Handler], Handler]:
        """Register a handler `(call, **path_params)`; `access` is required, so no route can be
        added without saying who may call it."""

        def register(handler: Handler) -> Handler:
            endpoint = f"{handler.__module__}.{handler.__name__}"
            self._map.add(Rule(rule, endpoint=endpoint, methods=methods))
            self._handlers[endpoint] = (handler, access)
            return handler

        return register

    def routes(self) -> list[RouteInfo]:
        """Every route with its methods and access (for tests and the API description)."""
        return [
            RouteInfo(
                rule=rule.rule,
                methods=tuple(sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})),
                access=self._handlers[str(rule.endpoint)][1],
                handler=self._handlers[str(rule.endpoint)][0],
            )
            for rule in self._map.iter_rules()
        ]

    def _principal(self, request: flask.Request, access: Access, services: Services) -> Any:
        if access in (Access.PUBLIC, Access.IAM):
            return None
        principal = authenticate(request.headers.get("Authorization"), settings=services.settings)
        if access is Access.ADMIN and not principal.is_admin:
            raise errors.Forbidden("This operation needs an ID token with the admin claim.")
        return principal

    def dispatch(self, request: flask.Request, services: Services) -> flask.Response:
        with request_context(trace_fields(request.headers, services.settings.project_id)):
            return self._dispatch(request, services)

    def _dispatch(self, request: flask.Request, services: Services) -> flask.Response:
        origin = request.headers.get("Origin")
        cors = Cors(services.settings.cors_origins) if self._cors else None
        adapter = self._map.bind("", path_info=request.path)
        try:
            if request.method == "OPTIONS" and cors is not None:
                return cors.preflight(origin, adapter.allowed_methods())
            endpoint, params = adapter.match(method=request.method)
            handler, access = self._handlers[str(endpoint)]
            principal = self._principal(request, access, services)
            response = handler(Call(request, services, principal), **params)
        except WerkzeugNotFound:
            response = error_response(errors.NotFound(f"No route for {request.path}."))
        except WerkzeugMethodNotAllowed:
            response = error_response(
                errors.MethodNotAllowed(f"{request.method} is not allowed on {request.path}.")
            )
        except errors.CodedropError as exc:
            response = error_response(exc)
        except Exception:
            log.exception("unhandled error", extra={"path": request.path, "method": request.method})
            response = error_response(errors.CodedropError("Internal error; retry later."))
        if cors is not None:
            response.headers.update(cors.headers_for(origin))
        return response
