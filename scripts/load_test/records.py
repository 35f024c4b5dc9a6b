"""What the shoppers (shoppers.py) record and how they retry: the kinds of request in the JSONL
records and the final answers of a claim."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

TICKET_HEADER = "X-Waiting-Room-Ticket"
# What a request is, in the JSONL records.
KIND_CAMPAIGN, KIND_CLAIM, KIND_DOUBLE, KIND_ME, KIND_JOURNEY = (
    "campaign",
    "claim",
    "double_click",
    "me",
    "journey",
)
# Final answers of a claim; 503 and 429 are "try again", anything else is an error answer.
CODE, SOLD_OUT, ERROR, UNANSWERED = "code", "sold_out", "error", "unanswered"
RETRIED_STATUSES = (429, 503)
CONNECTION_RETRY_PAUSE = 0.1  # a browser retries a request on a dropped keep-alive at once
MAX_RETRY_AFTER = 30.0


class Recorder:
    """JSONL lines, buffered and appended with one write() each flush (under a lock: threads
    never interleave inside a line)."""

    def __init__(self, *, flush_every: int) -> None:
        self._flush_every = flush_every
        self._fd: int | None = None
        self._lines: list[str] = []
        self._lock = threading.Lock()

    def open(self, path: str) -> None:
        self.close()
        if path:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def add(self, record: dict[str, Any]) -> None:
        if self._fd is None:
            return
        line = json.dumps(record, separators=(",", ":"))
        with self._lock:
            self._lines.append(line)
            if len(self._lines) >= self._flush_every:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._fd is None or not self._lines:
            return
        data = ("\n".join(self._lines) + "\n").encode()
        self._lines.clear()
        written = 0
        while written < len(data):
            written += os.write(self._fd, data[written:])

    def close(self) -> None:
        with self._lock:
            self._flush_locked()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def json_object(text: str | bytes | None) -> dict[str, Any]:
    """A response body's JSON object, or {} (empty, not JSON, or not an object)."""
    try:
        body = json.loads(text) if text else {}
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def retry_after_seconds(raw: str | None) -> float:
    """A Retry-After header's seconds (1 when absent or unreadable), at most MAX_RETRY_AFTER."""
    try:
        seconds = float(raw) if raw is not None else 1.0
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
