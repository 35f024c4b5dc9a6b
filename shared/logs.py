"""JSON-lines logs in Cloud Logging's structured format, grouped by request.

Each line carries `severity`, `message`, the source location and any `extra=` fields; inside a
request it also carries `logging.googleapis.com/trace` (from the `traceparent` or
`X-Cloud-Trace-Context` header Google's front end adds), so the console shows a request's lines
together under its trace.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has; anything else came from `extra=` and is logged as a field.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}

_TRACEPARENT = re.compile(
    r"^[0-9a-f]{2}-(?P<trace>[0-9a-f]{32})-(?P<span>[0-9a-f]{16})-(?P<flags>[0-9a-f]{2})$"
)
_CLOUD_TRACE = re.compile(
    r"^(?P<trace>[0-9a-fA-F]{32})(?:/(?P<span>\d{1,20}))?(?:;o=(?P<o>[01]))?$"
)

_trace: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "codedrop_trace", default=None
)


def trace_fields(headers: Mapping[str, str] | Any, project_id: str) -> dict[str, Any]:
    """Cloud Logging's trace fields for a request, from its trace headers (none if absent)."""
    trace = span = None
    sampled = False
    if match := _TRACEPARENT.match(headers.get("traceparent", "")):
        trace, span = match["trace"], match["span"]
        sampled = int(match["flags"], 16) & 1 == 1
    elif match := _CLOUD_TRACE.match(headers.get("X-Cloud-Trace-Context", "")):
        trace, sampled = match["trace"].lower(), match["o"] == "1"
        span = f"{int(match['span']):016x}" if match["span"] else None
    if trace is None:
        return {}
    fields: dict[str, Any] = {
        "logging.googleapis.com/trace": f"projects/{project_id}/traces/{trace}",
        "logging.googleapis.com/trace_sampled": sampled,
    }
    if span:
        fields["logging.googleapis.com/spanId"] = span
    return fields


@contextmanager
def request_context(fields: dict[str, Any]) -> Iterator[None]:
    """Every line logged inside carries `fields` (the request's trace)."""
    token = _trace.set(fields or None)
    try:
        yield
    finally:
        _trace.reset(token)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname,
            "message": record.getMessage(),
            "logger": record.name,
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "logging.googleapis.com/sourceLocation": {
                "file": record.pathname,
                "line": record.lineno,
                "function": record.funcName,
            },
        }
        entry.update(_trace.get() or {})
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: int = logging.INFO) -> None:
    root = logging.getLogger()
    if any(isinstance(h.formatter, JsonFormatter) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root.handlers = [handler]
    root.setLevel(level)
    # httpx logs every request at INFO; the webhook deliveries log their own failures.
    logging.getLogger("httpx").setLevel(max(level, logging.WARNING))
