"""Types every package's models share: RFC 3339 UTC times, ids, safe text, and the base of
request bodies."""

from __future__ import annotations

import threading
import unicodedata
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
)

CampaignId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")]
# Job ids are generated ("imp-…", "gen-…"); a document id starting with "__" is Firestore's.
JobId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]
# A Firebase Auth uid (at most 128 characters) as admin routes take it.
FirebaseUid = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")]

# Times a caller may send: a campaign window, an event's moment. Far enough apart for any sale,
# and far from the ends of the calendar, where converting to UTC overflows.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)


class IdentityKind(StrEnum):
    """What a campaign's per-user limit counts (shared/claims/identity.py keys it)."""

    UID = "uid"
    PHONE = "phone"
    EMAIL = "email"


def rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Times go out as RFC 3339 UTC strings ("2026-11-21T10:00:00.000Z").
UtcTime = Annotated[AwareDatetime, PlainSerializer(rfc3339, return_type=str)]


def _within_calendar(value: datetime) -> datetime:
    # Comparing aware datetimes never converts them, so this is safe at year 1 and 9999.
    if not EARLIEST <= value < LATEST:
        raise ValueError(f"must be between {rfc3339(EARLIEST)} and {rfc3339(LATEST)}")
    return value.astimezone(UTC)


# A time from a caller: RFC 3339 with an offset, kept in UTC, within EARLIEST..LATEST.
InputTime = Annotated[AwareDatetime, AfterValidator(_within_calendar)]

# Bidirectional controls reorder what a reader sees (a title reading one way, stored another).
_BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def _printable(value: str) -> str:
    for char in value:
        if char in _BIDI_CONTROLS:
            raise ValueError("must not hold bidirectional control characters")
        if unicodedata.category(char) in ("Cc", "Cs"):
            raise ValueError("must not hold control characters (NUL, newlines, tabs…)")
    return value


# The same rule as a JSON Schema pattern, for the API description (surrogates never pass JSON).
SAFE_TEXT_PATTERN = (
    "^[^\\x00-\\x1f\\x7f-\\x9f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
)

# Text shown to shoppers (titles): no control characters, no bidi controls.
SafeText = Annotated[
    str, AfterValidator(_printable), Field(json_schema_extra={"pattern": SAFE_TEXT_PATTERN})
]


class RequestBody(BaseModel):
    """What the APIs accept: strict types (no "5" for 5, no 1 for true, no epoch seconds for a
    time), and unknown fields refused rather than silently ignored."""

    model_config = ConfigDict(extra="forbid", strict=True, str_strip_whitespace=True)


@dataclass
class Tally:
    """Counters that many threads add to (a subclass declares them as int fields); a snapshot
    reads them all at one moment."""

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "_lock"}
