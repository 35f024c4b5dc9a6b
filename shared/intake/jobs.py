"""Firestore access for jobs (`jobs/{job_id}`), and the request objects that run those an admin
asks for."""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.audit import store as audit_store
from shared.audit.models import AuditEntry
from shared.errors import JobNotFound
from shared.gcp import storage as storage_objects
from shared.gcp.firestore import jobs_collection
from shared.gcp.storage import StorageClient
from shared.intake.models import JobKind, JobRecord, JobState
from shared.ratelimit.pacing import Ramp, Unlimited, WriteLimiter
from shared.settings import Settings

log = logging.getLogger(__name__)
# What a finished job's log line counts (those its kind does not use stay 0).
_LOGGED = {
    "rows_read",
    "imported",
    "duplicates_in_file",
    "duplicates_in_campaign",
    "invalid",
    "assigned",
    "already_held",
    "unassigned",
    "exported",
    "deleted",
    "result",
}

# The jobs an admin asks for: each is recorded, then run on the event of its request object
# `{folder}/{campaign_id}/{job_id}.json` in the imports bucket; its id is `{prefix}-{16 hex}`.
_REQUESTED: dict[JobKind, tuple[str, str]] = {
    JobKind.GENERATE: ("generate", "gen"),
    JobKind.EXPORT: ("export", "exp"),
    JobKind.DELETE: ("delete", "del"),
}


def request_object(kind: JobKind, campaign_id: str, job_id: str) -> str:
    return f"{_REQUESTED[kind][0]}/{campaign_id}/{job_id}.json"


def new_job_id(kind: JobKind) -> str:
    return f"{_REQUESTED[kind][1]}-{secrets.token_hex(8)}"


def requested(
    kind: JobKind,
    *,
    campaign_id: str,
    bucket: str,
    now: datetime,
    job_id: str | None = None,
    **fields: Any,
) -> JobRecord:
    """A new job of a kind an admin asks for (a new id unless `job_id`), its source the request
    object that will run it."""
    job_id = job_id or new_job_id(kind)
    return JobRecord(
        job_id=job_id,
        kind=kind,
        campaign_id=campaign_id,
        source=f"gs://{bucket}/{request_object(kind, campaign_id, job_id)}",
        created_at=now,
        updated_at=now,
        **fields,
    )


@dataclass(kw_only=True, eq=False)
class BucketJobService:
    """A service whose jobs run through the imports bucket (uploads, request objects, results)."""

    db: firestore.Client
    storage_client: StorageClient
    settings: Settings
    clock: Callable[[], datetime]

    @property
    def bucket(self) -> str:
        return self.settings.imports_bucket

    def drop_request(self, job: JobRecord, body: dict[str, Any]) -> None:
        """Write the job's request object; one already there (a repeated request) stays."""
        storage_objects.write_json_if_absent(
            self.storage_client,
            bucket=self.bucket,
            name=request_object(job.kind, job.campaign_id, job.job_id),
            body=body,
        )


class RequestedJobService(BucketJobService):
    """A service that runs one kind of job an admin asks for, on its request object's event."""

    kind: ClassVar[JobKind]

    def handles(self, name: str) -> bool:
        return is_request(self.kind, name)

    def requested_job(self, name: str) -> JobRecord | None:
        return requested_job(self.db, name=name, kind=self.kind)


def job_ref(db: firestore.Client, job_id: str) -> firestore.DocumentReference:
    return jobs_collection(db).document(job_id)


def _record(snapshot: Any) -> JobRecord:
    return JobRecord(job_id=snapshot.id, **(snapshot.to_dict() or {}))


def get_job(db: firestore.Client, *, job_id: str) -> JobRecord:
    snapshot = job_ref(db, job_id).get()
    if not snapshot.exists:
        raise JobNotFound(f"Job {job_id!r} does not exist.")
    return _record(snapshot)


def find_job(db: firestore.Client, *, job_id: str) -> JobRecord | None:
    snapshot = job_ref(db, job_id).get()
    return _record(snapshot) if snapshot.exists else None


def create_job(db: firestore.Client, *, job: JobRecord, audit: AuditEntry | None = None) -> None:
    """The job, and the audit entry of the admin who asked for it, in one commit."""
    batch = db.batch()
    batch.create(job_ref(db, job.job_id), job.model_dump(mode="python", exclude={"job_id"}))
    if audit is not None:
        audit_store.add(batch, db, audit)
    batch.commit()


def _request_match(kind: JobKind, name: str) -> re.Match[str] | None:
    folder, prefix = _REQUESTED[kind]
    return re.match(
        rf"^{folder}/(?P<campaign>[a-z0-9][a-z0-9_-]{{0,62}})/(?P<job>{prefix}-[a-f0-9]{{16}})\.json$",
        name,
    )


def is_request(kind: JobKind, name: str) -> bool:
    """Whether `name` is the request object of a job of `kind`."""
    return _request_match(kind, name) is not None


def requested_job(db: firestore.Client, *, name: str, kind: JobKind) -> JobRecord | None:
    """The running job of `kind` that the request object `name` names. None when the name is not
    such a request, when no job of that kind and campaign has the id (logged), or when the job
    finished (a redelivered event)."""
    match = _request_match(kind, name)
    if match is None:
        return None
    job = find_job(db, job_id=match["job"])
    if job is None or job.kind is not kind or job.campaign_id != match["campaign"]:
        log.warning("request object without its job; ignored", extra={"object": name})
        return None
    return job if job.state is JobState.RUNNING else None


