"""Routes with their access and contract declared where they are written, and the router that
matches a request to one, checks its caller, validates its body and query, and turns every
failure into the documented error body."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar, Unpack

import flask
from pydantic import BaseModel
from werkzeug.exceptions import MethodNotAllowed as WerkzeugMethodNotAllowed
from werkzeug.exceptions import NotFound as WerkzeugNotFound
from werkzeug.routing import Map, Rule

from shared import errors
from shared.audit.models import Actor, AuditContext
from shared.clock import utcnow
from shared.container import Services
from shared.http.access import NEEDS_CUSTOM_CLAIM, NEEDS_TOKEN, Access, authorize
from shared.http.auth import Principal
from shared.http.cors import Cors
from shared.http.requests import parse_body, parse_query, refused, too_large
from shared.http.responses import error_response, status_of
from shared.logs import request_context, trace_fields

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


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
        """The caller of a route that takes a token (the router has authenticated them)."""
        if self.principal is None:
            raise errors.Unauthenticated()
        return self.principal

    def audit(self) -> AuditContext:
        """Who is acting, and when, for the audit entry written with the change."""
        user = self.user
        return AuditContext(actor=Actor(uid=user.user_id, email=user.email), at=utcnow())

    def body_as(self, model: type[M]) -> M:
        if not isinstance(self.body, model):
            raise TypeError(f"the route did not declare body={model.__name__}")
        return self.body

    def query_as(self, model: type[M]) -> M:
        if not isinstance(self.query, model):
            raise TypeError(f"the route did not declare query={model.__name__}")
        return self.query


Handler = Callable[..., flask.Response]
Decorator = Callable[[Handler], Handler]


class Contract(TypedDict, total=False):
    """What a route may declare besides its rule, methods and access (see RouteInfo)."""

    summary: str
    body: type[BaseModel] | None
    query: type[BaseModel] | None
    responses: Mapping[int, type[BaseModel] | None]
    raises: Sequence[type[errors.CodedropError]]
    error_bodies: Mapping[type[errors.CodedropError], type[BaseModel]]
    headers: Mapping[str, Mapping[str, Any]]
    content_type: str


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

    @property
    def endpoint(self) -> str:
        return f"{self.handler.__module__}.{self.handler.__name__}"

    def documented_errors(self) -> dict[int, list[type[errors.CodedropError]]]:
        """Every error this route can answer, by status."""
        found: list[type[errors.CodedropError]] = [errors.RequestTooLarge, *self.raises]
        if self.body is not None or self.query is not None or self.headers:
            found.append(errors.RequestValidationFailed)
        if self.access in NEEDS_TOKEN:
            found.append(errors.Unauthenticated)
        if self.access in NEEDS_CUSTOM_CLAIM:
            found.append(errors.Forbidden)
        if self.access is Access.SHOPIFY_WEBHOOK:
            found.append(errors.InvalidSignature)
        if "<" in self.rule:
            # An id no route can match (a line break in it) is answered before any handler.
            found.append(errors.NotFound)
        by_status: dict[int, list[type[errors.CodedropError]]] = {}
        for cls in found:
            listed = by_status.setdefault(status_of(cls), [])
            if cls not in listed:
                listed.append(cls)
        return dict(sorted(by_status.items()))


def _summary(handler: Handler) -> str:
    """The first paragraph of the handler's docstring, on one line."""
    return " ".join(inspect.cleandoc(handler.__doc__ or "").split("\n\n")[0].split())


@dataclass
class _Stacked:
    """What `answers` and `raises` declared on a handler, for the route decorator above them."""

    responses: dict[int, type[BaseModel] | None] = field(default_factory=dict)
    raises: list[type[errors.CodedropError]] = field(default_factory=list)


_STACKED = "__codedrop_contract__"
_REGISTERED = "__codedrop_route__"


def _stacked(handler: Handler) -> _Stacked:
    if getattr(handler, _REGISTERED, False):
        raise TypeError(f"{handler.__name__}: put answers and raises below the route decorator")
    stacked: _Stacked | None = getattr(handler, _STACKED, None)
    if stacked is None:
        stacked = _Stacked()
        setattr(handler, _STACKED, stacked)
    return stacked


