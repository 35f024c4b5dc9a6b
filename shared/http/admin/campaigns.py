"""Campaigns: their lifecycle, their stats, claims, report and live view, and the audit log of
every change made to them."""

from __future__ import annotations

import re
from datetime import datetime

import flask
from pydantic import BaseModel, ConfigDict

from shared.audit import store as audit_store
from shared.audit.models import AuditEntryPublic, AuditList, AuditQuery
from shared.campaigns import service as campaign_service
from shared.campaigns import store as campaign_store
from shared.campaigns.models import (
    CampaignAdmin,
    CampaignCreate,
    CampaignList,
    CampaignRecord,
    CampaignStatus,
    CampaignUpdate,
)
from shared.clock import utcnow
from shared.control import claims_list
from shared.control.claims_list import ClaimPage, ClaimsQuery
from shared.errors import (
    CampaignChanged,
    CampaignExists,
    CampaignNotDeletable,
    CampaignNotEnded,
    CampaignNotFound,
    RequestValidationFailed,
)
from shared.http.access import Access
from shared.http.requests import campaign_id_param
from shared.http.responses import ErrorBody, json_response
from shared.http.routing import Call, Routes, answers, raises
from shared.intake.models import JobAccepted
from shared.usage.models import LiveCounters, ReportGranularity, UsageReport

routes = Routes()

# The campaign's `version` an edit was made from: "3", or the quoted "\"3\"".
IF_MATCH = "If-Match"
_IF_MATCH = re.compile(r'^(?:W/)?"?([0-9]{1,12})"?$')


