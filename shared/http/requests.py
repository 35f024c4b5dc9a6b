"""What a request carries, read within bounds and validated strictly: its JSON body, its query,
its path ids and the caller's address."""

from __future__ import annotations

import re
from typing import TypeVar

import flask
from pydantic import BaseModel, TypeAdapter, ValidationError
from werkzeug.exceptions import RequestEntityTooLarge

from shared import errors
from shared.types import CampaignId

# Every API body is a small JSON object; nothing larger is read into memory.
MAX_BODY_BYTES = 64 * 1024
# The WSGI layer (shared/http/wsgi.py) marks a request whose body it refused to read.
BODY_REFUSED = "codedrop.body_refused"
# A validation error lists at most this many problems, each cut short.
MAX_PROBLEMS = 5

M = TypeVar("M", bound=BaseModel)
_CAMPAIGN_ID: TypeAdapter[str] = TypeAdapter(CampaignId)


def describe(exc: ValidationError) -> str:
    """A validation failure in a few bounded lines: the first problems, never the input."""
    items = exc.errors(include_url=False, include_input=False, include_context=False)
    parts = []
    for item in items[:MAX_PROBLEMS]:
        where = ".".join(str(p)[:32] for p in item["loc"])[:64] or "body"
        parts.append(f"{where}: {item['msg'][:160]}")
    more = len(items) - MAX_PROBLEMS
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def refused(request: flask.Request) -> bool:
    """Whether the body is over the limit, by what the WSGI layer saw or the header says."""
    return bool(request.environ.get(BODY_REFUSED)) or (request.content_length or 0) > MAX_BODY_BYTES


def too_large() -> errors.RequestTooLarge:
    return errors.RequestTooLarge(f"The body is larger than {MAX_BODY_BYTES} bytes.")


def _raw_body(request: flask.Request) -> bytes:
    """The body, never more than MAX_BODY_BYTES of it read."""
    if refused(request):
        raise too_large()
    request.max_content_length = MAX_BODY_BYTES
    try:
        return request.get_data()
    except RequestEntityTooLarge:
        raise too_large() from None


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
