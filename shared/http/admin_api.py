"""admin_api: campaigns, codes, jobs, stats, webhooks and maintenance for marketers and operators
(an ID token with the `admin` claim); code look-ups and redemptions for a shop's checkout
(`redeemer` or `admin`), their reversals and voids; and Shopify's orders/create, orders/cancelled
and refunds/create webhooks (signed by Shopify, no ID token)."""

from __future__ import annotations

import re

import flask
from pydantic import BaseModel, ConfigDict, TypeAdapter

from shared.audit import store as audit_store
from shared.audit.models import Actor, AuditContext, AuditEntryPublic, AuditList, AuditQuery
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
from shared.control import claims_list
from shared.control.admins import AdminInvite, AdminList, AdminView
from shared.control.claims_list import ClaimPage, ClaimsQuery
from shared.control.exports import ExportCreate
from shared.errors import (
    AdminNotFound,
    AuthUnavailable,
    CampaignChanged,
    CampaignExists,
    CampaignNotDeletable,
    CampaignNotEnded,
    CampaignNotFound,
    CannotRemoveYourself,
    CodeAlreadyRedeemed,
    CodeExpired,
    CodeMalformed,
    CodeNotClaimed,
    CodeNotFound,
    CodeVoided,
    Contended,
    DeliveryNotFound,
    JobNotFinished,
    JobNotFound,
    OwnerRequired,
    RateLimited,
    RedemptionNotFound,
    RequestValidationFailed,
    TooManyWebhooks,
    WebhookNotFound,
    WebhookUrlNotAllowed,
)
from shared.http import maintenance_api, openapi, shopify
from shared.http.access import Access
from shared.http.requests import campaign_id_param, client_address, path_id
from shared.http.responses import ErrorBody, json_response
from shared.http.routing import Call, Router
from shared.intake import jobs as job_store
from shared.intake.csv_rows import MAX_CODE_LENGTH
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
from shared.types import FirebaseUid, JobId
from shared.usage import reconciliation
from shared.usage.models import (
    LiveCounters,
    ReconcileRequest,
    ReconciliationReport,
    ReportGranularity,
    UsageReport,
)
from shared.webhooks.models import (
    DeliveriesQuery,
    DeliveryList,
    DeliveryQueued,
    WebhookCreate,
    WebhookCreated,
    WebhookList,
)

_JOB_ID: TypeAdapter[str] = TypeAdapter(JobId)
_ORDER_ID: TypeAdapter[str] = TypeAdapter(OrderId)
_WEBHOOK_ID = re.compile(r"^wh_[a-f0-9]{16}$")
_UID: TypeAdapter[str] = TypeAdapter(FirebaseUid)
# An event id as events and test events spell them (never Firestore's reserved __x__).
_EVENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,299}$")

# CORS for the console (web/console/), whose origin is listed in CODEDROP_CORS_ORIGINS.
router = Router(title="codedrop admin_api", cors=True)
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
    include_archived: bool = False


class CampaignChangedAnswer(ErrorBody):
    """A save refused because the campaign changed since the version it was made from."""

    current: CampaignAdmin
    changes: list[AuditEntryPublic]


# `If-Match` on PATCH: the campaign's `version` the edit was made from ("3", or the quoted "\"3\"").
IF_MATCH = "If-Match"
_IF_MATCH = re.compile(r'^(?:W/)?"?([0-9]{1,12})"?$')


def expected_version(call: Call) -> int | None:
    raw = call.request.headers.get(IF_MATCH)
    if raw is None:
        return None
    match = _IF_MATCH.match(raw.strip())
    if match is None:
        raise RequestValidationFailed(
            'If-Match must be the campaign\'s version as GET returns it, e.g. "3".'
        )
    return int(match[1])


def audit_context(call: Call) -> AuditContext:
    """Who is acting, for the audit entry written with the change."""
    user = call.user
    return AuditContext(actor=Actor(uid=user.user_id, email=user.email), at=utcnow())


