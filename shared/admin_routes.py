"""Routes of admin_api: campaigns for marketers and operators (ID token with the `admin` claim)."""

from __future__ import annotations

import re

import flask
from pydantic import BaseModel, ConfigDict

from shared import campaign_service, campaign_store, job_store
from shared.auth import authenticate, require_admin
from shared.clock import utcnow
from shared.errors import JobNotFound
from shared.firestore_db import get_db
from shared.http_edge import Router, campaign_id_param, json_response, parse_body, parse_query
from shared.models import (
    CampaignCreate,
    CampaignList,
    CampaignStatus,
    CampaignUpdate,
    GenerateCodes,
    JobAccepted,
    JobList,
    JobPublic,
)
from shared.runtime import get_intake
from shared.settings import get_settings

_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

router = Router()


class CampaignFilter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: CampaignStatus | None = None


def _admin(request: flask.Request) -> None:
    require_admin(authenticate(request.headers.get("Authorization"), settings=get_settings()))


@router.route("/v1/campaigns", methods=["POST"])
def create_campaign(request: flask.Request) -> flask.Response:
    _admin(request)
    data = parse_body(request, CampaignCreate)
    db, now = get_db(), utcnow()
    record = campaign_service.create_campaign(db, data=data, now=now)
    view = campaign_service.admin_view(db, campaign=record, now=now, with_stats=False)
    return json_response(view, 201)


@router.route("/v1/campaigns", methods=["GET"])
def list_campaigns(request: flask.Request) -> flask.Response:
    _admin(request)
    query = parse_query(request, CampaignFilter)
    db, now = get_db(), utcnow()
    records = campaign_service.list_campaigns(db, status=query.status, now=now)
    views = [
        campaign_service.admin_view(db, campaign=r, now=now, with_stats=False) for r in records
    ]
    return json_response(CampaignList(campaigns=views))


@router.route("/v1/campaigns/<campaign_id>", methods=["GET"])
def get_campaign(request: flask.Request, campaign_id: str) -> flask.Response:
    _admin(request)
    db, now = get_db(), utcnow()
    record = campaign_store.get_campaign(db, campaign_id=campaign_id_param(campaign_id))
    return json_response(campaign_service.admin_view(db, campaign=record, now=now, with_stats=True))


@router.route("/v1/campaigns/<campaign_id>", methods=["PATCH"])
def update_campaign(request: flask.Request, campaign_id: str) -> flask.Response:
    _admin(request)
    data = parse_body(request, CampaignUpdate)
    db, now = get_db(), utcnow()
    record = campaign_service.update_campaign(
        db, campaign_id=campaign_id_param(campaign_id), data=data, now=now
    )
    return json_response(campaign_service.admin_view(db, campaign=record, now=now, with_stats=True))


@router.route("/v1/campaigns/<campaign_id>/codes:generate", methods=["POST"])
def generate_codes(request: flask.Request, campaign_id: str) -> flask.Response:
    _admin(request)
    spec = parse_body(request, GenerateCodes)
    job = get_intake().request_generation(campaign_id=campaign_id_param(campaign_id), spec=spec)
    return json_response(JobAccepted(job_id=job.job_id), 202)


@router.route("/v1/jobs/<job_id>", methods=["GET"])
def get_job(request: flask.Request, job_id: str) -> flask.Response:
    _admin(request)
    if not _JOB_ID.match(job_id):
        raise JobNotFound(f"Job {job_id!r} does not exist.")
    return json_response(JobPublic.of(job_store.get_job(get_db(), job_id=job_id)))


@router.route("/v1/campaigns/<campaign_id>/jobs", methods=["GET"])
def list_jobs(request: flask.Request, campaign_id: str) -> flask.Response:
    _admin(request)
    db = get_db()
    jobs = job_store.list_campaign_jobs(db, campaign_id=campaign_id_param(campaign_id))
    if not jobs:
        # A file dropped for a misspelt campaign still has its (failed) job listed above.
        campaign_store.get_campaign(db, campaign_id=campaign_id)
    return json_response(JobList(jobs=[JobPublic.of(j) for j in jobs]))


def handle(request: flask.Request) -> flask.Response:
    return router.dispatch(request)
