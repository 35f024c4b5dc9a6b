"""Pydantic models: what the API accepts (Create/Update), what it returns (Public), and the
records kept in Firestore. Validation errors become 400 REQUEST_VALIDATION_FAILED at the edge."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    computed_field,
    model_validator,
)

MAX_CODES_PER_USER = 10
DEFAULT_ADMISSIONS_PER_SECOND = 100.0

CampaignId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")]
Title = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Times go out as RFC 3339 UTC strings ("2026-11-21T10:00:00.000Z").
UtcTime = Annotated[AwareDatetime, PlainSerializer(_rfc3339, return_type=str)]


class CampaignStatus(StrEnum):
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    PAUSED = "paused"
    ENDED = "ended"
    SOLD_OUT = "sold_out"


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class CampaignCreate(_Input):
    campaign_id: CampaignId | None = None
    title: Title
    starts_at: AwareDatetime
    ends_at: AwareDatetime
    max_per_user: int = Field(default=1, ge=1, le=MAX_CODES_PER_USER)
    low_stock_threshold: int | None = Field(default=None, ge=0)
    waiting_room_enabled: bool = False
    admissions_per_second: float = Field(default=DEFAULT_ADMISSIONS_PER_SECOND, gt=0, le=100_000)

    @model_validator(mode="after")
    def _window(self) -> Self:
        if self.ends_at <= self.starts_at:
            raise ValueError("ends_at must be after starts_at")
        return self


class CampaignUpdate(_Input):
    title: Title | None = None
    starts_at: AwareDatetime | None = None
    ends_at: AwareDatetime | None = None
    max_per_user: int | None = Field(default=None, ge=1, le=MAX_CODES_PER_USER)
    low_stock_threshold: int | None = Field(default=None, ge=0)
    paused: bool | None = None
    waiting_room_enabled: bool | None = None
    admissions_per_second: float | None = Field(default=None, gt=0, le=100_000)

    @model_validator(mode="after")
    def _something(self) -> Self:
        if not self.model_fields_set:
            raise ValueError("nothing to update")
        for name in (
            "title",
            "starts_at",
            "ends_at",
            "max_per_user",
            "paused",
            "waiting_room_enabled",
            "admissions_per_second",
        ):
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
    # Set only by a claimer that proved no unassigned code exists; cleared by every import.
    sold_out: bool = False
    sold_out_at: datetime | None = None
    # Bumped by every import so a claimer's proof of "sold out" is invalidated by new codes.
    pool_generation: int = 0
    codes_total: int = 0
    # The widest max_per_user ever set: a shopper may hold claims in slots up to it.
    slots_ceiling: int = 1
    created_at: datetime
    updated_at: datetime

    def status_at(self, now: datetime) -> CampaignStatus:
        if now >= self.ends_at:
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
    waiting_room: WaitingRoomStatus


class CampaignStats(BaseModel):
    codes_total: int
    claimed: int
    remaining: int
    claims_last_minute: int = 0
    projected_sold_out_at: UtcTime | None = None


class ReportGranularity(StrEnum):
    HOUR = "hour"
    DAY = "day"


class ReportPoint(BaseModel):
    period_start: UtcTime
    claimed: int
    imported: int


class UsageReport(BaseModel):
    campaign_id: str
    granularity: ReportGranularity
    claimed: int
    imported: int
    series: list[ReportPoint]


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
    created_at: UtcTime
    updated_at: UtcTime
    stats: CampaignStats | None = None


class CampaignList(BaseModel):
    campaigns: list[CampaignAdmin]


class ClaimRecord(BaseModel):
    """A claim as stored in `campaigns/{campaign_id}/claims/{claim_id}`."""

    claim_id: str
    campaign_id: str
    user_id: str
    coupon_id: str
    code: str
    slot: int
    claimed_at: datetime
    idempotency_key: str | None = None


class ClaimPublic(BaseModel):
    claim_id: str
    campaign_id: str
    user_id: str
    code: str
    claimed_at: UtcTime


class HeldClaim(BaseModel):
    claim_id: str
    code: str
    claimed_at: UtcTime


class HeldClaims(BaseModel):
    claims: list[HeldClaim]


class ErrorBody(BaseModel):
    error_code: str
    error_message: str


class JobKind(StrEnum):
    IMPORT = "import"
    GENERATE = "generate"


class JobState(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


MAX_JOB_ERRORS = 100


class JobError(BaseModel):
    line: int
    reason: str
    value: str = ""  # escaped for spreadsheets (csv_intake.report_value)


class JobRecord(BaseModel):
    """An import or generation job as stored in `jobs/{job_id}`."""

    job_id: str
    kind: JobKind
    campaign_id: str
    state: JobState = JobState.RUNNING
    source: str | None = None  # gs://bucket/object#generation
    parent_job_id: str | None = None
    requested: int | None = None  # generation: how many codes were asked for
    code_length: int | None = None
    code_prefix: str | None = None
    rounds: int = 0  # generation: CSV files written so far (collisions cause another round)
    rows_read: int = 0
    imported: int = 0
    duplicates_in_file: int = 0
    duplicates_in_campaign: int = 0
    invalid: int = 0
    errors: list[JobError] = Field(default_factory=list)
    failure_reason: str | None = None
    attempts: int = 1
    files: list[str] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None


class JobPublic(BaseModel):
    job_id: str
    kind: JobKind
    campaign_id: str
    state: JobState
    source: str | None
    parent_job_id: str | None
    requested: int | None
    rows_read: int
    imported: int
    duplicates: int
    duplicates_in_file: int
    duplicates_in_campaign: int
    invalid: int
    errors: list[JobError]
    failure_reason: str | None
    files: list[str]
    created_at: UtcTime
    updated_at: UtcTime
    finished_at: UtcTime | None
    duration_seconds: float | None

    @classmethod
    def of(cls, job: JobRecord) -> JobPublic:
        duration = (job.finished_at - job.created_at).total_seconds() if job.finished_at else None
        return cls(
            **job.model_dump(exclude={"attempts", "code_length", "code_prefix", "rounds"}),
            duplicates=job.duplicates_in_file + job.duplicates_in_campaign,
            duration_seconds=duration,
        )


class JobList(BaseModel):
    jobs: list[JobPublic]


class JobAccepted(BaseModel):
    job_id: str


# Letters and digits a shopper cannot confuse when typing a code: no 0/O, 1/I/L.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"


class GenerateCodes(_Input):
    count: int = Field(ge=1, le=1_000_000)
    length: int = Field(default=10, ge=6, le=32)
    prefix: Annotated[str, StringConstraints(pattern=r"^[A-Z0-9-]{0,16}$")] = ""


class CounterCheck(BaseModel):
    counted: int  # from the coupon documents
    counters: int  # what the sharded counters said before any repair

    @computed_field  # type: ignore[prop-decorator]
    @property
    def difference(self) -> int:
        return self.counted - self.counters


class ReconciliationReport(BaseModel):
    campaign_id: str
    checked_at: UtcTime
    repaired: bool
    claimed: CounterCheck
    imported: CounterCheck
    hours_differing: int


class ReconcileRequest(_Input):
    repair: bool = True


class SweepRequest(_Input):
    window_minutes: int = Field(default=60, ge=1, le=7 * 24 * 60)
    grace_seconds: int = Field(default=120, ge=0, le=3600)


class SweepResult(BaseModel):
    outbox_published: int
    claims_republished: int
    failures: list[str]