class ReportQuery(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    granularity: ReportGranularity = ReportGranularity.HOUR


openapi.serve(router)


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
    audit = audit_context(call)
    record = campaign_service.create_campaign(
        call.services.db, data=data, now=audit.at, audit=audit
    )
    return json_response(campaign_service.admin_view(record, now=audit.at, stats=None), 201)


@router.route(
    "/v1/campaigns",
    methods=["GET"],
    access=ADMIN,
    summary="List campaigns, newest first, each with its stats (archived ones on request).",
    query=CampaignFilter,
    responses={200: CampaignList},
)
def list_campaigns(call: Call) -> flask.Response:
    query = call.query_as(CampaignFilter)
    services, now = call.services, utcnow()
    records = campaign_service.list_campaigns(
        services.db, status=query.status, now=now, include_archived=query.include_archived
    )
    views = [
        campaign_service.admin_view(r, now=now, stats=services.usage.recent_stats(r, now=now))
        for r in records
    ]
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
    summary=(
        "Change a campaign's title, window, limits, pause or waiting room; with If-Match (the "
        "version it was made from) an edit over someone else's is refused, with what changed."
    ),
    body=CampaignUpdate,
    responses={200: CampaignAdmin},
    raises=[CampaignNotFound, CampaignChanged],
    error_bodies={CampaignChanged: CampaignChangedAnswer},
    headers={IF_MATCH: {"type": "string", "pattern": _IF_MATCH.pattern}},
)
def update_campaign(call: Call, campaign_id: str) -> flask.Response:
    data = call.body_as(CampaignUpdate)
    services, audit = call.services, audit_context(call)
    record = campaign_service.update_campaign(
        services.db,
        campaign_id=campaign_id_param(campaign_id),
        data=data,
        now=audit.at,
        audit=audit,
        expected_version=expected_version(call),
    )
    stats = services.usage.stats(record, now=audit.at)
    return json_response(campaign_service.admin_view(record, now=audit.at, stats=stats))


@router.route(
    "/v1/campaigns/<campaign_id>:end",
    methods=["POST"],
    access=ADMIN,
    summary="End the sale now (claims then answer CAMPAIGN_NOT_ACTIVE); a no-op once ended.",
    responses={200: CampaignAdmin},
    raises=[CampaignNotFound, CampaignChanged],
)
def end_campaign(call: Call, campaign_id: str) -> flask.Response:
    services, audit = call.services, audit_context(call)
    record = campaign_store.end_campaign(
        services.db, campaign_id=campaign_id_param(campaign_id), now=audit.at, audit=audit
    )
    stats = services.usage.stats(record, now=audit.at)
    return json_response(campaign_service.admin_view(record, now=audit.at, stats=stats))


@router.route(
    "/v1/campaigns/<campaign_id>:archive",
    methods=["POST"],
    access=ADMIN,
    summary="Archive an ended campaign: left out of lists, its claims and reports kept.",
    responses={200: CampaignAdmin},
    raises=[CampaignNotFound, CampaignNotEnded, CampaignChanged],
)
def archive_campaign(call: Call, campaign_id: str) -> flask.Response:
    services, audit = call.services, audit_context(call)
    record = campaign_store.archive_campaign(
        services.db, campaign_id=campaign_id_param(campaign_id), now=audit.at, audit=audit
    )
    return json_response(campaign_service.admin_view(record, now=audit.at, stats=None))


@router.route(
    "/v1/campaigns/<campaign_id>",
    methods=["DELETE"],
    access=ADMIN,
    summary=(
        "Delete a campaign that never started, or an archived one, with its codes, claims, "
        "counters, webhooks, jobs and files (a job; repeated, the same job; the audit log is "
        "kept)."
    ),
    responses={202: JobAccepted},
    raises=[CampaignNotFound, CampaignNotDeletable],
)
def delete_campaign(call: Call, campaign_id: str) -> flask.Response:
    job = call.services.deletions.request(
        campaign_id=campaign_id_param(campaign_id), audit=audit_context(call)
    )
    return json_response(JobAccepted(job_id=job.job_id), 202)


