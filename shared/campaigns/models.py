"""Campaign models: what the admin API accepts, the stored record, and the views both APIs
return."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from shared.codes import CodeFormat
from shared.types import (
    CampaignId,
    EmailCanonicalization,
    IdentityKind,
    InputTime,
    OnCancel,
    RequestBody,
    SafeText,
    UtcTime,
)

MAX_CODES_PER_USER = 10
DEFAULT_ADMISSIONS_PER_SECOND = 100.0
# Far beyond any pool (imports are bounded by time, not by this), and inside Firestore's int64.
MAX_LOW_STOCK_THRESHOLD = 1_000_000_000
# A hold lasts long enough to check out, and no longer than a day.
MIN_HOLD_SECONDS = 60
MAX_HOLD_SECONDS = 86_400
# A code valid for a minute at least, and for ten years at most.
MIN_VALID_SECONDS = 60
MAX_VALID_SECONDS = 10 * 366 * 86_400
# A fair drop's pre-queue opens at most a week before the start (docs/fair-drops.md).
MAX_PRE_QUEUE_SECONDS = 7 * 86_400

Title = Annotated[SafeText, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
HoldSeconds = Annotated[int, Field(ge=MIN_HOLD_SECONDS, le=MAX_HOLD_SECONDS)]
ValidSeconds = Annotated[int, Field(ge=MIN_VALID_SECONDS, le=MAX_VALID_SECONDS)]
PreQueueSeconds = Annotated[int, Field(ge=0, le=MAX_PRE_QUEUE_SECONDS)]
# A Firebase `firebase.sign_in_provider`: password, phone, anonymous, custom, google.com,
# oidc.<id>, saml.<id>, ...
SignInProvider = Annotated[
    str, StringConstraints(strip_whitespace=True, pattern=r"^[a-z0-9][a-z0-9._-]{0,99}$")
]
# None: every provider may claim. A list: only these (an empty list would let nobody claim).
SignInProviders = Annotated[list[SignInProvider], Field(min_length=1, max_length=20)]


def _distinct(providers: list[str] | None) -> list[str] | None:
    return None if providers is None else sorted(set(providers))


class CampaignStatus(StrEnum):
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    PAUSED = "paused"
    ENDED = "ended"
    SOLD_OUT = "sold_out"


class CampaignCreate(RequestBody):
    campaign_id: CampaignId | None = None
    title: Title
    starts_at: InputTime
    ends_at: InputTime
    max_per_user: int = Field(default=1, ge=1, le=MAX_CODES_PER_USER)
    low_stock_threshold: int | None = Field(default=None, ge=0, le=MAX_LOW_STOCK_THRESHOLD)
    waiting_room_enabled: bool = False
    admissions_per_second: float = Field(default=DEFAULT_ADMISSIONS_PER_SECOND, gt=0, le=100_000)
    # null: a claim is final; a number: a claim is a hold for checkout, released if not redeemed.
    hold_seconds: HoldSeconds | None = None
    identity: IdentityKind = IdentityKind.UID
    # With identity "email": "mailbox" (one inbox, one identity) or "address" (shared/claims/
    # identity.py has the rules per provider).
    email_canonicalization: EmailCanonicalization = EmailCanonicalization.MAILBOX
    allowed_sign_in_providers: SignInProviders | None = None
    require_app_check: bool = False
    on_cancel: OnCancel = OnCancel.KEEP_USED
    # How long a code may be redeemed: for so long after its claim, or until a fixed time
    # (one or the other, or neither: codes never expire).
    codes_valid_for_seconds: ValidSeconds | None = None
    codes_valid_until: InputTime | None = None
    # 0: no pre-queue; otherwise shoppers join this long before the start and are drawn at it.
    pre_queue_seconds: PreQueueSeconds = 0

    @model_validator(mode="after")
    def _window(self) -> Self:
        if self.ends_at <= self.starts_at:
            raise ValueError("ends_at must be after starts_at")
        _one_validity(self.codes_valid_for_seconds, self.codes_valid_until)
        if self.pre_queue_seconds and not self.waiting_room_enabled:
            raise ValueError("a pre-queue admits its draw through the waiting room: enable it")
        self.allowed_sign_in_providers = _distinct(self.allowed_sign_in_providers)
        return self


def _one_validity(seconds: int | None, until: datetime | None) -> None:
    if seconds is not None and until is not None:
        raise ValueError("codes_valid_for_seconds and codes_valid_until exclude each other")


# Fields of an update that may be left out but never set to null.
_NOT_NULLABLE = (
    "title",
    "starts_at",
    "ends_at",
    "max_per_user",
    "paused",
    "waiting_room_enabled",
    "admissions_per_second",
    "identity",
    "email_canonicalization",
    "require_app_check",
    "on_cancel",
    "pre_queue_seconds",
)


def _without_null(schema: dict[str, Any]) -> None:
    """The API description says what _something() enforces: these fields are never null."""
    for name in _NOT_NULLABLE:
        field = schema["properties"][name]
        options = [o for o in field.pop("anyOf", []) if o.get("type") != "null"]
        field.pop("default", None)
        if options:
            field.update(options[0])


class CampaignUpdate(RequestBody):
    model_config = ConfigDict(json_schema_extra=_without_null)

    title: Title | None = None
    starts_at: InputTime | None = None
    ends_at: InputTime | None = None
    max_per_user: int | None = Field(default=None, ge=1, le=MAX_CODES_PER_USER)
    low_stock_threshold: int | None = Field(default=None, ge=0, le=MAX_LOW_STOCK_THRESHOLD)
    paused: bool | None = None
    waiting_room_enabled: bool | None = None
    admissions_per_second: float | None = Field(default=None, gt=0, le=100_000)
    hold_seconds: HoldSeconds | None = None  # null switches holds off for new claims
    # Only until the campaign starts: claims made so far are keyed on the identity (store).
    identity: IdentityKind | None = None
    email_canonicalization: EmailCanonicalization | None = None  # as identity: before the start
    allowed_sign_in_providers: SignInProviders | None = None  # null: every provider again
    require_app_check: bool | None = None
    on_cancel: OnCancel | None = None
    # Read at each redemption from the claim time: a change applies to codes claimed before it.
    codes_valid_for_seconds: ValidSeconds | None = None  # null: no validity after the claim
    codes_valid_until: InputTime | None = None  # null: no fixed end
    # Only until the pre-queue opens (store): its commitment is published from then on.
    pre_queue_seconds: PreQueueSeconds | None = None

    @model_validator(mode="after")
    def _something(self) -> Self:
        if not self.model_fields_set:
            raise ValueError("nothing to update")
        _one_validity(self.codes_valid_for_seconds, self.codes_valid_until)
        self.allowed_sign_in_providers = _distinct(self.allowed_sign_in_providers)
        for name in _NOT_NULLABLE:
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null")
        return self


class CampaignRecord(BaseModel):
    """A campaign as stored in `campaigns/{campaign_id}`."""

    campaign_id: str
    title: str
    starts_at: datetime
    ends_at: datetime
    max_per_user: int = 1
    low_stock_threshold: int | None = None
    paused: bool = False
    waiting_room_enabled: bool = False
    admissions_per_second: float = DEFAULT_ADMISSIONS_PER_SECOND
    # Validated by the API; the record takes any positive value so benchmarks can hold briefly.
    hold_seconds: int | None = Field(default=None, gt=0)
    identity: IdentityKind = IdentityKind.UID
    email_canonicalization: EmailCanonicalization = EmailCanonicalization.MAILBOX
    allowed_sign_in_providers: list[str] | None = None
    require_app_check: bool = False
    on_cancel: OnCancel = OnCancel.KEEP_USED
    codes_valid_for_seconds: int | None = Field(default=None, gt=0)
    codes_valid_until: datetime | None = None
    pre_queue_seconds: int = 0
    # Hex SHA-256 of the drop's secret seed (fairness/secret), set with the pre-queue.
    seed_commitment: str | None = None
    # Set only by a claimer that proved no unassigned code exists; cleared by every import.
    sold_out: bool = False
    sold_out_at: datetime | None = None
    # Bumped by every import and every release of holds, so a claimer's proof of "sold out" is
    # invalidated by codes that became free, and candidate pools scan their ranges again.
    pool_generation: int = 0
    codes_total: int = 0
    # The widest max_per_user ever set: a shopper may hold claims in slots up to it.
    slots_ceiling: int = 1
    # The format every code of the campaign was generated in (shared/codes.py) while that holds:
    # code look-ups and redemptions refuse codes that do not fit it without reading them. Set by
    # the first generation into an empty campaign; an upload or a generation in another format
    # makes the campaign's codes mixed, for good (store.record_generated_format).
    code_format: CodeFormat | None = None
    codes_mixed: bool = False
    # Bumped by every admin edit (not by imports or sales): a save made from an older version
    # is refused, not silently applied over another admin's edit.
    version: int = 0
    # Archived campaigns (ended, kept for their claims and reports) are left out of lists.
    archived: bool = False
    # The job deleting the campaign (shared/control/deletion.py): from then on it is gone for
    # admins and imports and ended for shoppers, until the job removes the document itself.
    deletion_job_id: str | None = None
    created_at: datetime
    updated_at: datetime

    @property
    def deleting(self) -> bool:
        return self.deletion_job_id is not None

    @property
    def slots(self) -> int:
        """The claim slots a shopper may hold claims in: max_per_user may have been lowered
        since claims were made in the higher slots, and those still count."""
        return max(self.max_per_user, self.slots_ceiling)

    def valid_until(self, claimed_at: datetime) -> datetime | None:
        """Until when a code claimed at `claimed_at` may be redeemed (None: no end)."""
        if self.codes_valid_until is not None:
            return self.codes_valid_until
        if self.codes_valid_for_seconds is not None:
            return claimed_at + timedelta(seconds=self.codes_valid_for_seconds)
        return None

    @property
    def pre_queue_opens_at(self) -> datetime | None:
        if not self.pre_queue_seconds:
            return None
        return self.starts_at - timedelta(seconds=self.pre_queue_seconds)

    def status_at(self, now: datetime) -> CampaignStatus:
        if now >= self.ends_at or self.deleting:
            return CampaignStatus.ENDED
        if self.paused:
            return CampaignStatus.PAUSED
        if now < self.starts_at:
            return CampaignStatus.SCHEDULED
        if self.sold_out:
            return CampaignStatus.SOLD_OUT
        return CampaignStatus.ACTIVE


class WaitingRoomStatus(BaseModel):
    enabled: bool
    # Engaged: shoppers are waiting right now; a new arrival would wait about this long.
    engaged: bool
    estimated_wait_seconds: float


class CampaignPublic(BaseModel):
    campaign_id: str
    title: str
    starts_at: UtcTime
    ends_at: UtcTime
    status: CampaignStatus
    remaining: int
    max_per_user: int  # what the page promises: "one code per shopper", or more
    waiting_room: WaitingRoomStatus
    # What the landing page must offer: the sign-in the sale counts and accepts, App Check.
    identity: IdentityKind
    allowed_sign_in_providers: list[str] | None
    require_app_check: bool
    # A fair drop: shoppers join from pre_queue_opens_at (POST …/entries), drawn at the start.
    pre_queue_opens_at: UtcTime | None = None


class CampaignStats(BaseModel):
    codes_total: int
    claimed: int  # every claim ever made, holds included (a released hold stays counted)
    remaining: int  # codes_total - claimed + released + returned - voided while available
    held: int = 0  # holds right now: neither redeemed nor released yet
    redeemed: int = 0
    released: int = 0
    reversed: int = 0  # redemptions undone (cancelled or refunded orders), any on_cancel
    voided: int = 0
    claims_last_minute: int = 0
    projected_sold_out_at: UtcTime | None = None


class CampaignAdmin(BaseModel):
    campaign_id: str
    title: str
    starts_at: UtcTime
    ends_at: UtcTime
    status: CampaignStatus
    max_per_user: int
    low_stock_threshold: int | None
    paused: bool
    waiting_room_enabled: bool
    admissions_per_second: float
    hold_seconds: int | None
    identity: IdentityKind
    email_canonicalization: EmailCanonicalization
    allowed_sign_in_providers: list[str] | None
    require_app_check: bool
    on_cancel: OnCancel
    codes_valid_for_seconds: int | None
    codes_valid_until: UtcTime | None
    # The format every code was generated in (a checkout may test typed codes against it with
    # web/codedrop.js isWellFormed), or null.
    code_format: CodeFormat | None = None
    version: int
    archived: bool
    pre_queue_seconds: int = 0
    seed_commitment: str | None = None
    created_at: UtcTime
    updated_at: UtcTime
    stats: CampaignStats | None = None


class CampaignList(BaseModel):
    campaigns: list[CampaignAdmin]


# What an admin edits, as the audit log shows it before and after a change.
AUDITED_FIELDS = frozenset(CampaignUpdate.model_fields) | {"archived"}


def audited(
    record: CampaignRecord, names: frozenset[str] | set[str] = AUDITED_FIELDS
) -> dict[str, Any]:
    return record.model_dump(mode="json", include=set(names))
