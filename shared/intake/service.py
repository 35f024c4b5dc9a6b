"""Code intake: CSV files dropped in the imports bucket, and generated codes.

Object-finalized events for the imports bucket arrive here:
- `imports/{campaign_id}/{name}.csv` is imported into the campaign as one job per object
  generation (a redelivered event finds its job finished and does nothing; a new upload under the
  same name is a new generation and a new job); any other object under `imports/{folder}/`
  (a sub-folder, another extension, an upper-case folder) leaves a failed job saying why, listed
  for the campaign the folder names (lower-cased), so the marketer finds it through the API;
- `generate/{campaign_id}/{job_id}.json` is a generation request written by the admin API; it is
  answered by writing a CSV of fresh codes into `imports/…`, which is then imported like any
  upload, so the marketer can download exactly what was issued. Codes that collide are
  regenerated in another round until the job holds as many new codes as were asked for.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from google.api_core import exceptions as gexc

from shared.audit import store as audit_store
from shared.audit.models import AuditAction, AuditContext, entry_for
from shared.campaigns import store as campaign_store
from shared.codes import CodeFormat, legacy_format
from shared.errors import CampaignNotFound, shown
from shared.events.bus import EventBus
from shared.gcp import storage as storage_objects
from shared.intake import jobs as job_store
from shared.intake.csv_rows import InvalidRow, parse_rows, report_value, spreadsheet_safe
from shared.intake.generator import generate_codes
from shared.intake.importer import CaseDuplicate, CodeImporter
from shared.intake.models import (
    MAX_JOB_ERRORS,
    GenerateCodes,
    JobError,
    JobKind,
    JobRecord,
    JobState,
    UploadSession,
    codes_imported,
)
from shared.intake.report import COLUMNS as REPORT_COLUMNS
from shared.intake.report import RowReport, formula_warning

log = logging.getLogger(__name__)

IMPORTS_FOLDER = "imports/"
# What is imported: a .csv file directly in the folder of a (lower-case) campaign id.
IMPORT_PATH = re.compile(r"^imports/(?P<campaign>[a-z0-9][a-z0-9_-]{0,62})/[^/]+\.(?i:csv)$")
CAMPAIGN_FOLDER = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
PARENT_METADATA = "codedrop-generate-job"
UPLOADED_BY_METADATA = "codedrop-uploaded-by"
REPORTS_FOLDER = "reports/"
MAX_OBJECT_NAME = 1024  # Cloud Storage's limit, in bytes of UTF-8
PROGRESS_EVERY_SECONDS = 2.0


@dataclass(frozen=True)
class StoredObject:
    """What an object-finalized CloudEvent says about the new object."""

    bucket: str
    name: str
    generation: str | None
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def uri(self) -> str:
        suffix = f"#{self.generation}" if self.generation else ""
        return f"gs://{self.bucket}/{self.name}{suffix}"


def import_target(name: str) -> tuple[str | None, str | None]:
    """For an object under imports/: the campaign its folder names (lower-cased; None when it
    names none) and why it cannot be imported (None when it can)."""
    if match := IMPORT_PATH.match(name):
        return match["campaign"], None
    folder, _, rest = name.removeprefix(IMPORTS_FOLDER).partition("/")
    file_name = rest.rsplit("/", 1)[-1]
    if not rest or not file_name or not CAMPAIGN_FOLDER.match(folder.lower()):
        return None, None  # imports/x.csv, a folder placeholder, a folder no campaign can have
    campaign_id = folder.lower()
    if folder != campaign_id:
        return campaign_id, (
            f"campaign ids are lower-case: upload the file to imports/{campaign_id}/ instead"
        )
    if "/" in rest:
        return campaign_id, (
            f"files in sub-folders are not imported: upload it to imports/{campaign_id}/ itself"
        )
    return campaign_id, f"only .csv files are imported, not {shown(file_name)}"


def import_job_id(obj: StoredObject) -> str:
    """One job per object generation: the same event delivered twice names the same job."""
    digest = hashlib.sha256(f"{obj.bucket}/{obj.name}#{obj.generation}".encode()).hexdigest()
    return f"imp-{digest[:24]}"


@dataclass(kw_only=True, eq=False)
class IntakeService(job_store.BucketJobService):
    bus: EventBus | None = None  # None: finished imports are not announced (benchmarks)

    # --- events ---------------------------------------------------------------------------
    def handle_object_finalized(self, obj: StoredObject) -> JobRecord | None:
        if obj.bucket != self.bucket:
            log.warning("object in an unexpected bucket ignored", extra={"object": obj.uri})
            return None
        if obj.name.startswith(IMPORTS_FOLDER):
            campaign_id, refusal = import_target(obj.name)
            if campaign_id is None:
                log.warning(
                    "object under imports/ names no campaign; ignored", extra={"object": obj.uri}
                )
                return None
            if refusal is not None:
                return self.refuse_import(obj, campaign_id=campaign_id, reason=refusal)
            return self.import_object(obj, campaign_id=campaign_id)
        if job_store.is_request(JobKind.GENERATE, obj.name):
            job = job_store.requested_job(self.db, name=obj.name, kind=JobKind.GENERATE)
            return None if job is None else self.run_generation(job)
        log.info("object is not an import; ignored", extra={"object": obj.uri})
        return None

    # --- imports --------------------------------------------------------------------------
    def _new_import_job(self, obj: StoredObject, *, campaign_id: str) -> JobRecord:
        now = self.clock()
        return JobRecord(
            job_id=import_job_id(obj),
            kind=JobKind.IMPORT,
            campaign_id=campaign_id,
            source=obj.uri,
            parent_job_id=obj.metadata.get(PARENT_METADATA),
            created_at=now,
            updated_at=now,
        )

    def refuse_import(
        self, obj: StoredObject, *, campaign_id: str, reason: str
    ) -> JobRecord | None:
        """A file that cannot be imported still leaves a job, failed with the reason."""
        fresh = self._new_import_job(obj, campaign_id=campaign_id)
        job = job_store.start_or_resume(self.db, job=fresh, now=fresh.created_at)
        if job is None:
            return None  # a redelivery: the failed job is already there
        log.warning("object refused", extra={"object": obj.uri, "reason": reason})
        return self._finish(job, failure=reason)

    def import_object(self, obj: StoredObject, *, campaign_id: str) -> JobRecord | None:
        fresh = self._new_import_job(obj, campaign_id=campaign_id)
        now = fresh.created_at
        job = job_store.start_or_resume(self.db, job=fresh, now=now)
        if job is None:
            log.info("import already finished; redelivery ignored", extra={"job_id": fresh.job_id})
            if fresh.parent_job_id:
                self._continue_generation(fresh.parent_job_id)
            return None
        try:
            campaign_store.get_campaign(self.db, campaign_id=campaign_id)
        except CampaignNotFound:
            return self._finish(
                job,
                failure=f"campaign {campaign_id!r} does not exist; create it, then upload again",
            )
        log.info("import started", extra={"job_id": job.job_id, "source": obj.uri})
        job = job.restarted(now)
        report = RowReport(
            self.storage_client,
            bucket=self.bucket,
            name=f"{REPORTS_FOLDER}{campaign_id}/{job.job_id}.csv",
            job_id=job.job_id,
        )
        importer = CodeImporter(
            db=self.db,
            campaign_id=campaign_id,
            job_id=job.job_id,
            generated=self._generated_here(job),
            batch_size=self.settings.import_batch_size,
            parallel_commits=self.settings.import_parallel_commits,
            limiter=job_store.write_limiter(
                self.db, job=job, now=now, ramp=self.settings.import_ramp_enabled
            ),
            clock=self.clock,
            on_duplicate=report.add,
        )
        failure: str | None = None
        last_progress = time.monotonic()
        try:
            chunks = storage_objects.object_chunks(
                self.storage_client, bucket=obj.bucket, name=obj.name, generation=obj.generation
            )
            for row in parse_rows(chunks):
                job.rows_read += 1
                if isinstance(row, InvalidRow):
                    job.invalid += 1
                    report.add(row.line, row.reason, row.value)
                    if len(job.errors) < MAX_JOB_ERRORS:
                        job.errors.append(
                            JobError(line=row.line, reason=row.reason, value=row.value)
                        )
                    continue
                if (warning := formula_warning(row.code)) is not None:
                    job.warnings += 1
                    report.add(row.line, warning, row.code)
                importer.add(row)
                if time.monotonic() - last_progress > PROGRESS_EVERY_SECONDS:
                    last_progress = time.monotonic()
                    self._save_progress(job, importer)
        except gexc.NotFound:
            failure = f"{obj.uri} no longer exists"
        finally:
            counts = importer.finish()
        job = job.model_copy(update={**counts.totals(), "report": report.close()})
        _report_case_duplicates(job, counts.case_duplicates)
        return self._finish(job, failure=failure or _unaccounted(job))

    def _generated_here(self, job: JobRecord) -> bool:
        """Whether the file is a round of this campaign's own generation job (its codes fit the
        job's format); anything else is an upload of codes of no known format."""
        if job.parent_job_id is None:
            return False
        parent = job_store.find_job(self.db, job_id=job.parent_job_id)
        return (
            parent is not None
            and parent.kind is JobKind.GENERATE
            and parent.campaign_id == job.campaign_id
        )

    def _announce(self, job: JobRecord) -> None:
        """codes.imported, once across instances, for a job that imported codes (a failed job
        may have imported some before it failed)."""
        if self.bus is not None and (job.state is JobState.DONE or job.imported):
            now = self.clock()
            self.bus.announce_once(codes_imported(job, now=now), now=now)

    def _save_progress(self, job: JobRecord, importer: CodeImporter) -> None:
        snapshot = job.model_copy(update={**importer.counts.totals(), "updated_at": self.clock()})
        job_store.save_progress(self.db, job=snapshot)

    def _finish(self, job: JobRecord, *, failure: str | None = None) -> JobRecord | None:
        outcome = job_store.finish(self.db, job=job, now=self.clock(), failure=failure)
        if outcome is None:
            return None
        done = outcome.job
        self._announce(done)
        if outcome.parent is not None and outcome.parent.state is JobState.RUNNING:
            self._write_generated_round(outcome.parent)
        return done

    # --- uploads from the console ----------------------------------------------------------
    def open_upload(
        self, *, campaign_id: str, name: str, origin: str | None, audit: AuditContext
    ) -> UploadSession:
        """A resumable upload session for `imports/{campaign_id}/{name}`: the browser sends the
        file straight to the bucket, never through a function, and its import starts when the
        object is finalized. The audit entry is written before the session's URL is handed
        out, so no upload happens without it."""
        campaign_store.get_campaign(self.db, campaign_id=campaign_id)
        name_in_bucket = f"{IMPORTS_FOLDER}{campaign_id}/{name}"
        url = storage_objects.open_upload_session(
            self.storage_client,
            bucket=self.bucket,
            name=name_in_bucket,
            content_type="text/csv",
            origin=origin,
            metadata={UPLOADED_BY_METADATA: audit.actor.uid},
        )
        entry = audit.entry(
            AuditAction.UPLOAD,
            campaign_id=campaign_id,
            target=f"gs://{self.bucket}/{name_in_bucket}",
            after={"name": name},
        )
        audit_store.record(self.db, entry)
        log.info("upload session opened", extra={"object": name_in_bucket})
        return UploadSession(upload_url=url, bucket=self.bucket, object=name_in_bucket)

    # --- rejected rows ----------------------------------------------------------------------
    def rejected_rows(self, job: JobRecord) -> Iterator[bytes]:
        """A job's rejected rows as CSV (line, reason, value): an import's whole report (every
        invalid or duplicate row, every warning), else the first MAX_JOB_ERRORS rows kept with
        the job (an assignment's, or an import older than reports)."""
        if job.report is not None:
            bucket, _, name = job.report.removeprefix("gs://").partition("/")
            return storage_objects.stream_object(self.storage_client, bucket=bucket, name=name)
        buffer = io.StringIO()
        out = csv.writer(buffer, lineterminator="\r\n")
        out.writerow(REPORT_COLUMNS)
        for error in job.errors:
            out.writerow(
                [error.line, spreadsheet_safe(error.reason), spreadsheet_safe(error.value)]
            )
        return iter([buffer.getvalue().encode()])

    # --- generation -----------------------------------------------------------------------
    def request_generation(
        self, *, campaign_id: str, spec: GenerateCodes, audit: AuditContext | None = None
    ) -> JobRecord:
        """Record the job and drop a request object; the import function does the work."""
        code_format = spec.code_format()
        campaign_store.record_generated_format(
            self.db, campaign_id=campaign_id, code_format=code_format
        )
        job = job_store.requested(
            JobKind.GENERATE,
            campaign_id=campaign_id,
            bucket=self.bucket,
            now=self.clock(),
            requested=spec.count,
            code_format=code_format,
        )
        entry = entry_for(
            audit,
            AuditAction.GENERATE,
            campaign_id=campaign_id,
            target=job.job_id,
            after=spec.model_dump(mode="json"),
        )
        job_store.create_job(self.db, job=job, audit=entry)
        self.drop_request(job, spec.model_dump())
        log.info("code generation requested", extra={"job_id": job.job_id, "count": spec.count})
        return job

    def run_generation(self, job: JobRecord) -> JobRecord:
        """Write the running generation job's next round (its first round started once)."""
        if job.rounds == 0:
            job = job_store.next_round(self.db, job_id=job.job_id, now=self.clock())
        self._write_generated_round(job)
        return job

    def _continue_generation(self, parent_id: str) -> None:
        """A finished child import was redelivered: make sure the next round's file exists."""
        parent = job_store.find_job(self.db, job_id=parent_id)
        if parent is not None and parent.state is JobState.RUNNING and parent.rounds:
            self._write_generated_round(parent)

    def _write_generated_round(self, job: JobRecord) -> None:
        """Write round `job.rounds` of the job's CSV (idempotent: never overwrites it)."""
        if job.requested is None:
            raise ValueError(f"job {job.job_id} is not a generation job")
        wanted = job.requested - job.imported
        if wanted <= 0:
            return
        name = f"imports/{job.campaign_id}/generated-{job.job_id}-{job.rounds:02d}.csv"
        codes = generate_codes(wanted, code_format=_generated_format(job))
        written = storage_objects.write_lines_if_absent(
            self.storage_client,
            bucket=self.bucket,
            name=name,
            lines=itertools.chain(["code\n"], (f"{code}\n" for code in codes)),
            metadata={PARENT_METADATA: job.job_id},
        )
        log.info(
            "generated codes written",
            extra={"job_id": job.job_id, "object": name, "count": wanted, "new": written},
        )


