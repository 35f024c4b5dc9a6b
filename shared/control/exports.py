"""Exports: a campaign's claims, redemptions or codes as a CSV written by a job.

The job runs as generation does (shared/intake/service.py): admin_api records the job (and its
audit entry, in one commit) and drops a request object, `export/{campaign_id}/{job_id}.json`;
its object-finalized event reaches import_codes, which writes the CSV. Eventarc redelivers an
event whose function failed or whose instance died, so a crashed export runs again from the
start (the object is rewritten whole) until the job is finished; a finished job ignores a
redelivery.

Memory is bounded whatever the campaign's size: documents are streamed a page at a time
(ordered by id, each page started after the last document seen) and written as they arrive, and
the CSV is streamed to Cloud Storage in 1 MiB chunks. Every cell is neutralised for
spreadsheets (a leading =, +, -, @ becomes text).
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.audit.models import AuditAction, AuditContext
from shared.campaigns import store as campaign_store
from shared.coupons.store import coupon_state
from shared.gcp import storage as storage_objects
from shared.gcp.firestore import Snapshot, claims_collection, coupons_collection
from shared.intake import jobs as job_store
from shared.intake.csv_rows import spreadsheet_safe
from shared.intake.models import JobKind, JobRecord
from shared.types import RequestBody, rfc3339

log = logging.getLogger(__name__)

# Large pages: the emulator (and Firestore's per-query overhead) charge each query by what it
# scans, and a page is streamed, never held in memory.
PAGE_SIZE = 10_000
MAX_BROKEN_STREAMS = 3
TRANSIENT = (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError)


class ExportKind(StrEnum):
    CLAIMS = "claims"
    REDEMPTIONS = "redemptions"
    CODES = "codes"


class ExportCreate(RequestBody):
    kind: ExportKind


COLUMNS: dict[ExportKind, tuple[str, ...]] = {
    ExportKind.CLAIMS: (
        "claim_id",
        "user_id",
        "code",
        "state",
        "claimed_at",
        "expires_at",
        "redeemed_at",
        "order_id",
    ),
    ExportKind.REDEMPTIONS: ("code", "order_id", "user_id", "claimed_at", "redeemed_at"),
    ExportKind.CODES: ("code", "state", "user_id", "claimed_at", "redeemed_at", "order_id"),
}


def export_object(campaign_id: str, job_id: str) -> str:
    return f"exports/{campaign_id}/{job_id}.csv"


def cell(value: Any) -> str:
    """A value as a CSV cell no spreadsheet runs as a formula; times in RFC 3339 UTC."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return rfc3339(value)
    return spreadsheet_safe(str(value))


def claim_row(data: dict[str, Any], doc_id: str) -> list[str]:
    return [
        cell(doc_id),
        cell(data.get("user_id")),
        cell(data.get("code")),
        cell(data.get("state") or "claimed"),
        cell(data.get("claimed_at")),
        cell(data.get("expires_at")),
        cell(data.get("redeemed_at")),
        cell(data.get("order_id")),
    ]


def coupon_row(data: dict[str, Any], kind: ExportKind) -> list[str]:
    if kind is ExportKind.REDEMPTIONS:
        return [
            cell(data.get("code")),
            cell(data.get("order_id")),
            cell(data.get("assigned_to")),
            cell(data.get("assigned_at")),
            cell(data.get("redeemed_at")),
        ]
    return [
        cell(data.get("code")),
        cell(coupon_state(data).value),
        cell(data.get("assigned_to")),
        cell(data.get("assigned_at")),
        cell(data.get("redeemed_at")),
        cell(data.get("order_id")),
    ]


def documents(query: firestore.Query, *, page_size: int = PAGE_SIZE) -> Iterator[Snapshot]:
    """The query's documents in id order, one at a time: each page is a query streamed as it
    arrives (never a list), the next started after the last document seen, so memory holds one
    document whatever the page size. A stream broken by a passing error is taken up again after
    the last document it gave, a few times; then the error is raised (the job is retried)."""
    ordered = query.order_by("__name__")
    last: Snapshot | None = None
    broken = 0
    while True:
        page = (ordered.start_after(last) if last is not None else ordered).limit(page_size)
        count = 0
        try:
            for snapshot in page.stream():
                count += 1
                last = snapshot
                yield snapshot
        except TRANSIENT:
            broken += 1
            if broken > MAX_BROKEN_STREAMS:
                raise
            log.warning("export stream broken; taken up again", extra={"broken": broken})
            continue
        if count < page_size:
            return