@router.route(
    "/v1/audit",
    methods=["GET"],
    access=ADMIN,
    summary="The audit log, newest first: who changed what, when, before and after.",
    query=AuditQuery,
    responses={200: AuditList},
)
def audit_log(call: Call) -> flask.Response:
    query = call.query_as(AuditQuery)
    entries, token = audit_store.list_entries(
        call.services.db,
        campaign_id=query.campaign_id,
        limit=query.limit,
        page_token=query.page_token,
    )
    return json_response(
        AuditList(entries=[audit_store.public(e) for e in entries], next_page_token=token)
    )


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
        campaign_id=campaign_id_param(campaign_id), spec=spec, audit=audit_context(call)
    )
    return json_response(JobAccepted(job_id=job.job_id), 202)


@router.route(
    "/v1/campaigns/<campaign_id>/uploads",
    methods=["POST"],
    access=ADMIN,
    summary=(
        "Open a resumable upload session for a CSV of codes: PUT the file to upload_url, "
        "straight into imports/{campaign_id}/{name}; its import job follows."
    ),
    body=UploadCreate,
    responses={201: UploadSession},
    raises=[CampaignNotFound],
)
def open_upload(call: Call, campaign_id: str) -> flask.Response:
    body = call.body_as(UploadCreate)
    origin = call.request.headers.get("Origin")
    allowed = call.services.settings.cors_origins
    session = call.services.intake.open_upload(
        campaign_id=campaign_id_param(campaign_id),
        name=body.name,
        # Cloud Storage answers the session's requests with CORS for this origin only.
        origin=origin if origin is not None and (origin in allowed or "*" in allowed) else None,
        audit=audit_context(call),
    )
    return json_response(session, 201)


@router.route(
    "/v1/jobs/<job_id>",
    methods=["GET"],
    access=ADMIN,
    summary="An import or generation job.",
    responses={200: JobPublic},
    raises=[JobNotFound],
)
def get_job(call: Call, job_id: str) -> flask.Response:
    job = job_store.get_job(call.services.db, job_id=job_id_param(job_id))
    return json_response(JobPublic.of(job))


def job_id_param(value: str) -> str:
    return path_id(value, _JOB_ID, JobNotFound, "Job {} does not exist.")


@router.route(
    "/v1/campaigns/<campaign_id>/exports",
    methods=["POST"],
    access=ADMIN,
    summary=(
        "Export the campaign's claims, redemptions or codes as a CSV (a job: follow it with "
        "GET /v1/jobs/{job_id}, then download it)."
    ),
    body=ExportCreate,
    responses={202: JobAccepted},
    raises=[CampaignNotFound],
)
def create_export(call: Call, campaign_id: str) -> flask.Response:
    body = call.body_as(ExportCreate)
    job = call.services.exports.request(
        campaign_id=campaign_id_param(campaign_id), kind=body.kind, audit=audit_context(call)
    )
    return json_response(JobAccepted(job_id=job.job_id), 202)


@router.route(
    "/v1/jobs/<job_id>/download",
    methods=["GET"],
    access=ADMIN,
    summary=(
        "A job's file, streamed as CSV: an export's rows, or an import's or assignment's "
        "rejected rows (line, reason, value)."
    ),
    responses={200: None},
    raises=[JobNotFound, JobNotFinished],
    content_type="text/csv",
)
def download_job(call: Call, job_id: str) -> flask.Response:
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
    "/v1/campaigns/<campaign_id>/claims",
    methods=["GET"],
    access=ADMIN,
    summary="Who claimed what, a page at a time (next_page_token names the next page).",
    query=ClaimsQuery,
    responses={200: ClaimPage},
    raises=[CampaignNotFound],
)
def campaign_claims(call: Call, campaign_id: str) -> flask.Response:
    query = call.query_as(ClaimsQuery)
    page = claims_list.list_claims(
        call.services.db,
        campaign_id=campaign_id_param(campaign_id),
        limit=query.limit,
        page_token=query.page_token,
    )
    return json_response(page)


