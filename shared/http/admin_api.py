"""admin_api: campaigns, codes, jobs, stats, webhooks and maintenance for marketers and operators
(every route needs an ID token with the `admin` claim)."""

from __future__ import annotations

import re

import flask
from pydantic import BaseModel, ConfigDict

from shared.campaigns import service as campaign_service
from shared.campaigns import store as campaign_store
from shared.campaigns.models import CampaignCreate, CampaignList, CampaignStatus, CampaignUpdate
from shared.clock import utcnow
from shared.errors import JobNotFound, WebhookNotFound
from shared.http.routing import (
    Access,
    Call,
    Router,
    campaign_id_param,
    json_response,
    parse_body,
    parse_query,
)
from shared.intake import jobs as job_store
from shared.intake.models import GenerateCodes, JobAccepted, JobList, JobPublic
from shared.maintenance.models import SweepRequest
from shared.usage import reconciliation
from shared.usage.models import ReconcileRequest, ReportGranularity
from shared.webhooks.models import DeliveriesQuery, WebhookCreate

_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_WEBHOOK_ID = re.compile(r"^wh_[a-f0-9]{16}$")

router = Router()
ADMIN = Access.ADMIN


class CampaignFilter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: CampaignStatus | None = None


class ReportQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    granularity: ReportGranularity = ReportGranularity.HOUR


@router.route("/v1/campaigns", methods=["POST"], access=ADMIN)
def create_campaign(call: Call) -> flask.Response:
    data = parse_body(call.request, CampaignCreate)
    now = utcnow()
    record = campaign_service.create_campaign(call.services.db, data=data, now=now)
    return json_response(campaign_service.admin_view(record, now=now, stats=None), 201)


@router.route("/v1/campaigns", methods=["GET"], access=ADMIN)
def list_campaigns(call: Call) -> flask.Response:
    query = parse_query(call.request, CampaignFilter)
    now = utcnow()
    records = campaign_service.list_campaigns(call.services.db, status=query.status, now=now)
    views = [campaign_service.admin_view(r, now=now, stats=None) for r in records]
    return json_response(CampaignList(campaigns=views))


@router.route("/v1/campaigns/<campaign_id>", methods=["GET"], access=ADMIN)
def get_campaign(call: Call, campaign_id: str) -> flask.Response:
    services, now = call.services, utcnow()
    record = campaign_store.get_campaign(services.db, campaign_id=campaign_id_param(campaign_id))
    stats = services.usage.stats(record, now=now)
    return json_response(campaign_service.admin_view(record, now=now, stats=stats))


@router.route("/v1/campaigns/<campaign_id>", methods=["PATCH"], access=ADMIN)
def update_campaign(call: Call, campaign_id: str) -> flask.Response:
    data = parse_body(call.request, CampaignUpdate)
    services, now = call.services, utcnow()
    record = campaign_service.update_campaign(
        services.db, campaign_id=campaign_id_param(campaign_id), data=data, now=now
    )
    stats = services.usage.stats(record, now=now)
    return json_response(campaign_service.admin_view(record, now=now, stats=stats))


@router.route("/v1/campaigns/<campaign_id>/codes:generate", methods=["POST"], access=ADMIN)
def generate_codes(call: Call, campaign_id: str) -> flask.Response:
    spec = parse_body(call.request, GenerateCodes)
    job = call.services.intake.request_generation(
        campaign_id=campaign_id_param(campaign_id), spec=spec
    )
    return json_response(JobAccepted(job_id=job.job_id), 202)


@router.route("/v1/jobs/<job_id>", methods=["GET"], access=ADMIN)
def get_job(call: Call, job_id: str) -> flask.Response:
    if not _JOB_ID.match(job_id):
        raise JobNotFound(f"Job {job_id!r} does not exist.")
    return json_response(JobPublic.of(job_store.get_job(call.services.db, job_id=job_id)))


@router.route("/v1/campaigns/<campaign_id>/jobs", methods=["GET"], access=ADMIN)
def list_jobs(call: Call, campaign_id: str) -> flask.Response:
    db = call.services.db
    jobs = job_store.list_campaign_jobs(db, campaign_id=campaign_id_param(campaign_id))
    if not jobs:
        # A file dropped for a misspelt campaign still has its (failed) job listed above.
        campaign_store.get_campaign(db, campaign_id=campaign_id)
    return json_response(JobList(jobs=[JobPublic.of(j) for j in jobs]))


@router.route("/v1/campaigns/<campaign_id>/report", methods=["GET"], access=ADMIN)
def report(call: Call, campaign_id: str) -> flask.Response:
    query = parse_query(call.request, ReportQuery)
    services = call.services
    record = campaign_store.get_campaign(services.db, campaign_id=campaign_id_param(campaign_id))
    return json_response(services.usage.report(record, granularity=query.granularity))


@router.route("/v1/campaigns/<campaign_id>/reconcile", methods=["POST"], access=ADMIN)
def reconcile(call: Call, campaign_id: str) -> flask.Response:
    body = parse_body(call.request, ReconcileRequest)
    services = call.services
    record = campaign_store.get_campaign(services.db, campaign_id=campaign_id_param(campaign_id))
    result = reconciliation.reconcile(
        services.db,
        counters=services.counters,
        campaign_id=record.campaign_id,
        now=utcnow(),
        repair=body.repair,
    )
    return json_response(result)


def webhook_id_param(value: str) -> str:
    if not _WEBHOOK_ID.match(value):
        raise WebhookNotFound(f"Webhook {value!r} does not exist.")
    return value


@router.route("/v1/campaigns/<campaign_id>/webhooks", methods=["POST"], access=ADMIN)
def create_webhook(call: Call, campaign_id: str) -> flask.Response:
    data = parse_body(call.request, WebhookCreate)
    created = call.services.webhooks.subscribe(
        campaign_id=campaign_id_param(campaign_id), data=data
    )
    return json_response(created, 201)


@router.route("/v1/campaigns/<campaign_id>/webhooks", methods=["GET"], access=ADMIN)
def list_webhooks(call: Call, campaign_id: str) -> flask.Response:
    listed = call.services.webhooks.list_webhooks(campaign_id=campaign_id_param(campaign_id))
    return json_response(listed)


@router.route("/v1/campaigns/<campaign_id>/webhooks/<webhook_id>", methods=["DELETE"], access=ADMIN)
def delete_webhook(call: Call, campaign_id: str, webhook_id: str) -> flask.Response:
    call.services.webhooks.unsubscribe(
        campaign_id=campaign_id_param(campaign_id), webhook_id=webhook_id_param(webhook_id)
    )
    return flask.Response(status=204)


@router.route(
    "/v1/campaigns/<campaign_id>/webhooks/<webhook_id>/deliveries", methods=["GET"], access=ADMIN
)
def list_deliveries(call: Call, campaign_id: str, webhook_id: str) -> flask.Response:
    query = parse_query(call.request, DeliveriesQuery)
    deliveries = call.services.webhooks.deliveries(
        campaign_id=campaign_id_param(campaign_id),
        webhook_id=webhook_id_param(webhook_id),
        limit=query.limit,
    )
    return json_response(deliveries)


@router.route("/v1/maintenance/sweep", methods=["POST"], access=ADMIN)
def sweep(call: Call) -> flask.Response:
    body = parse_body(call.request, SweepRequest)
    return json_response(call.services.sweeper.sweep(body))