def start_or_resume(db: firestore.Client, *, job: JobRecord, now: datetime) -> JobRecord | None:
    """Create the job, or take over one left running by a crashed attempt.

    Returns None when the job already finished: a redelivered event has nothing to do.
    """
    ref = job_ref(db, job.job_id)

    @firestore.transactional
    def claim(transaction: firestore.Transaction) -> JobRecord | None:
        snapshot = ref.get(transaction=transaction)
        if not snapshot.exists:
            transaction.create(ref, job.model_dump(mode="python", exclude={"job_id"}))
            return job
        existing = _record(snapshot)
        if existing.state is not JobState.RUNNING:
            return None
        transaction.update(ref, {"attempts": existing.attempts + 1, "updated_at": now})
        return existing.model_copy(update={"attempts": existing.attempts + 1})

    result: JobRecord | None = claim(db.transaction())
    return result


def save_progress(db: firestore.Client, *, job: JobRecord) -> None:
    ref = job_ref(db, job.job_id)
    ref.update(
        job.model_dump(mode="python", exclude={"job_id", "created_at", "kind", "campaign_id"})
    )


def write_limiter(
    db: firestore.Client, *, job: JobRecord, now: datetime, ramp: bool
) -> WriteLimiter:
    """What paces a job's writes: Firestore's 500/50/5 ramp when `ramp`, else nothing."""
    if not ramp:
        return Unlimited()
    # Recorded before the first write, so a retried attempt finds where the ramp stands.
    save_progress(db, job=job)
    started = job.ramp_started_at or now
    return Ramp(elapsed=(now - started).total_seconds())


@dataclass(frozen=True)
class Finished:
    job: JobRecord
    # The generation job this import belongs to, as updated by it (None for a plain upload).
    parent: JobRecord | None


def finish_job(db: firestore.Client, *, job: JobRecord, now: datetime) -> Finished | None:
    """Record the final state once; add a generated file's counts to its generation job.

    Returns None when the job was already finished (another delivery got there first). When
    a generation job still lacks codes (collisions), its round is advanced for the next file.
    """
    ref = job_ref(db, job.job_id)
    parent_ref = job_ref(db, job.parent_job_id) if job.parent_job_id else None

    @firestore.transactional
    def apply(transaction: firestore.Transaction) -> Finished | None:
        snapshot = ref.get(transaction=transaction)
        parent_snapshot = parent_ref.get(transaction=transaction) if parent_ref else None
        if snapshot.exists and _record(snapshot).state is not JobState.RUNNING:
            return None
        transaction.set(ref, job.model_dump(mode="python", exclude={"job_id"}))
        if parent_ref is None or parent_snapshot is None or not parent_snapshot.exists:
            return Finished(job=job, parent=None)
        parent = _record(parent_snapshot)
        update: dict[str, Any] = {
            "rows_read": parent.rows_read + job.rows_read,
            "imported": parent.imported + job.imported,
            "duplicates_in_file": parent.duplicates_in_file + job.duplicates_in_file,
            "duplicates_in_campaign": parent.duplicates_in_campaign + job.duplicates_in_campaign,
            "invalid": parent.invalid + job.invalid,
            "files": [*parent.files, job.source] if job.source else parent.files,
            "updated_at": now,
        }
        if job.state is JobState.FAILED:
            update |= {"state": JobState.FAILED, "failure_reason": job.failure_reason}
            update["finished_at"] = now
        elif parent.requested is not None and update["imported"] >= parent.requested:
            update |= {"state": JobState.DONE, "finished_at": now}
        else:
            update["rounds"] = parent.rounds + 1  # collisions: another file of fresh codes
        transaction.update(parent_ref, update)
        return Finished(job=job, parent=parent.model_copy(update=update))

    result: Finished | None = apply(db.transaction())
    return result


def finish(
    db: firestore.Client, *, job: JobRecord, now: datetime, failure: str | None = None
) -> Finished | None:
    """End a running job: failed with `failure`, else done (finish_job), and log its counts.
    None when it had ended already (another delivery of the same event got there first)."""
    done = job.model_copy(
        update={
            "state": JobState.FAILED if failure else JobState.DONE,
            "failure_reason": failure,
            "updated_at": now,
            "finished_at": now,
        }
    )
    outcome = finish_job(db, job=done, now=now)
    if outcome is not None:
        log.info(
            f"{done.kind.value} finished",
            extra={
                "job_id": done.job_id,
                "state": done.state.value,
                "failure_reason": failure,
                **done.model_dump(include=_LOGGED),
            },
        )
    return outcome


def finish_done(
    db: firestore.Client, *, job: JobRecord, now: datetime, **counts: int
) -> JobRecord | None:
    """Record a job done, with its final counts, once (finish): None when another delivery of
    its event finished it first."""
    outcome = finish(db, job=job.model_copy(update=counts), now=now)
    return outcome.job if outcome is not None else None


def next_round(db: firestore.Client, *, job_id: str, now: datetime) -> JobRecord:
    """Start a generation job's first round exactly once, however often its request arrives."""
    ref = job_ref(db, job_id)

    @firestore.transactional
    def apply(transaction: firestore.Transaction) -> JobRecord:
        job = _record(ref.get(transaction=transaction))
        if job.rounds == 0:
            transaction.update(ref, {"rounds": 1, "updated_at": now})
            job = job.model_copy(update={"rounds": 1})
        return job

    result: JobRecord = apply(db.transaction())
    return result


def list_campaign_jobs(
    db: firestore.Client, *, campaign_id: str, limit: int = 100
) -> list[JobRecord]:
    query = (
        jobs_collection(db)
        .where(filter=FieldFilter("campaign_id", "==", campaign_id))
        .order_by("created_at", direction=firestore.Query.DESCENDING)
        .limit(limit)
    )
    return [_record(s) for s in query.stream()]
