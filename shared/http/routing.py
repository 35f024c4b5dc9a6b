"""The HTTP edge: routing with access and contract declared per route, bounded JSON bodies, CORS,
and the one place errors become status codes. The only package that imports Flask."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

import flask
from pydantic import BaseModel, TypeAdapter, ValidationError
from werkzeug.exceptions import MethodNotAllowed as WerkzeugMethodNotAllowed
from werkzeug.exceptions import NotFound as WerkzeugNotFound
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.routing import Map, Rule

from shared import errors
from shared.container import Services
from shared.http import shopify
from shared.http.auth import Principal, authenticate
from shared.http.shopify import SIGNATURE_HEADER as SIGNATURE
from shared.logs import request_context, trace_fields
from shared.types import CampaignId

log = logging.getLogger(__name__)

# Every API body is a small JSON object; nothing larger is read into memory.
MAX_BODY_BYTES = 64 * 1024
# The WSGI layer (shared/http/wsgi.py) marks a request whose body it refused to read.
BODY_REFUSED = "codedrop.body_refused"
# A validation error lists at most this many problems, each cut short.
MAX_PROBLEMS = 5
MAX_MESSAGE_CHARS = 500

# The status of each error family; subclasses inherit their family's status.
_STATUS: dict[type[errors.CodedropError], int] = {
    errors.RequestValidationFailed: 400,
    errors.Unauthenticated: 401,
    errors.Forbidden: 403,
    errors.NotFound: 404,
    errors.MethodNotAllowed: 405,
    errors.Conflict: 409,
    errors.SoldOut: 410,
    errors.RequestTooLarge: 413,
    errors.WaitingRoom: 429,
    errors.RateLimited: 429,
    errors.Contended: 503,
    errors.AuthUnavailable: 503,
}

M = TypeVar("M", bound=BaseModel)
_CAMPAIGN_ID: TypeAdapter[str] = TypeAdapter(CampaignId)


class ErrorBody(BaseModel):
    """Every error the functions answer: `{"error_code": "UPPER_SNAKE", "error_message": …}`."""

    error_code: str
    error_message: str


class Access(Enum):
    """Who may call a route; the router checks it before the handler runs."""

    PUBLIC = "public"
    SHOPPER = "shopper"  # any valid Firebase ID token
    REDEEMER = "redeemer"  # an ID token with the `redeemer` or the `admin` custom claim
    ADMIN = "admin"  # an ID token with the `admin` custom claim
    # No Google or Firebase identity: Shopify signs the raw body with the app's secret.
    SHOPIFY_WEBHOOK = "shopify_webhook"
    # Behind IAM: Cloud Run admits only callers granted the invoker role (Cloud Scheduler's
    # service account), so the function itself checks no token. Never on a public function.
    IAM = "iam"


@dataclass(frozen=True)
class Call:
    """One request as a handler sees it, with its body and query validated by the router
    against the models the route declared."""

    request: flask.Request
    services: Services
    principal: Principal | None
    body: BaseModel | None = None
    query: BaseModel | None = None

    @property
    def user(self) -> Principal:
        """The caller of a shopper or admin route (the router has authenticated them)."""
        if self.principal is None:
            raise errors.Unauthenticated()
        return self.principal

    def body_as(self, model: type[M]) -> M:
        if not isinstance(self.body, model):
            raise TypeError(f"the route did not declare body={model.__name__}")
        return self.body

    def query_as(self, model: type[M]) -> M:
        if not isinstance(self.query, model):
            raise TypeError(f"the route did not declare query={model.__name__}")
        return self.query


Handler = Callable[..., flask.Response]


@dataclass(frozen=True)
class RouteInfo:
    """A route and its contract: what it accepts and every answer it gives (the OpenAPI
    document is generated from these)."""

    rule: str
    methods: tuple[str, ...]
    access: Access
    handler: Handler
    summary: str = ""
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    # Success statuses and their bodies (None: a free-form JSON object).
    responses: Mapping[int, type[BaseModel] | None] = field(default_factory=dict)
    # Errors the handler itself raises; the router adds those of access, body and size.
    raises: tuple[type[errors.CodedropError], ...] = ()
    # Errors whose body carries more than ErrorBody (e.g. the waiting room's ticket).
    error_bodies: Mapping[type[errors.CodedropError], type[BaseModel]] = field(default_factory=dict)
    headers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # What a success answers: JSON, or e.g. text/csv (a streamed file; errors stay JSON).
    content_type: str = "application/json"

    def documented_errors(self) -> dict[int, list[type[errors.CodedropError]]]:
        """Every error this route can answer, by status."""
        found: list[type[errors.CodedropError]] = [errors.RequestTooLarge, *self.raises]
        if self.body is not None or self.query is not None or self.headers:
            found.append(errors.RequestValidationFailed)
        if self.access in (Access.SHOPPER, Access.REDEEMER, Access.ADMIN):
            found.append(errors.Unauthenticated)
        if self.access in (Access.REDEEMER, Access.ADMIN):
            found.append(errors.Forbidden)
        if self.access is Access.SHOPIFY_WEBHOOK:
            found.append(errors.InvalidSignature)
        if "<" in self.rule:
            # An id no route can match (a line break in it) is answered before any handler.
            found.append(errors.NotFound)
        by_status: dict[int, list[type[errors.CodedropError]]] = {}
        for cls in found:
            listed = by_status.setdefault(_status_of(cls), [])
            if cls not in listed:
                listed.append(cls)
        return dict(sorted(by_status.items()))


def _status_of(cls: type[errors.CodedropError]) -> int:
    for base in cls.__mro__:
        if base in _STATUS:
            return _STATUS[base]
    return 500


def status_for(error: errors.CodedropError) -> int:
    return _status_of(type(error))


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


def error_body(error_code: str, message: str) -> dict[str, Any]:
    # A backstop: whatever a message quotes, the answer stays small.
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    return ErrorBody(error_code=error_code, error_message=message).model_dump()


def error_response(error: errors.CodedropError) -> flask.Response:
    headers = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    body = error_body(error.error_code, error.message)
    if error.details:
        body.update(error.details)
    return json_response(body, status_for(error), headers)


def describe(exc: ValidationError) -> str:
    """A validation failure in a few bounded lines: the first problems, never the input."""
    items = exc.errors(include_url=False, include_input=False, include_context=False)
    parts = []
    for item in items[:MAX_PROBLEMS]:
        where = ".".join(str(p)[:32] for p in item["loc"])[:64] or "body"
        parts.append(f"{where}: {item['msg'][:160]}")
    more = len(items) - MAX_PROBLEMS
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _raw_body(request: flask.Request) -> bytes:
    """The body, never more than MAX_BODY_BYTES of it read."""
    if request.environ.get(BODY_REFUSED) or (request.content_length or 0) > MAX_BODY_BYTES:
        raise _too_large()
    request.max_content_length = MAX_BODY_BYTES
    try:
        return request.get_data()
    except RequestEntityTooLarge:
        raise _too_large() from None


def _too_large() -> errors.RequestTooLarge:
    return errors.RequestTooLarge(f"The body is larger than {MAX_BODY_BYTES} bytes.")


def parse_body(request: flask.Request, model: type[M]) -> M:
    """Validate a JSON object body (an empty body counts as {}), strictly, from the raw bytes:
    RFC 3339 strings become times, but "5" never becomes 5. Nesting is bounded by the parser."""
    raw = _raw_body(request)
    if not raw.strip():
        raw = b"{}"
    elif not request.is_json:
        raise errors.RequestValidationFailed("Send the body as application/json.")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise errors.RequestValidationFailed(describe(exc)) from exc


def parse_query(request: flask.Request, model: type[M]) -> M:
    """Query parameters, validated as the strings they are (strict otherwise)."""
    args: dict[str, str] = {}
    for name, values in request.args.lists():
        if len(values) > 1:
            raise errors.RequestValidationFailed(f"{errors.shown(name)} is given more than once.")
        args[name] = values[0]
    try:
        return model.model_validate_strings(args)
    except ValidationError as exc:
        raise errors.RequestValidationFailed(describe(exc)) from exc


def path_id(
    value: str,
    valid: TypeAdapter[str] | re.Pattern[str],
    missing: type[errors.NotFound],
    message: str,
) -> str:
    """`value` when it is a well-formed id (`valid`), else `missing` with `message` ({} stands
    for the value): a malformed id names nothing, and never reaches Firestore (which reserves
    ids like __x__)."""
    if isinstance(valid, re.Pattern):
        if valid.match(value):
            return value
    else:
        try:
            return valid.validate_python(value)
        except ValidationError:
            pass
    raise missing(message.format(errors.shown(value)))


def campaign_id_param(value: str) -> str:
    return path_id(value, _CAMPAIGN_ID, errors.CampaignNotFound, "Campaign {} does not exist.")


def client_address(request: flask.Request) -> str:
    """The caller's address. Behind Google's front end (every deployed function) it is the last
    X-Forwarded-For entry, the one the front end appended: earlier entries are whatever the
    caller sent. Without the header (locally), the socket's peer."""
    forwarded = request.headers.get("X-Forwarded-For", "")
    last = forwarded.rsplit(",", 1)[-1].strip()
    return last[:64] or request.remote_addr or "unknown"