@router.route(
    "/v1/campaigns/<campaign_id>/live",
    methods=["GET"],
    access=ADMIN,
    summary=(
        "The sale now, for a console refreshing every 2 s: remaining, claimed, held, redeemed, "
        "released, queue, admissions and claims per minute, time to sell-out, a burn-down "
        "(from the counters, shared by every console on an instance for 1 s)."
    ),
    responses={200: LiveCounters},
    raises=[CampaignNotFound],
)
def live(call: Call, campaign_id: str) -> flask.Response:
    return json_response(call.services.live.view(campaign_id_param(campaign_id)))


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
        audit=audit_context(call),
    )
    return json_response(result)


def webhook_id_param(value: str) -> str:
    return path_id(value, _WEBHOOK_ID, WebhookNotFound, "Webhook {} does not exist.")


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
        campaign_id=campaign_id_param(campaign_id), data=data, audit=audit_context(call)
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
        campaign_id=campaign_id_param(campaign_id),
        webhook_id=webhook_id_param(webhook_id),
        audit=audit_context(call),
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


def event_id_param(value: str) -> str:
    return path_id(value, _EVENT_ID, DeliveryNotFound, "No delivery {}.")


@router.route(
    "/v1/campaigns/<campaign_id>/webhooks/<webhook_id>:test",
    methods=["POST"],
    access=ADMIN,
    summary="Send the endpoint a signed webhook.test event now (retried like any other).",
    responses={202: DeliveryQueued},
    raises=[CampaignNotFound, WebhookNotFound],
)
def test_webhook(call: Call, campaign_id: str, webhook_id: str) -> flask.Response:
    queued = call.services.webhooks.send_test(
        campaign_id=campaign_id_param(campaign_id),
        webhook_id=webhook_id_param(webhook_id),
        audit=audit_context(call),
    )
    return json_response(queued, 202)


@router.route(
    "/v1/campaigns/<campaign_id>/webhooks/<webhook_id>/deliveries/<event_id>:redeliver",
    methods=["POST"],
    access=ADMIN,
    summary="Send a delivery again, from a first attempt (a new 24 hours of retries).",
    responses={202: DeliveryQueued},
    raises=[CampaignNotFound, WebhookNotFound, DeliveryNotFound],
)
def redeliver(call: Call, campaign_id: str, webhook_id: str, event_id: str) -> flask.Response:
    queued = call.services.webhooks.redeliver(
        campaign_id=campaign_id_param(campaign_id),
        webhook_id=webhook_id_param(webhook_id),
        event_id=event_id_param(event_id),
        audit=audit_context(call),
    )
    return json_response(queued, 202)


@router.route(
    "/v1/campaigns/<campaign_id>/webhooks/<webhook_id>:rotate_secret",
    methods=["POST"],
    access=ADMIN,
    summary="Give the endpoint a new signing secret (shown once); the old one stops at once.",
    responses={200: WebhookCreated},
    raises=[CampaignNotFound, WebhookNotFound],
)
def rotate_webhook_secret(call: Call, campaign_id: str, webhook_id: str) -> flask.Response:
    created = call.services.webhooks.rotate_secret(
        campaign_id=campaign_id_param(campaign_id),
        webhook_id=webhook_id_param(webhook_id),
        audit=audit_context(call),
    )
    return json_response(created)


def owner_audit(call: Call) -> AuditContext:
    """An owner's audit context; anyone else is refused."""
    if not call.user.is_owner:
        raise OwnerRequired()
    return audit_context(call)


@router.route(
    "/v1/admins",
    methods=["GET"],
    access=ADMIN,
    summary="Who may use the console: admins and owners, who invited them and when.",
    responses={200: AdminList},
)
def list_admins(call: Call) -> flask.Response:
    return json_response(call.services.admins.list_admins())


