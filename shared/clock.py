"""Wall-clock time in UTC; one function so tests can see what "now" means."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