def _report_case_duplicates(job: JobRecord, duplicates: list[CaseDuplicate]) -> None:
    """Rows skipped as the same code in another letter case join the job's reported rows,
    everything in line order."""
    for duplicate in duplicates[: max(0, MAX_JOB_ERRORS - len(job.errors))]:
        job.errors.append(
            JobError(
                line=duplicate.row.line,
                reason=duplicate.reason,
                value=report_value(duplicate.row.code),
            )
        )
    job.errors.sort(key=lambda error: error.line)


def _generated_format(job: JobRecord) -> CodeFormat:
    if job.code_format is not None:
        return job.code_format
    if job.code_length is None:
        raise ValueError(f"job {job.job_id} is not a generation job")
    return legacy_format(length=job.code_length, prefix=job.code_prefix or "")


def _unaccounted(job: JobRecord) -> str | None:
    """Every row read ends as imported, duplicate or invalid; if not, the job must not look
    done (it would mean rows were lost)."""
    accounted = job.imported + job.duplicates_in_file + job.duplicates_in_campaign + job.invalid
    if accounted == job.rows_read:
        return None
    log.error(
        "import rows unaccounted for",
        extra={"job_id": job.job_id, "rows_read": job.rows_read, "accounted": accounted},
    )
    return f"{job.rows_read - accounted} of {job.rows_read} rows are unaccounted for; upload again"


def object_from_event(data: object) -> StoredObject:
    """The object named by an object-finalized CloudEvent's data; ValueError if it names none."""
    if not isinstance(data, dict):
        raise ValueError("event data is not an object")
    bucket, name = data.get("bucket"), data.get("name")
    if not isinstance(bucket, str) or not bucket or not isinstance(name, str) or not name:
        raise ValueError("event data has no bucket and name")
    generation = data.get("generation")
    if generation is not None and not re.fullmatch(r"[0-9]{1,20}", str(generation)):
        raise ValueError("event generation is not a number")
    if len(name) > MAX_OBJECT_NAME:
        raise ValueError("event names an object longer than Cloud Storage allows")
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError("event metadata is not an object")
    return StoredObject(
        bucket=bucket,
        name=name,
        generation=str(generation) if generation is not None else None,
        metadata={str(k): str(v) for k, v in metadata.items()},
    )