@router.route(
    "/v1/admins",
    methods=["POST"],
    access=ADMIN,
    summary=(
        "Owners only: make the user with this email (created if new) an admin or an owner; "
        "their next ID token carries the claim."
    ),
    body=AdminInvite,
    responses={201: AdminView},
    raises=[OwnerRequired],
)
def invite_admin(call: Call) -> flask.Response:
    body = call.body_as(AdminInvite)
    audit = owner_audit(call)
    view = call.services.admins.invite(email=body.email, role=body.role, audit=audit)
    return json_response(view, 201)


@router.route(
    "/v1/admins/<uid>",
    methods=["DELETE"],
    access=ADMIN,
    summary="Owners only: take the admin (and owner) claim away and end the user's sessions.",
    responses={204: None},
    raises=[OwnerRequired, AdminNotFound, CannotRemoveYourself],
)
def remove_admin(call: Call, uid: str) -> flask.Response:
    audit = owner_audit(call)
    uid = path_id(uid, _UID, AdminNotFound, "{} is not an admin.")
    call.services.admins.remove(uid=uid, audit=audit)
    return flask.Response(status=204)


@router.route(
    "/v1/me:sign_out",
    methods=["POST"],
    access=ADMIN,
    summary=(
        "Sign the caller out everywhere: their sessions are revoked, and the token that made "
        "this call is refused within the revocation check's bound."
    ),
    responses={204: None},
    raises=[AuthUnavailable],
)
def sign_out(call: Call) -> flask.Response:
    call.services.admins.sign_out(uid=call.user.user_id)
    return flask.Response(status=204)


maintenance_api.serve_sweep(
    router,
    "/v1/maintenance/sweep",
    access=ADMIN,
    summary="Release expired holds, publish the outbox and lost events, drain due webhooks.",
)


# --- checkout: codes and redemptions -----------------------------------------------------------
def limit_guessing(call: Call) -> None:
    """Look-ups and redemptions are limited per caller and per address before anything is read
    (shared/ratelimit), so codes cannot be probed faster than the limits."""
    call.services.guess_limiter.check(
        caller=call.user.user_id, address=client_address(call.request)
    )


@router.route(
    "/v1/campaigns/<campaign_id>/codes/<code>",
    methods=["GET"],
    access=REDEEMER,
    summary="Where a code stands: available, held, claimed or redeemed (typed in any case).",
    responses={200: CodeStatus},
    raises=[CampaignNotFound, CodeNotFound, CodeMalformed, RateLimited],
)
def code_status(call: Call, campaign_id: str, code: str) -> flask.Response:
    campaign_id = campaign_id_param(campaign_id)
    limit_guessing(call)
    if len(code) > MAX_CODE_LENGTH:
        raise CodeNotFound(f"Campaign {campaign_id!r} has no such code.")
    code = call.services.typed_codes.matched(campaign_id=campaign_id, typed=code)
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
        CodeMalformed,
        CodeNotClaimed,
        CodeAlreadyRedeemed,
        CodeExpired,
        CodeVoided,
        Contended,
        RateLimited,
    ],
)
def redeem(call: Call, campaign_id: str) -> flask.Response:
    body = call.body_as(RedemptionCreate)
    campaign_id = campaign_id_param(campaign_id)
    limit_guessing(call)
    code = call.services.typed_codes.matched(campaign_id=campaign_id, typed=body.code)
    outcome = call.services.redemptions.redeem(
        campaign_id=campaign_id, code=code, order_id=body.order_id
    )
    return json_response(outcome.redemption, 201 if outcome.created else 200)


def order_id_param(value: str) -> str:
    return path_id(value, _ORDER_ID, RedemptionNotFound, "No order {} redeemed a code here.")


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
    raises=[CampaignNotFound, CodeNotFound, CodeMalformed, CodeAlreadyRedeemed, Contended],
)
def void_code(call: Call, campaign_id: str, code: str) -> flask.Response:
    campaign_id = campaign_id_param(campaign_id)
    if len(code) > MAX_CODE_LENGTH:
        raise CodeNotFound(f"Campaign {campaign_id!r} has no such code.")
    code = call.services.typed_codes.matched(campaign_id=campaign_id, typed=code)
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
