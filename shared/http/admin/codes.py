"""Codes in and out of a campaign, each move a job: generation, CSV uploads, exports, and the
jobs themselves with their files."""

from __future__ import annotations

import flask
from pydantic import TypeAdapter

from shared.campaigns import store as campaign_store
from shared.control.exports import ExportCreate
from shared.errors import CampaignNotFound, JobNotFinished, JobNotFound
from shared.http.access import Access
from shared.http.requests import campaign_id_param, path_id
from shared.http.responses import json_response
from shared.http.routing import Call, Routes, answers, raises
from shared.intake import jobs as job_store
from shared.intake.models import (
    GenerateCodes,
    JobAccepted,
    JobKind,
    JobList,
    JobPublic,
    JobState,
    UploadCreate,
    UploadSession,
)
from shared.types import JobId

routes = Routes()
_JOB_ID: TypeAdapter[str] = TypeAdapter(JobId)


def job_id_param(value: str) -> str:
    return path_id(value, _JOB_ID, JobNotFound, "Job {} does not exist.")


@routes.post("/v1/campaigns/<campaign_id>/codes:generate", access=Access.ADMIN, body=GenerateCodes)
@answers(202, JobAccepted)
@raises(CampaignNotFound)
def generate_codes(call: Call, campaign_id: str) -> flask.Response:
    """Generate codes into a campaign (a job)."""
    job = call.services.intake.request_generation(
        campaign_id=campaign_id_param(campaign_id),
        spec=call.body_as(GenerateCodes),
        audit=call.audit(),
    )
    return json_response(JobAccepted(job_id=job.job_id), 202)


@routes.post("/v1/campaigns/<campaign_id>/uploads", access=Access.ADMIN, body=UploadCreate)
@answers(201, UploadSession)
@raises(CampaignNotFound)
def open_upload(call: Call, campaign_id: str) -> flask.Response:
    """Open a resumable upload session for a CSV of codes: PUT the file to upload_url, straight
    into imports/{campaign_id}/{name}; its import job follows."""
    origin = call.request.headers.get("Origin")
    allowed = call.services.settings.cors_origins
    session = call.services.intake.open_upload(
        campaign_id=campaign_id_param(campaign_id),
        name=call.body_as(UploadCreate).name,
        # Cloud Storage answers the session's requests with CORS for this origin only.
        origin=origin if origin is not None and (origin in allowed or "*" in allowed) else None,
        audit=call.audit(),
    )
    return json_response(session, 201)


@routes.get("/v1/jobs/<job_id>", access=Access.ADMIN)
@answers(200, JobPublic)
@raises(JobNotFound)
def get_job(call: Call, job_id: str) -> flask.Response:
    """An import or generation job."""
    job = job_store.get_job(call.services.db, job_id=job_id_param(job_id))
    return json_response(JobPublic.of(job))


@routes.post("/v1/campaigns/<campaign_id>/exports", access=Access.ADMIN, body=ExportCreate)
@answers(202, JobAccepted)
@raises(CampaignNotFound)
def create_export(call: Call, campaign_id: str) -> flask.Response:
    """Export the campaign's claims, redemptions or codes as a CSV (a job: follow it with GET
    /v1/jobs/{job_id}, then download it)."""
    job = call.services.exports.request(
        campaign_id=campaign_id_param(campaign_id),
        kind=call.body_as(ExportCreate).kind,
        audit=call.audit(),
    )
    return json_response(JobAccepted(job_id=job.job_id), 202)


@routes.get("/v1/jobs/<job_id>/download", access=Access.ADMIN, content_type="text/csv")
@answers(200)
@raises(JobNotFound, JobNotFinished)
def download_job(call: Call, job_id: str) -> flask.Response:
    """A job's file, streamed as CSV: an export's rows, or an import's or assignment's rejected
    rows (line, reason, value)."""
    job = job_store.get_job(call.services.db, job_id=job_id_param(job_id))
    if job.kind is JobKind.EXPORT:
        if job.state is not JobState.DONE:
            raise JobNotFinished(
                f"Export {job.job_id!r} is {job.state.value}; download it once done."
            )
        chunks = call.services.exports.download(job)
        name = f"{job.campaign_id}-{job.export_kind}-{job.job_id}.csv"
    else:
        chunks = call.services.intake.rejected_rows(job)
        name = f"{job.campaign_id}-{job.job_id}-rejected.csv"
    return flask.Response(
        chunks,
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@routes.get("/v1/campaigns/<campaign_id>/jobs", access=Access.ADMIN)
@answers(200, JobList)
@raises(CampaignNotFound)
def list_jobs(call: Call, campaign_id: str) -> flask.Response:
    """A campaign's jobs, newest first (also those of files for unknown campaigns)."""
    db = call.services.db
    jobs = job_store.list_campaign_jobs(db, campaign_id=campaign_id_param(campaign_id))
    if not jobs:
        # A file dropped for a misspelt campaign still has its (failed) job listed above.
        campaign_store.get_campaign(db, campaign_id=campaign_id)
    return json_response(JobList(jobs=[JobPublic.of(j) for j in jobs]))
