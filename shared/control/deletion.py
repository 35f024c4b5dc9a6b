"""Deleting a campaign: `DELETE /v1/campaigns/{id}`, then a job that removes what it holds.

Only a campaign that never started (its window, or a fair drop's pre-queue, still ahead, and
nobody holding a code) or an archived one can be deleted: a live or paused sale, or one that
ended but was not archived, keeps its codes, claims, counters and jobs, so nothing a shopper
holds or finance needs vanishes under a sale. The audit log is not the campaign's: its entries,
and the `delete` entry that records the campaign as it was, stay.

admin_api marks the campaign `deleting` in the commit that records the job and its audit entry:
from then on admins, imports and exports find no campaign (404) and shoppers an ended one. It
then drops a request object, `delete/{campaign_id}/{job_id}.json`, whose object-finalized event
reaches import_codes (as an export's does), which removes, a bounded page at a time:
every document under the campaign (coupons, claims, counters, entries, … however deep), its
webhooks and their deliveries, its other jobs, and its objects in the bucket (uploads, reports,
exports, assignment results). Memory holds one page of names whatever the campaign's size.
Deleting is idempotent, so a retried event (a crash, an instance's timeout on a large campaign)
carries on where the last attempt got to. The campaign document goes last, guarded by the update
time read before the sweep: an import batch that committed meanwhile (it updates the campaign in
the same batch as its codes) makes the job sweep again, so no code outlives its campaign.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.firestore_v1.field_path import FieldPath

from shared.audit import store as audit_store
from shared.audit.models import AuditAction, AuditContext
from shared.campaigns import store as campaign_store
from shared.campaigns.models import CampaignRecord, audited
from shared.errors import CampaignNotDeletable, CampaignNotFound, Contended
from shared.gcp import storage as storage_objects
from shared.gcp.firestore import (
    campaign_ref,
    campaign_webhooks_ref,
    claims_collection,
    jobs_collection,
    webhook_ref,
    webhooks_collection,
)
from shared.intake import jobs as job_store
from shared.intake.models import JobKind, JobRecord

log = logging.getLogger(__name__)

# A commit takes at most 500 writes; a page of names is read, then deleted, 500 at a time.
BATCH = 500
# The bucket's folders that hold a campaign's objects (`{folder}/{campaign_id}/…`).
FOLDERS = ("imports", "generate", "reports", "export", "exports", "assignments")
# Sweeps before the campaign document is deleted; more means imports keep arriving: the event
# is retried later.
MAX_SWEEPS = 3
PROGRESS_EVERY_SECONDS = 2.0


def deletable(campaign: CampaignRecord, now: datetime) -> bool:
    """Archived, or never started: not even a fair drop's pre-queue has opened."""
    return campaign.archived or now < (campaign.pre_queue_opens_at or campaign.starts_at)


def _descendants(
    collection: firestore.CollectionReference,
) -> Iterator[firestore.DocumentReference]:
    """Every document in the collection and in the collections beneath it, however deep (the
    library's recursive query, ordered by name)."""
    return _names(collection.recursive())


def _matching(query: firestore.Query) -> Iterator[firestore.DocumentReference]:
    return _names(query.order_by(FieldPath.document_id()))


def _names(ordered: firestore.Query) -> Iterator[firestore.DocumentReference]:
    """The documents of a query ordered by name, a page of names at a time (each page started
    after the last name seen: never a rescan of what was deleted)."""
    ordered = ordered.select([FieldPath.document_id()])
    last: Any = None
    while True:
        page = list(
            (ordered.start_after(last) if last is not None else ordered).limit(BATCH).stream()
        )
        for snapshot in page:
            yield snapshot.reference
        if len(page) < BATCH:
            return
        last = page[-1]


