"""sweep: the function Cloud Scheduler calls every minute. It is deployed without public access
(IAM admits only the scheduler's service account), so its one route checks no token; operators
run the same sweep through admin_api's POST /v1/maintenance/sweep with an admin token."""

from __future__ import annotations

import flask

from shared.http.access import Access
from shared.http.responses import json_response
from shared.http.routing import Call, Router, Routes
from shared.maintenance.models import SweepRequest, SweepResult

router = Router(title="codedrop sweep")


def sweep(call: Call) -> flask.Response:
    return json_response(call.services.sweeper.sweep(call.body_as(SweepRequest)))


def serve_sweep(on: Routes, rule: str, *, access: Access, summary: str) -> None:
    """Add the sweep's route: here for the scheduler, in admin_api for operators."""
    answered = {200: SweepResult}
    on.post(rule, access=access, summary=summary, body=SweepRequest, responses=answered)(sweep)


serve_sweep(
    router, "/", access=Access.IAM, summary="Publish the outbox and events the counters never saw."
)
