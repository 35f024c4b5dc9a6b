"""Routes of admin_api: campaigns for marketers and operators (ID token with the `admin` claim)."""

from __future__ import annotations

import re
from datetime import timedelta

import flask
from pydantic import BaseModel, ConfigDict

from shared import campaign_service, campaign_store, job_store, reconciliation
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
    ReconcileRequest,
    ReportGranularity,
    SweepRequest,
    SweepResult,
)
from shared.runtime import get_bus, get_counters, get_intake, get_usage
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
    return json_response(campaign_service.admin_view(record, now=now, stats=None), 201)


@router.route("/v1/campaigns", methods=["GET"])
def list_campaigns(request: flask.Request) -> flask.Response:
    _admin(request)
    query = parse_query(request, CampaignFilter)
    db, now = get_db(), utcnow()
    records = campaign_service.list_campaigns(db, status=query.status, now=now)
    views = [campaign_service.admin_view(r, now=now, stats=None) for r in records]
    return json_response(CampaignList(campaigns=views))


@router.route("/v1/campaigns/<campaign_id>", methods=["GET"])
def get_campaign(request: flask.Request, campaign_id: str) -> flask.Response:
    _admin(request)
    db, now = get_db(), utcnow()
    record = campaign_store.get_campaign(db, campaign_id=campaign_id_param(campaign_id))
    stats = get_usage().stats(record, now=now)
    return json_response(campaign_service.admin_view(record, now=now, stats=stats))


@router.route("/v1/campaigns/<campaign_id>", methods=["PATCH"])
def update_campaign(request: flask.Request, campaign_id: str) -> flask.Response:
    _admin(request)
    data = parse_body(request, CampaignUpdate)
    db, now = get_db(), utcnow()
    record = campaign_service.update_campaign(
        db, campaign_id=campaign_id_param(campaign_id), data=data, now=now
    )
    stats = get_usage().stats(record, now=now)
    return json_response(campaign_service.admin_view(record, now=now, stats=stats))


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


class ReportQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    granularity: ReportGranularity = ReportGranularity.HOUR


@router.route("/v1/campaigns/<campaign_id>/report", methods=["GET"])
def report(request: flask.Request, campaign_id: str) -> flask.Response:
    _admin(request)
    query = parse_query(request, ReportQuery)
    record = campaign_store.get_campaign(get_db(), campaign_id=campaign_id_param(campaign_id))
    return json_response(get_usage().report(record, granularity=query.granularity))


@router.route("/v1/campaigns/<campaign_id>/reconcile", methods=["POST"])
def reconcile(request: flask.Request, campaign_id: str) -> flask.Response:
    _admin(request)
    body = parse_body(request, ReconcileRequest)
    db = get_db()
    record = campaign_store.get_campaign(db, campaign_id=campaign_id_param(campaign_id))
    result = reconciliation.reconcile(
        db,
        counters=get_counters(),
        campaign_id=record.campaign_id,
        now=utcnow(),
        repair=body.repair,
    )
    return json_response(result)


@router.route("/v1/maintenance/sweep", methods=["POST"])
def sweep(request: flask.Request) -> flask.Response:
    _admin(request)
    body = parse_body(request, SweepRequest)
    now = utcnow()
    since = now - timedelta(minutes=body.window_minutes)
    campaigns = [
        c.campaign_id for c in campaign_store.list_campaigns(get_db()) if c.ends_at > since
    ]
    result = get_bus().sweep(
        campaign_ids=campaigns,
        now=now,
        window=timedelta(minutes=body.window_minutes),
        grace=timedelta(seconds=body.grace_seconds),
    )
    for campaign_id in campaigns:
        get_usage().check_stock(campaign_id, force=True)
    return json_response(
        SweepResult(
            outbox_published=result.outbox_published,
            claims_republished=result.claims_republished,
            failures=result.failures,
        )
    )


def handle(request: flask.Request) -> flask.Response:
    return router.dispatch(request)