class DeletionService(job_store.RequestedJobService):
    kind = JobKind.DELETE

    # --- admin_api ----------------------------------------------------------------------------
    def request(self, *, campaign_id: str, audit: AuditContext) -> JobRecord:
        """Mark the campaign deleting, with its job and audit entry in the same commit, then drop
        the request object that runs the job. A campaign already being deleted answers its job,
        its request dropped again if it was lost: a repeated DELETE is safe."""
        now = self.clock()
        snapshot = campaign_store.get_campaign_snapshot(self.db, campaign_id=campaign_id)
        if snapshot is None:
            raise CampaignNotFound(f"Campaign {campaign_id!r} does not exist.")
        campaign = campaign_store.record_from_snapshot(snapshot)
        if not campaign.deleting:
            self._check(campaign, now)
            if not campaign.archived:
                # Codes handed out before the sale (an assignment job) are held by shoppers.
                held = claims_collection(self.db, campaign_id).select([FieldPath.document_id()])
                if list(held.limit(1).stream()):
                    raise CampaignNotDeletable(
                        f"Campaign {campaign_id!r} has codes assigned to shoppers: end it and "
                        "archive it, then delete it."
                    )
        job_id = self._mark(campaign_id, audit=audit, now=now)
        job = job_store.get_job(self.db, job_id=job_id)
        self.drop_request(job, {"job_id": job_id})
        log.info(
            "campaign deletion requested", extra={"campaign_id": campaign_id, "job_id": job_id}
        )
        return job

    def _mark(self, campaign_id: str, *, audit: AuditContext, now: datetime) -> str:
        """The deletion's job id: a new job recorded with the mark and its audit entry, or the
        job of a deletion already under way."""
        job = job_store.requested(
            JobKind.DELETE, campaign_id=campaign_id, bucket=self.bucket, now=now
        )
        job_id = job.job_id
        ref = campaign_ref(self.db, campaign_id)

        @firestore.transactional
        def mark(transaction: firestore.Transaction) -> str:
            snapshot = ref.get(transaction=transaction)
            if not snapshot.exists:
                raise CampaignNotFound(f"Campaign {campaign_id!r} does not exist.")
            current = campaign_store.record_from_snapshot(snapshot)
            if current.deletion_job_id is not None:
                return current.deletion_job_id
            self._check(current, now)
            version = current.version + 1
            transaction.update(
                ref, {"deletion_job_id": job_id, "updated_at": now, "version": version}
            )
            transaction.create(
                job_store.job_ref(self.db, job_id),
                job.model_dump(mode="python", exclude={"job_id"}),
            )
            entry = audit.entry(
                AuditAction.DELETE,
                campaign_id=campaign_id,
                target=campaign_id,
                before=audited(current),
                after={"job_id": job_id},
                version=version,
            )
            audit_store.add(transaction, self.db, entry)
            return job_id

        marked: str = mark(self.db.transaction())
        return marked

    @staticmethod
    def _check(campaign: CampaignRecord, now: datetime) -> None:
        if not deletable(campaign, now):
            raise CampaignNotDeletable(
                f"Campaign {campaign.campaign_id!r} has started: its codes, claims and counters "
                "are kept while it runs. End it and archive it, then delete it."
            )

    # --- import_codes (the request object's event) ------------------------------------------
    def handle_request(self, name: str) -> JobRecord | None:
        job = self.requested_job(name)
        return None if job is None else self.run(job)

    def run(self, job: JobRecord) -> JobRecord | None:
        """Remove everything the campaign holds, then the campaign, then finish the job."""
        progress = _Progress(self.db, job)
        ref = campaign_ref(self.db, job.campaign_id)
        for _ in range(MAX_SWEEPS):
            snapshot = ref.get()
            if snapshot.exists and (snapshot.to_dict() or {}).get("deletion_job_id") != job.job_id:
                # Never a campaign this job did not mark (a new one under the same id).
                log.error("deletion job for a campaign it did not mark", extra=progress.extra)
                return None
            self._sweep(job, progress)
            if not snapshot.exists:
                break
            try:
                ref.delete(option=self.db.write_option(last_update_time=snapshot.update_time))
            except gexc.FailedPrecondition:
                log.info(
                    "campaign changed during its deletion; sweeping again", extra=progress.extra
                )
                continue
            except gexc.NotFound:
                pass
            progress.add(1)
            break
        else:
            raise Contended(retry_after=60)
        done = job_store.finish_done(self.db, job=job, now=self.clock(), deleted=progress.deleted)
        if done is None:
            return None
        storage_objects.delete_if_exists(
            self.storage_client,
            bucket=self.bucket,
            name=job_store.request_object(JobKind.DELETE, job.campaign_id, job.job_id),
        )
        log.info("campaign deleted", extra=progress.extra)
        return done

    def _sweep(self, job: JobRecord, progress: _Progress) -> None:
        campaign_id = job.campaign_id
        for collection in campaign_ref(self.db, campaign_id).collections():
            self._delete_all(_descendants(collection), progress)
        webhooks = webhooks_collection(self.db).where(
            filter=FieldFilter("campaign_id", "==", campaign_id)
        )
        for webhook in _matching(webhooks):
            for collection in webhook_ref(self.db, webhook.id).collections():
                self._delete_all(_descendants(collection), progress)
            self._delete_all(iter([webhook]), progress)
        self._delete_all(iter([campaign_webhooks_ref(self.db, campaign_id)]), progress)
        jobs = jobs_collection(self.db).where(filter=FieldFilter("campaign_id", "==", campaign_id))
        self._delete_all((r for r in _matching(jobs) if r.id != job.job_id), progress)
        bucket = self.storage_client.bucket(self.bucket)
        for folder in FOLDERS:
            # The library lists a page (1,000 names) at a time.
            for blob in self.storage_client.list_blobs(bucket, prefix=f"{folder}/{campaign_id}/"):
                storage_objects.delete_if_exists(
                    self.storage_client, bucket=bucket.name, name=blob.name
                )
                progress.add(1)

    def _delete_all(self, refs: Iterator[firestore.DocumentReference], progress: _Progress) -> None:
        batch, size = self.db.batch(), 0
        for ref in refs:
            batch.delete(ref)
            size += 1
            if size == BATCH:
                batch.commit()
                progress.add(size)
                batch, size = self.db.batch(), 0
        if size:
            batch.commit()
            progress.add(size)


class _Progress:
    """How much a deletion removed, saved on its job every few seconds for the console."""

    def __init__(self, db: firestore.Client, job: JobRecord) -> None:
        self._db = db
        self._job = job
        self.deleted = 0
        self._saved_at = time.monotonic()

    @property
    def extra(self) -> dict[str, Any]:
        return {"job_id": self._job.job_id, "campaign_id": self._job.campaign_id}

    def add(self, count: int) -> None:
        self.deleted += count
        if time.monotonic() - self._saved_at >= PROGRESS_EVERY_SECONDS:
            self._saved_at = time.monotonic()
            job_store.save_progress(
                self._db, job=self._job.model_copy(update={"deleted": self.deleted})
            )
