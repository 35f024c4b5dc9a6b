"""Types every package's models share: RFC 3339 UTC times, ids, safe text, and the base of
request bodies."""

from __future__ import annotations

import re
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
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

CAMPAIGN_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
CAMPAIGN_ID_RULE = "1-63 lower-case letters, digits, - or _, starting with a letter or digit"
_CAMPAIGN_ID = re.compile(CAMPAIGN_ID_PATTERN)


def _campaign_id(value: str) -> str:
    # Said in words: pydantic's own message for a pattern is the regular expression.
    if not _CAMPAIGN_ID.match(value):
        raise PydanticCustomError("campaign_id", f"a campaign id is {CAMPAIGN_ID_RULE}")
    return value


CampaignId = Annotated[
    str,
    AfterValidator(_campaign_id),
    WithJsonSchema({"type": "string", "pattern": CAMPAIGN_ID_PATTERN}),
]
# Job ids are generated ("imp-…", "gen-…"); a document id starting with "__" is Firestore's.
JobId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]
# A Firebase Auth uid (at most 128 characters) as admin routes take it.
FirebaseUid = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")]

# Times a caller may send: a campaign window, an event's moment. Far enough apart for any sale,
# and far from the ends of the calendar, where converting to UTC overflows.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)


class OnCancel(StrEnum):
    """What a reversed redemption does with its code (the campaign's `on_cancel`)."""

    RETURN_TO_POOL = "return_to_pool"  # free for the next shopper
    RETURN_TO_SHOPPER = "return_to_shopper"  # the shopper keeps it, redeemable again
    KEEP_USED = "keep_used"  # used for good


class IdentityKind(StrEnum):
    """What a campaign's per-user limit counts (shared/claims/identity.py keys it)."""

    UID = "uid"
    PHONE = "phone"
    EMAIL = "email"


class EmailCanonicalization(StrEnum):
    """How a campaign with identity "email" tells two addresses apart (shared/claims/identity.py
    holds the rules and the table of providers)."""

    MAILBOX = "mailbox"  # one inbox, one identity: lower-cased, +tag dropped, provider rules
    ADDRESS = "address"  # every address as written, lower-cased only


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

# Never in text shown to shoppers: control characters (Cc), line and paragraph separators (Zl,
# Zp: U+2028/2029 break lines as a newline does), format characters (Cf: bidirectional controls,
# which make a title read one way and be stored another, zero-width characters that hide a
# difference), private-use (Co), unassigned (Cn) and surrogate (Cs) code points.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Cf", "Co", "Cn", "Zl", "Zp"})


def _printable(value: str) -> str:
    for char in value:
        category = unicodedata.category(char)
        if category in _REFUSED_CATEGORIES:
            raise ValueError(
                f"must not hold control, format, separator, private-use or unassigned "
                f"characters (found U+{ord(char):04X}, category {category})"
            )
    return value


# The same rule as a JSON Schema pattern, for the API description: it names the controls, the
# separators, the common format characters and the private-use area; the validator above refuses
# every character of these categories (a pattern cannot name the unassigned ones).
SAFE_TEXT_PATTERN = (
    "^[^\\x00-\\x1f\\x7f-\\x9f\\u00ad\\u061c\\u180e\\u200b-\\u200f\\u2028-\\u202e"
    "\\u2060-\\u2064\\u2066-\\u206f\\ue000-\\uf8ff\\ufeff\\ufff9-\\ufffb]*$"
)

# Text shown to shoppers (titles).
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