class CampaignFilter(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    status: CampaignStatus | None = None
    include_archived: bool = False


class ReportQuery(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    granularity: ReportGranularity = ReportGranularity.HOUR


class CampaignChangedAnswer(ErrorBody):
    """A save refused because the campaign changed since the version it was made from."""

    current: CampaignAdmin
    changes: list[AuditEntryPublic]


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


def campaign(call: Call, campaign_id: str) -> CampaignRecord:
    """The campaign the path names; CampaignNotFound when the id is malformed or unknown."""
    db = call.services.db
    return campaign_store.get_campaign(db, campaign_id=campaign_id_param(campaign_id))


def _with_stats(call: Call, record: CampaignRecord, now: datetime) -> flask.Response:
    stats = call.services.usage.stats(record, now=now)
    return json_response(campaign_service.admin_view(record, now=now, stats=stats))


@routes.post("/v1/campaigns", access=Access.ADMIN, body=CampaignCreate)
@answers(201, CampaignAdmin)
@raises(CampaignExists)
def create_campaign(call: Call) -> flask.Response:
    """Create a campaign."""
    audit = call.audit()
    record = campaign_service.create_campaign(
        call.services.db, data=call.body_as(CampaignCreate), now=audit.at, audit=audit
    )
    return json_response(campaign_service.admin_view(record, now=audit.at, stats=None), 201)


@routes.get("/v1/campaigns", access=Access.ADMIN, query=CampaignFilter)
@answers(200, CampaignList)
def list_campaigns(call: Call) -> flask.Response:
    """List campaigns, newest first, each with its stats (archived ones on request)."""
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


@routes.get("/v1/campaigns/<campaign_id>", access=Access.ADMIN)
@answers(200, CampaignAdmin)
@raises(CampaignNotFound)
def get_campaign(call: Call, campaign_id: str) -> flask.Response:
    """A campaign with its stats."""
    return _with_stats(call, campaign(call, campaign_id), utcnow())


@routes.patch(
    "/v1/campaigns/<campaign_id>",
    access=Access.ADMIN,
    body=CampaignUpdate,
    error_bodies={CampaignChanged: CampaignChangedAnswer},
    headers={IF_MATCH: {"type": "string", "pattern": _IF_MATCH.pattern}},
)
@answers(200, CampaignAdmin)
@raises(CampaignNotFound, CampaignChanged)
def update_campaign(call: Call, campaign_id: str) -> flask.Response:
    """Change a campaign's title, window, limits, pause or waiting room; with If-Match (the
    version it was made from) an edit over someone else's is refused, with what changed."""
    audit = call.audit()
    record = campaign_service.update_campaign(
        call.services.db,
        campaign_id=campaign_id_param(campaign_id),
        data=call.body_as(CampaignUpdate),
        now=audit.at,
        audit=audit,
        expected_version=expected_version(call),
    )
    return _with_stats(call, record, audit.at)


@routes.post("/v1/campaigns/<campaign_id>:end", access=Access.ADMIN)
@answers(200, CampaignAdmin)
@raises(CampaignNotFound, CampaignChanged)
def end_campaign(call: Call, campaign_id: str) -> flask.Response:
    """End the sale now (claims then answer CAMPAIGN_NOT_ACTIVE); a no-op once ended."""
    audit = call.audit()
    record = campaign_store.end_campaign(
        call.services.db, campaign_id=campaign_id_param(campaign_id), now=audit.at, audit=audit
    )
    return _with_stats(call, record, audit.at)


@routes.post("/v1/campaigns/<campaign_id>:archive", access=Access.ADMIN)
@answers(200, CampaignAdmin)
@raises(CampaignNotFound, CampaignNotEnded, CampaignChanged)
def archive_campaign(call: Call, campaign_id: str) -> flask.Response:
    """Archive an ended campaign: left out of lists, its claims and reports kept."""
    audit = call.audit()
    record = campaign_store.archive_campaign(
        call.services.db, campaign_id=campaign_id_param(campaign_id), now=audit.at, audit=audit
    )
    return json_response(campaign_service.admin_view(record, now=audit.at, stats=None))


@routes.delete("/v1/campaigns/<campaign_id>", access=Access.ADMIN)
@answers(202, JobAccepted)
@raises(CampaignNotFound, CampaignNotDeletable)
def delete_campaign(call: Call, campaign_id: str) -> flask.Response:
    """Delete a campaign that never started, or an archived one, with its codes, claims,
    counters, webhooks, jobs and files (a job; repeated, the same job; the audit log is kept)."""
    job = call.services.deletions.request(
        campaign_id=campaign_id_param(campaign_id), audit=call.audit()
    )
    return json_response(JobAccepted(job_id=job.job_id), 202)


@routes.get("/v1/audit", access=Access.ADMIN, query=AuditQuery)
@answers(200, AuditList)
def audit_log(call: Call) -> flask.Response:
    """The audit log, newest first: who changed what, when, before and after."""
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


@routes.get("/v1/campaigns/<campaign_id>/report", access=Access.ADMIN, query=ReportQuery)
@answers(200, UsageReport)
@raises(CampaignNotFound)
def report(call: Call, campaign_id: str) -> flask.Response:
    """Claims, imports, redemptions and releases over time (by hour, day or week)."""
    granularity = call.query_as(ReportQuery).granularity
    return json_response(
        call.services.usage.report(campaign(call, campaign_id), granularity=granularity)
    )


@routes.get("/v1/campaigns/<campaign_id>/claims", access=Access.ADMIN, query=ClaimsQuery)
@answers(200, ClaimPage)
@raises(CampaignNotFound)
def campaign_claims(call: Call, campaign_id: str) -> flask.Response:
    """Who claimed what, a page at a time (next_page_token names the next page)."""
    query = call.query_as(ClaimsQuery)
    page = claims_list.list_claims(
        call.services.db,
        campaign_id=campaign_id_param(campaign_id),
        limit=query.limit,
        page_token=query.page_token,
    )
    return json_response(page)


@routes.get("/v1/campaigns/<campaign_id>/live", access=Access.ADMIN)
@answers(200, LiveCounters)
@raises(CampaignNotFound)
def live(call: Call, campaign_id: str) -> flask.Response:
    """The sale now, for a console refreshing every 2 s: remaining, claimed, held, redeemed,
    released, queue, admissions and claims per minute, time to sell-out, a burn-down (from the
    counters, shared by every console on an instance for 1 s)."""
    return json_response(call.services.live.view(campaign_id_param(campaign_id)))