def answers(status: int, model: type[BaseModel] | None = None) -> Decorator:
    """Declare a success answer of the route decorated above: its status and body (None: a
    free-form JSON object). One per status, read top to bottom."""

    def declare(handler: Handler) -> Handler:
        stacked = _stacked(handler)
        stacked.responses = {status: model, **stacked.responses}  # decorators apply bottom-up
        return handler

    return declare


def raises(*raised: type[errors.CodedropError]) -> Decorator:
    """Declare errors the handler itself raises; the router adds those of access, body and
    size."""

    def declare(handler: Handler) -> Handler:
        stacked = _stacked(handler)
        stacked.raises = [*raised, *stacked.raises]
        return handler

    return declare


class Routes:
    """Routes declared by one module, in order; a Router serves them once it includes them."""

    def __init__(self) -> None:
        self._routes: dict[str, RouteInfo] = {}

    def route(
        self, rule: str, *, methods: list[str], access: Access, **contract: Unpack[Contract]
    ) -> Decorator:
        """Register a handler `(call, **path_params)`. `access` is required, so no route can be
        added without saying who may call it. The rest of its contract is given here or stacked
        below (`answers`, `raises`); the summary defaults to the handler's docstring. `body` and
        `query` are validated before the handler runs; the answers and errors document it
        (shared/http/openapi.py)."""

        def register(handler: Handler) -> Handler:
            stacked: _Stacked = getattr(handler, _STACKED, None) or _Stacked()
            setattr(handler, _REGISTERED, True)
            self._add(
                RouteInfo(
                    rule=rule,
                    methods=tuple(sorted(methods)),
                    access=access,
                    handler=handler,
                    summary=contract.get("summary") or _summary(handler),
                    body=contract.get("body"),
                    query=contract.get("query"),
                    responses={**contract.get("responses", {}), **stacked.responses} or {200: None},
                    raises=(*contract.get("raises", ()), *stacked.raises),
                    error_bodies=dict(contract.get("error_bodies") or {}),
                    headers=dict(contract.get("headers") or {}),
                    content_type=contract.get("content_type", "application/json"),
                )
            )
            return handler

        return register

    def get(self, rule: str, *, access: Access, **contract: Unpack[Contract]) -> Decorator:
        return self.route(rule, methods=["GET"], access=access, **contract)

    def post(self, rule: str, *, access: Access, **contract: Unpack[Contract]) -> Decorator:
        return self.route(rule, methods=["POST"], access=access, **contract)

    def patch(self, rule: str, *, access: Access, **contract: Unpack[Contract]) -> Decorator:
        return self.route(rule, methods=["PATCH"], access=access, **contract)

    def delete(self, rule: str, *, access: Access, **contract: Unpack[Contract]) -> Decorator:
        return self.route(rule, methods=["DELETE"], access=access, **contract)

    def _add(self, route: RouteInfo) -> None:
        self._routes[route.endpoint] = route

    def routes(self) -> list[RouteInfo]:
        """Every route with its methods, access and contract, in the order they were added."""
        return list(self._routes.values())


class Router(Routes):
    """One function's API: maps method + path to a handler and every failure to the documented
    error body."""

    def __init__(self, *, title: str, cors: bool = False) -> None:
        super().__init__()
        self.title = title
        self._map = Map(strict_slashes=False)
        self._cors = cors

    @property
    def cors(self) -> bool:
        return self._cors

    def include(self, routes: Routes) -> None:
        """Serve another module's routes here."""
        for route in routes.routes():
            self._add(route)

    def _add(self, route: RouteInfo) -> None:
        super()._add(route)
        self._map.add(Rule(route.rule, endpoint=route.endpoint, methods=list(route.methods)))

    def dispatch(self, request: flask.Request, services: Services) -> flask.Response:
        with request_context(trace_fields(request.headers, services.settings.project_id)):
            return self._dispatch(request, services)

    def _call(self, request: flask.Request, services: Services) -> flask.Response:
        adapter = self._map.bind("", path_info=request.path)
        endpoint, params = adapter.match(method=request.method)
        route = self._routes[str(endpoint)]
        principal = authorize(request, route.access, services)
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
            if refused(request):
                raise too_large()
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
