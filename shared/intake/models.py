"""Intake models: import, generation and assignment jobs, and the generation request."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import BaseModel, Field, StringConstraints, model_validator

from shared.codes import CODE_ALPHABET, PATTERN_SLOT, Alphabet, CodeFormat, Pattern
from shared.events.models import CodesImported
from shared.types import RequestBody, UtcTime


class JobKind(StrEnum):
    IMPORT = "import"
    GENERATE = "generate"
    ASSIGNMENT = "assignment"
    EXPORT = "export"
    DELETE = "delete"


class JobState(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


MAX_JOB_ERRORS = 100


class JobError(BaseModel):
    line: int
    reason: str
    value: str = ""  # escaped for spreadsheets (csv_intake.report_value)


class LineRange(BaseModel):
    """Lines `first` to `last` of a file (rows between them reported elsewhere may be mixed
    in: invalid or repeated ones)."""

    first: int
    last: int


class JobRecord(BaseModel):
    """An import, generation or assignment job as stored in `jobs/{job_id}`."""

    job_id: str
    kind: JobKind
    campaign_id: str
    state: JobState = JobState.RUNNING
    source: str | None = None  # gs://bucket/object#generation
    parent_job_id: str | None = None
    requested: int | None = None  # generation: how many codes were asked for
    # Generation: the codes' format (jobs requested before formats existed have a length and
    # a prefix instead).
    code_format: CodeFormat | None = None
    code_length: int | None = None
    code_prefix: str | None = None
    rounds: int = 0  # generation: CSV files written so far (collisions cause another round)
    rows_read: int = 0
    imported: int = 0
    duplicates_in_file: int = 0
    duplicates_in_campaign: int = 0
    invalid: int = 0
    errors: list[JobError] = Field(default_factory=list)
    # Assignment jobs: recipients given a code now, holding one already, left without one
    # (the pool ran out; their lines as ranges); repeats of a recipient count as
    # duplicates_in_file. `result` names the CSV written for the email tool.
    assigned: int = 0
    already_held: int = 0
    unassigned: int = 0
    unassigned_lines: list[LineRange] = Field(default_factory=list)
    result: str | None = None
    # Imports: codes taken with a warning (a formula), and the report of every row not taken
    # as it was (gs:// URI; downloaded through GET /v1/jobs/{job_id}/download).
    warnings: int = 0
    report: str | None = None
    # Export jobs: what is exported (claims, redemptions, codes) and how many rows were written.
    export_kind: str | None = None
    exported: int = 0
    # Deletion jobs: the campaign's documents and bucket objects removed so far.
    deleted: int = 0
    failure_reason: str | None = None
    attempts: int = 1
    # When this import's write ramp began: a retried attempt continues it instead of restarting.
    ramp_started_at: datetime | None = None
    files: list[str] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None

    def restarted(self, now: datetime) -> JobRecord:
        """An attempt's starting point: counts from zero (rows a crashed attempt wrote are
        recognised as this job's own and counted again, exactly once), the write ramp going on
        from where it began."""
        return self.model_copy(
            update={
                "rows_read": 0,
                "imported": 0,
                "duplicates_in_file": 0,
                "duplicates_in_campaign": 0,
                "invalid": 0,
                "errors": [],
                "warnings": 0,
                "report": None,
                "assigned": 0,
                "already_held": 0,
                "unassigned": 0,
                "unassigned_lines": [],
                "result": None,
                "ramp_started_at": self.ramp_started_at or now,
            }
        )


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
    assigned: int
    already_held: int
    unassigned: int
    unassigned_lines: list[LineRange]
    result: str | None
    warnings: int
    report: str | None
    export_kind: str | None
    exported: int
    deleted: int
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
            **job.model_dump(
                exclude={
                    "attempts",
                    "code_format",
                    "code_length",
                    "code_prefix",
                    "rounds",
                    "ramp_started_at",
                }
            ),
            duplicates=job.duplicates_in_file + job.duplicates_in_campaign,
            duration_seconds=duration,
        )


class JobList(BaseModel):
    jobs: list[JobPublic]


class JobAccepted(BaseModel):
    job_id: str


class GenerateCodes(RequestBody):
    """Either `length` random characters after `prefix`, or a `pattern` (shared.codes); either
    way over `alphabet`, the last character a check character if `check` says so."""

    count: int = Field(ge=1, le=1_000_000)
    length: int = Field(default=10, ge=6, le=32)
    prefix: Annotated[str, StringConstraints(pattern=r"^[A-Z0-9-]{0,16}$")] = ""
    pattern: Pattern | None = None
    alphabet: Alphabet = CODE_ALPHABET
    check: Literal["luhn_mod_n"] | None = None

    @model_validator(mode="after")
    def _one_shape(self) -> Self:
        if self.pattern is not None and {"length", "prefix"} & self.model_fields_set:
            raise ValueError("give either a pattern or a length and prefix, not both")
        self.code_format()  # the combination must be a valid format (enough random characters)
        return self

    def code_format(self) -> CodeFormat:
        pattern = self.pattern or self.prefix + PATTERN_SLOT * self.length
        return CodeFormat(pattern=pattern, alphabet=self.alphabet, check=self.check)


# A file name as a marketer's computer names it: no folder (no "/"), nothing hidden, a .csv.
UPLOAD_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._()+-]{0,99}\.[cC][sS][vV]$"


class UploadCreate(RequestBody):
    name: Annotated[str, StringConstraints(pattern=UPLOAD_NAME_PATTERN)]


class UploadSession(BaseModel):
    # PUT the file's bytes here (Content-Type: text/csv); no credentials needed, valid a week.
    upload_url: str
    bucket: str
    object: str  # imports/{campaign_id}/{name}: its job appears in the campaign's jobs


def codes_imported(job: JobRecord, *, now: datetime) -> CodesImported:
    return CodesImported(
        event_id=f"imported.{job.job_id}",
        campaign_id=job.campaign_id,
        occurred_at=job.finished_at or now,
        count=job.imported,
        job_id=job.job_id,
    )
