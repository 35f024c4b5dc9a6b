"""Audit entries: who changed what, when, and the fields before and after."""

from __future__ import annotations

import secrets
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from shared.types import CampaignId, UtcTime

DEFAULT_PAGE = 50
MAX_PAGE = 200


class AuditAction(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    PAUSE = "pause"
    RESUME = "resume"
    END = "end"
    ARCHIVE = "archive"
    DELETE = "delete"
    UPLOAD = "upload"
    GENERATE = "generate"
    EXPORT = "export"
    RECONCILE = "reconcile"
    ADMIN_INVITE = "admin.invite"
    ADMIN_REMOVE = "admin.remove"
    WEBHOOK_CREATE = "webhook.create"
    WEBHOOK_DELETE = "webhook.delete"
    WEBHOOK_TEST = "webhook.test"
    WEBHOOK_REDELIVER = "webhook.redeliver"
    WEBHOOK_ROTATE = "webhook.rotate_secret"


class Actor(BaseModel):
    """The admin who made the change, as their ID token names them."""

    uid: str
    email: str | None = None


class AuditEntry(BaseModel):
    """One change, as stored in `audit/{entry_id}` and listed by `GET /v1/audit`."""

    entry_id: str = Field(default_factory=lambda: secrets.token_hex(10))
    at: UtcTime
    actor: Actor
    action: AuditAction
    campaign_id: str | None
    # What was changed: a campaign id, a bucket object, a job or a webhook.
    target: str
    # The changed fields only (None: the thing did not exist before, or does not after).
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    # The campaign's edit version after the change (campaign edits only): a refused save lists
    # the entries after the version it was made from.
    version: int | None = None

    def fields(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"entry_id"}) | {"at": self.at}


class AuditContext(BaseModel):
    """Who acts, and when: handed by the edge to the use case, which writes the entry."""

    model_config = ConfigDict(frozen=True)

    actor: Actor
    at: datetime

    def entry(
        self,
        action: AuditAction,
        *,
        campaign_id: str | None,
        target: str,
        before: dict[str, Any] | None = None,
        after: dict[str, Any] | None = None,
        version: int | None = None,
    ) -> AuditEntry:
        return AuditEntry(
            at=self.at,
            actor=self.actor,
            action=action,
            campaign_id=campaign_id,
            target=target,
            before=before,
            after=after,
            version=version,
        )


def entry_for(
    audit: AuditContext | None,
    action: AuditAction,
    *,
    campaign_id: str | None,
    target: str,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEntry | None:
    """The entry `audit` makes of `action`; none where no one acts (a job of the system's own)."""
    if audit is None:
        return None
    return audit.entry(action, campaign_id=campaign_id, target=target, before=before, after=after)


class AuditQuery(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    campaign_id: CampaignId | None = None
    limit: int = Field(default=DEFAULT_PAGE, ge=1, le=MAX_PAGE)
    page_token: Annotated[str, StringConstraints(pattern=r"^[a-f0-9]{20}$")] | None = None


class AuditEntryPublic(BaseModel):
    entry_id: str
    at: UtcTime
    actor: Actor
    action: AuditAction
    campaign_id: str | None
    target: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class AuditList(BaseModel):
    entries: list[AuditEntryPublic]
    # Pass as page_token for the next (older) page; null on the last page.
    next_page_token: str | None = None
