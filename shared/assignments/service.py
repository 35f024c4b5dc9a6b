"""Assignment jobs: a recipient list dropped at `assignments/{campaign_id}/{name}.csv`.

One job per object generation, as for imports (shared/intake/service.py): a redelivered event
finds its job finished and does nothing; a new upload is a new job, in which every recipient
given a code before is `already_held` with that same code. A job left running by a crash is
resumed by the event's redelivery: the list is read again from the start, rows the crashed
attempt committed are recognised by their claim slot (this job, this line) and counted once,
and the result file is written whole again.

The job reports `assigned`, `already_held`, `unassigned` (the pool ran out; their lines as
ranges), `invalid` (with line numbers and reasons) and repeats of a recipient
(`duplicates_in_file`), and writes `{name}.result.csv` for the email tool: a row for every
recipient who holds a code of the campaign, with that code.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.assignments.assigner import BulkAssigner, EventSink, Outcome, RowOutcome
from shared.assignments.recipients import MissingRecipientColumn, RecipientReader
from shared.assignments.result import ResultFile
from shared.assignments.supply import CandidateSupply
from shared.campaigns import store as campaign_store
from shared.campaigns.models import CampaignStatus
from shared.claims.identity import EmailCanonicalization, IdentityKind
from shared.coupons import store as coupon_store
from shared.gcp import storage as storage_objects
from shared.gcp.storage import StorageClient
from shared.intake import jobs as job_store
from shared.intake.csv_rows import InvalidRow
from shared.intake.models import (
    MAX_JOB_ERRORS,
    JobError,
    JobKind,
    JobRecord,
    LineRange,
)
from shared.intake.service import StoredObject
from shared.settings import Settings

log = logging.getLogger(__name__)

# A list to assign; not the result file a job writes next to it (`{name}.result.csv`).
ASSIGNMENT_PATH = re.compile(
    r"^assignments/(?P<campaign>[a-z0-9][a-z0-9_-]{0,62})/(?![^/]*\.result\.csv$)[^/]+\.csv$",
    re.I,
)
RESULT_SUFFIX = ".result"
PROGRESS_EVERY_SECONDS = 2.0


def assignment_job_id(obj: StoredObject) -> str:
    """One job per object generation: the same event delivered twice names the same job."""
    digest = hashlib.sha256(f"{obj.bucket}/{obj.name}#{obj.generation}".encode()).hexdigest()
    return f"asg-{digest[:24]}"


def result_name(object_name: str) -> str:
    """`assignments/c/list.csv` -> `assignments/c/list.result.csv`."""
    return f"{object_name.removesuffix('.csv').removesuffix('.CSV')}{RESULT_SUFFIX}.csv"


class _Tally:
    """What the job has to say about its rows, fed in line order (batch after batch)."""

    def __init__(self, job: JobRecord, result: ResultFile, reader: RecipientReader) -> None:
        self.job = job
        self._result = result
        self._reader = reader
        self._range_open = False

    def invalid(self, row: InvalidRow) -> None:
        self.job.invalid += 1
        if len(self.job.errors) < MAX_JOB_ERRORS:
            self.job.errors.append(JobError(line=row.line, reason=row.reason, value=row.value))

    def outcomes(self, outcomes: Sequence[RowOutcome]) -> None:
        job = self.job
        for o in outcomes:
            if o.outcome is Outcome.DUPLICATE:
                job.duplicates_in_file += 1
                continue
            if o.outcome is Outcome.UNASSIGNED:
                job.unassigned += 1
                self._unassigned_line(o.row.line)
                continue
            if o.outcome is Outcome.ASSIGNED:
                job.assigned += 1
            else:
                job.already_held += 1
            self._range_open = False
            if o.code is not None:
                self._result.start(self._reader.columns)
                self._result.write(o.row, o.code)

    def _unassigned_line(self, line: int) -> None:
        ranges = self.job.unassigned_lines
        if self._range_open and ranges:
            ranges[-1].last = line
        elif len(ranges) < MAX_JOB_ERRORS:
            ranges.append(LineRange(first=line, last=line))
            self._range_open = True


@dataclass(kw_only=True, eq=False)
class AssignmentService:
    db: firestore.Client
    storage_client: StorageClient
    settings: Settings
    events: EventSink
    clock: Callable[[], datetime]
    # The walk of the pool is read through a client whose streams are read on the reading
    # thread (gcp.firestore.make_streaming_client): one thread reads a query at a time.
    streams: firestore.Client | None = None

    def handles(self, obj: StoredObject) -> bool:
        """Objects under assignments/ in the imports bucket (lists, and results to ignore)."""
        return obj.bucket == self.settings.imports_bucket and obj.name.startswith("assignments/")

    def handle_object_finalized(self, obj: StoredObject) -> JobRecord | None:
        match = ASSIGNMENT_PATH.match(obj.name)
        if match is None:
            log.info("object is not a recipient list; ignored", extra={"object": obj.uri})
            return None
        return self.assign_object(obj, campaign_id=match["campaign"])

    def assign_object(self, obj: StoredObject, *, campaign_id: str) -> JobRecord | None:
        now = self.clock()
        job_id = assignment_job_id(obj)
        fresh = JobRecord(
            job_id=job_id,
            kind=JobKind.ASSIGNMENT,
            campaign_id=campaign_id,
            source=obj.uri,
            created_at=now,
            updated_at=now,
        )
        job = job_store.start_or_resume(self.db, job=fresh, now=now)
        if job is None:
            log.info("assignment already finished; redelivery ignored", extra={"job_id": job_id})
            return None
        snapshot = campaign_store.get_campaign_snapshot(self.db, campaign_id=campaign_id)
        if snapshot is None:
            failure = f"campaign {campaign_id!r} does not exist; create it, then upload again"
            return self._finish(job, failure=failure)
        campaign = campaign_store.record_from_snapshot(snapshot)
        if campaign.status_at(now) is CampaignStatus.ENDED:
            return self._finish(job, failure=f"campaign {campaign_id!r} has ended")
        # A recipient is the identity the campaign's per-user limit counts.
        kind = campaign.identity
        log.info(
            "assignment started",
            extra={"job_id": job.job_id, "source": obj.uri, "attempt": job.attempts},
        )
        job = job.restarted(now)
        return self._run(job, obj, kind=kind, email_rule=campaign.email_canonicalization, now=now)

    def _run(
        self,
        job: JobRecord,
        obj: StoredObject,
        *,
        kind: IdentityKind,
        email_rule: EmailCanonicalization,
        now: datetime,
    ) -> JobRecord | None:
        result = ResultFile(
            self.storage_client, bucket=obj.bucket, name=result_name(obj.name), job_id=job.job_id
        )
        chunks = storage_objects.object_chunks(
            self.storage_client, bucket=obj.bucket, name=obj.name, generation=obj.generation
        )
        reader = RecipientReader(chunks, kind=kind, email_rule=email_rule)
        tally = _Tally(job, result, reader)
        assigner = self._assigner(job, tally, now)
        failure: str | None = None
        try:
            failure = self._read(job, reader, tally, assigner)
            assigner.finish()
            if failure is None or result.rows:
                job.result = result.publish(reader.columns)
        except BaseException:
            # A failure that may pass: the job stays running, and the event's redelivery
            # resumes it from the start.
            assigner.abandon()
            result.abandon()
            raise
        return self._finish(job, failure=failure)

    def _read(
        self, job: JobRecord, reader: RecipientReader, tally: _Tally, assigner: BulkAssigner
    ) -> str | None:
        """Feed the list to the assigner; why the list cannot be read to its end, or None."""
        last_progress = time.monotonic()
        try:
            for row in reader:
                job.rows_read += 1
                if isinstance(row, InvalidRow):
                    tally.invalid(row)
                else:
                    assigner.add(row)
                if time.monotonic() - last_progress > PROGRESS_EVERY_SECONDS:
                    last_progress = time.monotonic()
                    self._save_progress(job)
        except MissingRecipientColumn as exc:
            return str(exc)
        except gexc.NotFound:
            return f"{job.source} no longer exists"
        return None

    def _assigner(self, job: JobRecord, tally: _Tally, now: datetime) -> BulkAssigner:
        settings = self.settings
        supply = CandidateSupply(
            stream=lambda low, inclusive, high, limit: coupon_store.stream_unassigned(
                self.streams or self.db,
                campaign_id=job.campaign_id,
                low=low,
                low_inclusive=inclusive,
                high=high,
                limit=limit,
            ),
            start=coupon_store.random_float(),
            pull=2 * settings.assignment_batch_size,
            query_limit=settings.assignment_query_limit,
        )
        return BulkAssigner(
            db=self.db,
            campaign_id=job.campaign_id,
            job_id=job.job_id,
            supply=supply,
            events=self.events,
            emit=tally.outcomes,
            batch_size=settings.assignment_batch_size,
            parallel_commits=settings.assignment_parallel_commits,
            limiter=job_store.write_limiter(
                self.db, job=job, now=now, ramp=self.settings.import_ramp_enabled
            ),
            clock=self.clock,
            # A resumed attempt meets the slots its predecessor created: read before writing.
            read_first=job.attempts > 1,
        )

    def _save_progress(self, job: JobRecord) -> None:
        job_store.save_progress(self.db, job=job.model_copy(update={"updated_at": self.clock()}))

    def _finish(self, job: JobRecord, *, failure: str | None = None) -> JobRecord | None:
        finished = job_store.finish(self.db, job=job, now=self.clock(), failure=failure)
        return finished.job if finished is not None else None