@dataclass(kw_only=True, eq=False)
class ExportService(job_store.RequestedJobService):
    kind = JobKind.EXPORT

    # Long streamed reads go through a client that reads them on the calling thread.
    streams: firestore.Client | None = None
    page_size: int = PAGE_SIZE

    # --- admin_api ----------------------------------------------------------------------------
    def request(self, *, campaign_id: str, kind: ExportKind, audit: AuditContext) -> JobRecord:
        """Record the job with its audit entry, then drop the request object that runs it."""
        campaign_store.get_campaign(self.db, campaign_id=campaign_id)
        job_id = job_store.new_job_id(JobKind.EXPORT)
        bucket = self.bucket
        job = job_store.requested(
            JobKind.EXPORT,
            campaign_id=campaign_id,
            bucket=bucket,
            now=self.clock(),
            job_id=job_id,
            result=f"gs://{bucket}/{export_object(campaign_id, job_id)}",
            export_kind=kind.value,
        )
        entry = audit.entry(
            AuditAction.EXPORT, campaign_id=campaign_id, target=job_id, after={"kind": kind.value}
        )
        job_store.create_job(self.db, job=job, audit=entry)
        self.drop_request(job, {"job_id": job_id, "kind": kind.value})
        log.info("export requested", extra={"job_id": job_id, "kind": kind.value})
        return job

    # --- import_codes (the request object's event) ------------------------------------------
    def handle_request(self, name: str) -> JobRecord | None:
        job = self.requested_job(name)
        if job is None or job.export_kind is None:
            return None
        return self.run(job, ExportKind(job.export_kind))

    def run(self, job: JobRecord, kind: ExportKind) -> JobRecord | None:
        """Write the job's CSV (the whole object, again on a retried attempt) and finish it."""
        rows = 0
        writer = storage_objects.open_text_writer(
            self.storage_client,
            bucket=self.bucket,
            name=export_object(job.campaign_id, job.job_id),
            metadata={"codedrop-export-job": job.job_id},
        )
        with writer:
            out = csv.writer(writer, lineterminator="\r\n")
            out.writerow(COLUMNS[kind])
            for snapshot in documents(self._query(job.campaign_id, kind), page_size=self.page_size):
                out.writerow(self._row(kind, snapshot))
                rows += 1
        return job_store.finish_done(
            self.db, job=job, now=self.clock(), exported=rows, rows_read=rows
        )

    def _query(self, campaign_id: str, kind: ExportKind) -> firestore.Query:
        client = self.streams or self.db
        if kind is ExportKind.CLAIMS:
            query: firestore.Query = claims_collection(client, campaign_id).select(
                ["user_id", "code", "state", "claimed_at", "expires_at", "redeemed_at", "order_id"]
            )
            return query
        fields = ["code", "state", "assigned", "assigned_to", "assigned_at", "redeemed_at"]
        coupons: firestore.Query = coupons_collection(client, campaign_id).select(
            [*fields, "order_id"]
        )
        if kind is ExportKind.REDEMPTIONS:
            coupons = coupons.where(filter=FieldFilter("state", "==", "redeemed"))
        return coupons

    def download(self, job: JobRecord) -> Iterator[bytes]:
        """A finished export's CSV, 1 MiB at a time."""
        return storage_objects.stream_object(
            self.storage_client,
            bucket=self.bucket,
            name=export_object(job.campaign_id, job.job_id),
        )

    @staticmethod
    def _row(kind: ExportKind, snapshot: Snapshot) -> list[str]:
        data = snapshot.to_dict() or {}
        if kind is ExportKind.CLAIMS:
            return claim_row(data, snapshot.id)
        return coupon_row(data, kind)
