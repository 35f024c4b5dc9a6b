"""Answers: JSON bodies, and the one place an error becomes its status and documented body."""

from __future__ import annotations

import json
from typing import Any

import flask
from pydantic import BaseModel

from shared import errors

# A backstop: whatever an error message quotes, the answer stays small.
MAX_MESSAGE_CHARS = 500

# Subclasses inherit their family's status.
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


class ErrorBody(BaseModel):
    """Every error the functions answer: `{"error_code": "UPPER_SNAKE", "error_message": …}`."""

    error_code: str
    error_message: str


def status_of(cls: type[errors.CodedropError]) -> int:
    for base in cls.__mro__:
        if base in _STATUS:
            return _STATUS[base]
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


def error_body(error_code: str, message: str) -> dict[str, Any]:
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
    return json_response(body, status_of(type(error)), headers)