@dataclass(frozen=True)
class Cors:
    """CORS for browser callers (the landing pages' origins). A listed origin is echoed with
    credentials (the waiting-room cookie); "*" answers "*" without credentials, so no origin,
    `null` included, is ever echoed unless it was listed."""

    origins: tuple[str, ...]
    # Every header web/codedrop.js sends (App Check's only when the page provides a token), and
    # the console's If-Match (a campaign edit's version).
    allow_headers: str = (
        "Authorization, Content-Type, Idempotency-Key, X-Waiting-Room-Ticket, X-Firebase-AppCheck,"
        " If-Match"
    )
    expose_headers: str = "Retry-After, Content-Disposition"

    def headers_for(self, origin: str | None) -> dict[str, str]:
        if origin is None:
            return {}
        if origin != "*" and origin in self.origins:
            return {
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Expose-Headers": self.expose_headers,
                # The waiting-room ticket cookie travels only with credentials.
                "Access-Control-Allow-Credentials": "true",
                "Vary": "Origin",
            }
        if "*" in self.origins:
            headers = {
                "Access-Control-Allow-Origin": "*",
                "Access-Control-Expose-Headers": self.expose_headers,
            }
            if len(self.origins) > 1:
                headers["Vary"] = "Origin"  # listed origins get another answer
            return headers
        return {}

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

    def __init__(self, *, title: str, cors: bool = False) -> None:
        self.title = title
        self._map = Map(strict_slashes=False)
        self._routes: dict[str, RouteInfo] = {}
        self._cors = cors

    @property
    def cors(self) -> bool:
        return self._cors

    def route(
        self,
        rule: str,
        *,
        methods: list[str],
        access: Access,
        summary: str = "",
        body: type[BaseModel] | None = None,
        query: type[BaseModel] | None = None,
        responses: Mapping[int, type[BaseModel] | None] | None = None,
        raises: Sequence[type[errors.CodedropError]] = (),
        error_bodies: Mapping[type[errors.CodedropError], type[BaseModel]] | None = None,
        headers: Mapping[str, Mapping[str, Any]] | None = None,
        content_type: str = "application/json",
    ) -> Callable[[Handler], Handler]:
        """Register a handler `(call, **path_params)`; `access` is required, so no route can be
        added without saying who may call it. `body` and `query` are validated before the
        handler runs; `responses` and `raises` document every answer (see shared/http/openapi)."""

        def register(handler: Handler) -> Handler:
            endpoint = f"{handler.__module__}.{handler.__name__}"
            self._map.add(Rule(rule, endpoint=endpoint, methods=methods))
            self._routes[endpoint] = RouteInfo(
                rule=rule,
                methods=tuple(sorted(methods)),
                access=access,
                handler=handler,
                summary=summary or (handler.__doc__ or "").strip().split("\n")[0],
                body=body,
                query=query,
                responses=dict(responses or {200: None}),
                raises=tuple(raises),
                error_bodies=dict(error_bodies or {}),
                headers=dict(headers or {}),
                content_type=content_type,
            )
            return handler

        return register

    def routes(self) -> list[RouteInfo]:
        """Every route with its methods, access and contract (for tests and the API
        description)."""
        return [self._routes[str(rule.endpoint)] for rule in self._map.iter_rules()]

    def _principal(self, request: flask.Request, access: Access, services: Services) -> Any:
        if access in (Access.PUBLIC, Access.IAM):
            return None
        if access is Access.SHOPIFY_WEBHOOK:
            key = services.settings.shopify_webhook_key
            if key is None:
                log.error("Shopify webhook refused: CODEDROP_SHOPIFY_WEBHOOK_SECRET is not set")
            # The body stays cached for the handler, which parses the very bytes checked here.
            shopify.verify(request.get_data(cache=True), request.headers.get(SIGNATURE), key)
            settings = services.settings
            shopify.verify_shop(
                request.headers.get(shopify.SHOP_HEADER),
                settings.shopify_shop_domain,
                required=not settings.is_local,
            )
            return None
        # Shoppers' tokens are not checked for revocation: a claim is bounded by the campaign's
        # own limits, and a read of the account per claim would cost the sale's hot path.
        privileged = access in (Access.ADMIN, Access.REDEEMER) and services.settings.check_revoked
        principal = authenticate(
            request.headers.get("Authorization"),
            settings=services.settings,
            revocations=services.revocations if privileged else None,
        )
        if access is Access.ADMIN and not principal.is_admin:
            raise errors.Forbidden("This operation needs an ID token with the admin claim.")
        if access is Access.REDEEMER and not principal.is_redeemer:
            raise errors.Forbidden("This operation needs an ID token with the redeemer claim.")
        return principal

    def dispatch(self, request: flask.Request, services: Services) -> flask.Response:
        with request_context(trace_fields(request.headers, services.settings.project_id)):
            return self._dispatch(request, services)

    def _call(self, request: flask.Request, services: Services) -> flask.Response:
        adapter = self._map.bind("", path_info=request.path)
        endpoint, params = adapter.match(method=request.method)
        route = self._routes[str(endpoint)]
        principal = self._principal(request, route.access, services)
        call = Call(
            request,
            services,
            principal,
            body=parse_body(request, route.body) if route.body is not None else None,
            query=parse_query(request, route.query) if route.query is not None else None,
        )
        return route.handler(call, **params)

    def _dispatch(self, request: flask.Request, services: Services) -> flask.Response:
        origin = request.headers.get("Origin")
        cors = Cors(services.settings.cors_origins) if self._cors else None
        try:
            if request.environ.get(BODY_REFUSED) or (request.content_length or 0) > MAX_BODY_BYTES:
                raise _too_large()
            if request.method == "OPTIONS" and cors is not None:
                adapter = self._map.bind("", path_info=request.path)
                return cors.preflight(origin, adapter.allowed_methods())
            response = self._call(request, services)
        except WerkzeugNotFound:
            response = error_response(
                errors.NotFound(f"No route for {errors.shown(request.path)}.")
            )
        except WerkzeugMethodNotAllowed as exc:
            response = error_response(
                errors.MethodNotAllowed(
                    f"{errors.shown(request.method, 16)} is not allowed on "
                    f"{errors.shown(request.path)}."
                )
            )
            response.headers["Allow"] = ", ".join(sorted(exc.valid_methods or ()))
        except errors.CodedropError as exc:
            response = error_response(exc)
        except Exception:
            log.exception(
                "unhandled error",
                extra={"path": request.path[:200], "method": request.method[:16]},
            )
            response = error_response(errors.CodedropError("Internal error; retry later."))
        if cors is not None:
            response.headers.update(cors.headers_for(origin))
        return response
