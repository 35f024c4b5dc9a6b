"""admin_api: campaigns, codes, jobs, stats, webhooks and maintenance for marketers and operators
(an ID token with the `admin` claim); code look-ups and redemptions for a shop's checkout
(`redeemer` or `admin`), their reversals and voids; and Shopify's orders/create, orders/cancelled
and refunds/create webhooks (signed by Shopify, no ID token)."""

from __future__ import annotations

import re

import flask
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from shared.campaigns import service as campaign_service
from shared.campaigns import store as campaign_store
from shared.campaigns.models import (
    CampaignAdmin,
    CampaignCreate,
    CampaignList,
    CampaignStatus,
    CampaignUpdate,
)
from shared.claims.models import (
    CodeStatus,
    OrderId,
    OrderRedemptions,
    OrderReversal,
    RedemptionCreate,
    RedemptionPublic,
    ShopifyOrder,
    ShopifyRefund,
)
from shared.clock import utcnow
from shared.errors import (
    CampaignExists,
    CampaignNotFound,
    CodeAlreadyRedeemed,
    CodeExpired,
    CodeNotClaimed,
    CodeNotFound,
    CodeVoided,
    Contended,
    JobNotFound,
    RedemptionNotFound,
    TooManyWebhooks,
    WebhookNotFound,
    WebhookUrlNotAllowed,
    shown,
)
from shared.http import openapi, shopify
from shared.http.routing import (
    Access,
    Call,
    Router,
    campaign_id_param,
    json_response,
)
from shared.intake import jobs as job_store
from shared.intake.csv_rows import MAX_CODE_LENGTH
from shared.intake.models import GenerateCodes, JobAccepted, JobList, JobPublic
from shared.maintenance.models import SweepRequest, SweepResult
from shared.types import JobId
from shared.usage import reconciliation
from shared.usage.models import (
    ReconcileRequest,
    ReconciliationReport,
    ReportGranularity,
    UsageReport,
)
from shared.webhooks.models import (
    DeliveriesQuery,
    DeliveryList,
    WebhookCreate,
    WebhookCreated,
    WebhookList,
)

_JOB_ID: TypeAdapter[str] = TypeAdapter(JobId)
_ORDER_ID: TypeAdapter[str] = TypeAdapter(OrderId)
_WEBHOOK_ID = re.compile(r"^wh_[a-f0-9]{16}$")

router = Router(title="codedrop admin_api")
ADMIN = Access.ADMIN
REDEEMER = Access.REDEEMER
# Shopify sends other topics to a URL only if it was subscribed to them; they are acknowledged
# and ignored, so a misconfigured subscription never redeems (or reverses) anything.
REDEEMING_TOPICS = {"orders/create"}
REVERSING_TOPICS = {"orders/cancelled"}
REFUND_TOPICS = {"refunds/create"}


