"""Operators' repairs: a campaign's recount, and the sweep Cloud Scheduler also runs."""

from __future__ import annotations

import flask

from shared.clock import utcnow
from shared.errors import CampaignNotFound
from shared.http import maintenance_api
from shared.http.access import Access
from shared.http.admin.campaigns import campaign
from shared.http.responses import json_response
from shared.http.routing import Call, Routes, answers, raises
from shared.usage import reconciliation
from shared.usage.models import ReconcileRequest, ReconciliationReport

routes = Routes()


@routes.post("/v1/campaigns/<campaign_id>/reconcile", access=Access.ADMIN, body=ReconcileRequest)
@answers(200, ReconciliationReport)
@raises(CampaignNotFound)
def reconcile(call: Call, campaign_id: str) -> flask.Response:
    """Recount a campaign and repair its counters."""
    services = call.services
    record = campaign(call, campaign_id)
    result = reconciliation.reconcile(
        services.db,
        counters=services.counters,
        campaign_id=record.campaign_id,
        now=utcnow(),
        repair=call.body_as(ReconcileRequest).repair,
        audit=call.audit(),
    )
    return json_response(result)


maintenance_api.serve_sweep(
    routes,
    "/v1/maintenance/sweep",
    access=Access.ADMIN,
    summary="Release expired holds, publish the outbox and lost events, drain due webhooks.",
)
