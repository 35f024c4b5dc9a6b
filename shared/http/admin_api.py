"""admin_api: campaigns, codes, jobs, stats and maintenance for marketers and operators (an ID
token with the `admin` claim); code look-ups and redemptions for a shop's checkout (`redeemer`
or `admin`); and Shopify's orders/create webhook (signed by Shopify, no ID token)."""

from __future__ import annotations

import re

import flask
from pydantic import BaseModel, ConfigDict

from shared.campaigns import service as campaign_service
from shared.campaigns import store as campaign_store
from shared.campaigns.models import CampaignCreate, CampaignList, CampaignStatus, CampaignUpdate
from shared.claims.models import RedemptionCreate, ShopifyOrder
from shared.clock import utcnow
from shared.errors import CodeNotFound, JobNotFound
from shared.http import shopify
from shared.http.routing import (
    Access,
    Call,
    Router,
    campaign_id_param,
    json_response,
    parse_body,
    parse_query,
    parse_raw_json,
)
from shared.intake import jobs as job_store
from shared.intake.csv_rows import MAX_CODE_LENGTH
from shared.intake.models import GenerateCodes, JobAccepted, JobList, JobPublic
from shared.maintenance.models import SweepRequest
from shared.usage import reconciliation
from shared.usage.models import ReconcileRequest, ReportGranularity

_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

router = Router()
ADMIN = Access.ADMIN
REDEEMER = Access.REDEEMER
# Shopify sends other topics to a URL only if it was subscribed to them; they are acknowledged
# and ignored, so a misconfigured subscription never redeems anything.
REDEEMING_TOPICS = {"orders/create"}


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


@router.route("/v1/maintenance/sweep", methods=["POST"], access=ADMIN)
def sweep(call: Call) -> flask.Response:
    body = parse_body(call.request, SweepRequest)
    return json_response(call.services.sweeper.sweep(body))


# --- checkout: codes and redemptions -----------------------------------------------------------
@router.route("/v1/campaigns/<campaign_id>/codes/<code>", methods=["GET"], access=REDEEMER)
def code_status(call: Call, campaign_id: str, code: str) -> flask.Response:
    campaign_id = campaign_id_param(campaign_id)
    if len(code) > MAX_CODE_LENGTH:
        raise CodeNotFound(f"Campaign {campaign_id!r} has no such code.")
    return json_response(call.services.redemptions.status(campaign_id=campaign_id, code=code))


@router.route("/v1/campaigns/<campaign_id>/redemptions", methods=["POST"], access=REDEEMER)
def redeem(call: Call, campaign_id: str) -> flask.Response:
    body = parse_body(call.request, RedemptionCreate)
    outcome = call.services.redemptions.redeem(
        campaign_id=campaign_id_param(campaign_id), code=body.code, order_id=body.order_id
    )
    return json_response(outcome.redemption, 201 if outcome.created else 200)


@router.route("/v1/webhooks/shopify/orders", methods=["POST"], access=Access.SHOPIFY_WEBHOOK)
def shopify_orders(call: Call) -> flask.Response:
    topic = call.request.headers.get(shopify.TOPIC_HEADER)
    if topic is not None and topic not in REDEEMING_TOPICS:
        return json_response({"ignored_topic": topic})
    order = parse_raw_json(call.request.get_data(cache=True), ShopifyOrder)
    return json_response(call.services.redemptions.redeem_order(order))