class CampaignFilter(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    status: CampaignStatus | None = None


class ReportQuery(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    granularity: ReportGranularity = ReportGranularity.HOUR


@router.route(
    "/openapi.json",
    methods=["GET"],
    access=Access.PUBLIC,
    summary="This API's OpenAPI 3.1 document.",
)
def openapi_document(call: Call) -> flask.Response:
    return json_response(openapi.cached_document(router))


@router.route(
    "/v1/campaigns",
    methods=["POST"],
    access=ADMIN,
    summary="Create a campaign.",
    body=CampaignCreate,
    responses={201: CampaignAdmin},
    raises=[CampaignExists],
)
def create_campaign(call: Call) -> flask.Response:
    data = call.body_as(CampaignCreate)
    now = utcnow()
    record = campaign_service.create_campaign(call.services.db, data=data, now=now)
    return json_response(campaign_service.admin_view(record, now=now, stats=None), 201)


@router.route(
    "/v1/campaigns",
    methods=["GET"],
    access=ADMIN,
    summary="List campaigns, newest first.",
    query=CampaignFilter,
    responses={200: CampaignList},
)
def list_campaigns(call: Call) -> flask.Response:
    query = call.query_as(CampaignFilter)
    now = utcnow()
    records = campaign_service.list_campaigns(call.services.db, status=query.status, now=now)
    views = [campaign_service.admin_view(r, now=now, stats=None) for r in records]
    return json_response(CampaignList(campaigns=views))


@router.route(
    "/v1/campaigns/<campaign_id>",
    methods=["GET"],
    access=ADMIN,
    summary="A campaign with its stats.",
    responses={200: CampaignAdmin},
    raises=[CampaignNotFound],
)
def get_campaign(call: Call, campaign_id: str) -> flask.Response:
    services, now = call.services, utcnow()
    record = campaign_store.get_campaign(services.db, campaign_id=campaign_id_param(campaign_id))
    stats = services.usage.stats(record, now=now)
    return json_response(campaign_service.admin_view(record, now=now, stats=stats))


@router.route(
    "/v1/campaigns/<campaign_id>",
    methods=["PATCH"],
    access=ADMIN,
    summary="Change a campaign's title, window, limits, pause or waiting room.",
    body=CampaignUpdate,
    responses={200: CampaignAdmin},
    raises=[CampaignNotFound],
)
def update_campaign(call: Call, campaign_id: str) -> flask.Response:
    data = call.body_as(CampaignUpdate)
    services, now = call.services, utcnow()
    record = campaign_service.update_campaign(
        services.db, campaign_id=campaign_id_param(campaign_id), data=data, now=now
    )
    stats = services.usage.stats(record, now=now)
    return json_response(campaign_service.admin_view(record, now=now, stats=stats))


@router.route(
    "/v1/campaigns/<campaign_id>/codes:generate",
    methods=["POST"],
    access=ADMIN,
    summary="Generate codes into a campaign (a job).",
    body=GenerateCodes,
    responses={202: JobAccepted},
    raises=[CampaignNotFound],
)
def generate_codes(call: Call, campaign_id: str) -> flask.Response:
    spec = call.body_as(GenerateCodes)
    job = call.services.intake.request_generation(
        campaign_id=campaign_id_param(campaign_id), spec=spec
    )
    return json_response(JobAccepted(job_id=job.job_id), 202)


@router.route(
    "/v1/jobs/<job_id>",
    methods=["GET"],
    access=ADMIN,
    summary="An import or generation job.",
    responses={200: JobPublic},
    raises=[JobNotFound],
)
def get_job(call: Call, job_id: str) -> flask.Response:
    try:
        _JOB_ID.validate_python(job_id)
    except ValidationError:
        # Never a Firestore read: ids like __x__ are reserved there.
        raise JobNotFound(f"Job {shown(job_id)} does not exist.") from None
    return json_response(JobPublic.of(job_store.get_job(call.services.db, job_id=job_id)))


@router.route(
    "/v1/campaigns/<campaign_id>/jobs",
    methods=["GET"],
    access=ADMIN,
    summary="A campaign's jobs, newest first (also those of files for unknown campaigns).",
    responses={200: JobList},
    raises=[CampaignNotFound],
)
def list_jobs(call: Call, campaign_id: str) -> flask.Response:
    db = call.services.db
    jobs = job_store.list_campaign_jobs(db, campaign_id=campaign_id_param(campaign_id))
    if not jobs:
        # A file dropped for a misspelt campaign still has its (failed) job listed above.
        campaign_store.get_campaign(db, campaign_id=campaign_id)
    return json_response(JobList(jobs=[JobPublic.of(j) for j in jobs]))


@router.route(
    "/v1/campaigns/<campaign_id>/report",
    methods=["GET"],
    access=ADMIN,
    summary="Claims, imports, redemptions and releases over time (by hour, day or week).",
    query=ReportQuery,
    responses={200: UsageReport},
    raises=[CampaignNotFound],
)
def report(call: Call, campaign_id: str) -> flask.Response:
    query = call.query_as(ReportQuery)
    services = call.services
    record = campaign_store.get_campaign(services.db, campaign_id=campaign_id_param(campaign_id))
    return json_response(services.usage.report(record, granularity=query.granularity))


@router.route(
    "/v1/campaigns/<campaign_id>/reconcile",
    methods=["POST"],
    access=ADMIN,
    summary="Recount a campaign and repair its counters.",
    body=ReconcileRequest,
    responses={200: ReconciliationReport},
    raises=[CampaignNotFound],
)
def reconcile(call: Call, campaign_id: str) -> flask.Response:
    body = call.body_as(ReconcileRequest)
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
        raise WebhookNotFound(f"Webhook {shown(value)} does not exist.")
    return value


@router.route(
    "/v1/campaigns/<campaign_id>/webhooks",
    methods=["POST"],
    access=ADMIN,
    summary="Subscribe an endpoint to the campaign's events (its signing secret is shown once).",
    body=WebhookCreate,
    responses={201: WebhookCreated},
    raises=[CampaignNotFound, WebhookUrlNotAllowed, TooManyWebhooks, Contended],
)
def create_webhook(call: Call, campaign_id: str) -> flask.Response:
    data = call.body_as(WebhookCreate)
    created = call.services.webhooks.subscribe(
        campaign_id=campaign_id_param(campaign_id), data=data
    )
    return json_response(created, 201)


@router.route(
    "/v1/campaigns/<campaign_id>/webhooks",
    methods=["GET"],
    access=ADMIN,
    summary="The campaign's webhook subscriptions.",
    responses={200: WebhookList},
    raises=[CampaignNotFound],
)
def list_webhooks(call: Call, campaign_id: str) -> flask.Response:
    listed = call.services.webhooks.list_webhooks(campaign_id=campaign_id_param(campaign_id))
    return json_response(listed)


@router.route(
    "/v1/campaigns/<campaign_id>/webhooks/<webhook_id>",
    methods=["DELETE"],
    access=ADMIN,
    summary="Stop delivering to an endpoint.",
    responses={204: None},
    raises=[CampaignNotFound, WebhookNotFound, Contended],
)
def delete_webhook(call: Call, campaign_id: str, webhook_id: str) -> flask.Response:
    call.services.webhooks.unsubscribe(
        campaign_id=campaign_id_param(campaign_id), webhook_id=webhook_id_param(webhook_id)
    )
    return flask.Response(status=204)


@router.route(
    "/v1/campaigns/<campaign_id>/webhooks/<webhook_id>/deliveries",
    methods=["GET"],
    access=ADMIN,
    summary="The endpoint's recent deliveries: event, attempts, last status, next attempt.",
    query=DeliveriesQuery,
    responses={200: DeliveryList},
    raises=[CampaignNotFound, WebhookNotFound],
)
def list_deliveries(call: Call, campaign_id: str, webhook_id: str) -> flask.Response:
    query = call.query_as(DeliveriesQuery)
    deliveries = call.services.webhooks.deliveries(
        campaign_id=campaign_id_param(campaign_id),
        webhook_id=webhook_id_param(webhook_id),
        limit=query.limit,
    )
    return json_response(deliveries)


@router.route(
    "/v1/maintenance/sweep",
    methods=["POST"],
    access=ADMIN,
    summary="Release expired holds, publish the outbox and lost events, drain due webhooks.",
    body=SweepRequest,
    responses={200: SweepResult},
)
def sweep(call: Call) -> flask.Response:
    body = call.body_as(SweepRequest)
    return json_response(call.services.sweeper.sweep(body))


# --- checkout: codes and redemptions -----------------------------------------------------------
@router.route(
    "/v1/campaigns/<campaign_id>/codes/<code>",
    methods=["GET"],
    access=REDEEMER,
    summary="Where a code stands: available, held, claimed or redeemed.",
    responses={200: CodeStatus},
    raises=[CampaignNotFound, CodeNotFound],
)
def code_status(call: Call, campaign_id: str, code: str) -> flask.Response:
    campaign_id = campaign_id_param(campaign_id)
    if len(code) > MAX_CODE_LENGTH:
        raise CodeNotFound(f"Campaign {campaign_id!r} has no such code.")
    return json_response(call.services.redemptions.status(campaign_id=campaign_id, code=code))


@router.route(
    "/v1/campaigns/<campaign_id>/redemptions",
    methods=["POST"],
    access=REDEEMER,
    summary="Redeem a held or claimed code for an order (idempotent on the order).",
    body=RedemptionCreate,
    responses={201: RedemptionPublic, 200: RedemptionPublic},
    raises=[
        CampaignNotFound,
        CodeNotFound,
        CodeNotClaimed,
        CodeAlreadyRedeemed,
        CodeExpired,
        CodeVoided,
        Contended,
    ],
)
def redeem(call: Call, campaign_id: str) -> flask.Response:
    body = call.body_as(RedemptionCreate)
    outcome = call.services.redemptions.redeem(
        campaign_id=campaign_id_param(campaign_id), code=body.code, order_id=body.order_id
    )
    return json_response(outcome.redemption, 201 if outcome.created else 200)


def order_id_param(value: str) -> str:
    try:
        return _ORDER_ID.validate_python(value)
    except ValidationError:
        raise RedemptionNotFound(f"No order {shown(value)} redeemed a code here.") from None


@router.route(
    "/v1/campaigns/<campaign_id>/redemptions/<order_id>:reverse",
    methods=["POST"],
    access=REDEEMER,
    summary=(
        "Reverse what a cancelled or refunded order redeemed in the campaign; the campaign's "
        "on_cancel says what becomes of each code (idempotent: a repeat answers the same)."
    ),
    responses={200: OrderReversal},
    raises=[CampaignNotFound, RedemptionNotFound, Contended],
)
def reverse_order(call: Call, campaign_id: str, order_id: str) -> flask.Response:
    reversal = call.services.reversals.reverse_order(
        campaign_id=campaign_id_param(campaign_id), order_id=order_id_param(order_id)
    )
    return json_response(reversal)


@router.route(
    "/v1/campaigns/<campaign_id>/codes/<code>:void",
    methods=["POST"],
    access=ADMIN,
    summary="Void a code: it can no longer be claimed or redeemed (idempotent).",
    responses={200: CodeStatus},
    raises=[CampaignNotFound, CodeNotFound, CodeAlreadyRedeemed, Contended],
)
def void_code(call: Call, campaign_id: str, code: str) -> flask.Response:
    campaign_id = campaign_id_param(campaign_id)
    if len(code) > MAX_CODE_LENGTH:
        raise CodeNotFound(f"Campaign {campaign_id!r} has no such code.")
    voided = call.services.reversals.void(campaign_id=campaign_id, code=code)
    return json_response(voided)


@router.route(
    "/v1/webhooks/shopify/orders",
    methods=["POST"],
    access=Access.SHOPIFY_WEBHOOK,
    summary=(
        "Shopify's orders/create webhook redeems the order's discount codes; its "
        "orders/cancelled webhook reverses what the order redeemed."
    ),
    body=ShopifyOrder,
    responses={200: OrderRedemptions},
    raises=[CampaignNotFound, Contended],
)
def shopify_orders(call: Call) -> flask.Response:
    order = call.body_as(ShopifyOrder)
    topic = call.request.headers.get(shopify.TOPIC_HEADER)
    if topic in REVERSING_TOPICS:
        return json_response(call.services.reversals.reverse_shop_order(order.id))
    if topic is not None and topic not in REDEEMING_TOPICS:
        return json_response(OrderRedemptions(order_id=order.id, results=[], ignored_topic=topic))
    return json_response(call.services.redemptions.redeem_order(order))


@router.route(
    "/v1/webhooks/shopify/refunds",
    methods=["POST"],
    access=Access.SHOPIFY_WEBHOOK,
    summary="Shopify's refunds/create webhook: reverse what the refunded order redeemed.",
    body=ShopifyRefund,
    responses={200: OrderRedemptions},
    raises=[CampaignNotFound, Contended],
)
def shopify_refunds(call: Call) -> flask.Response:
    refund = call.body_as(ShopifyRefund)
    topic = call.request.headers.get(shopify.TOPIC_HEADER)
    if topic is not None and topic not in REFUND_TOPICS:
        return json_response(
            OrderRedemptions(order_id=refund.order_id, results=[], ignored_topic=topic)
        )
    return json_response(call.services.reversals.reverse_shop_order(refund.order_id))
