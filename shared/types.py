"""Types every package's models share: RFC 3339 UTC times, ids, and the base of request bodies."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, PlainSerializer, StringConstraints

CampaignId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")]


class IdentityKind(StrEnum):
    """What a campaign's per-user limit counts (shared/claims/identity.py keys it)."""

    UID = "uid"
    PHONE = "phone"
    EMAIL = "email"


def rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Times go out as RFC 3339 UTC strings ("2026-11-21T10:00:00.000Z").
UtcTime = Annotated[AwareDatetime, PlainSerializer(rfc3339, return_type=str)]


class RequestBody(BaseModel):
    """What the APIs accept: unknown fields are refused rather than silently ignored."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
