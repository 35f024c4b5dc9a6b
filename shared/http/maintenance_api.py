"""sweep: the function Cloud Scheduler calls every minute. It is deployed without public access
(IAM admits only the scheduler's service account), so its one route checks no token; operators
can run the same sweep through admin_api's POST /v1/maintenance/sweep with an admin token."""

from __future__ import annotations

import flask

from shared.http.routing import Access, Call, Router, json_response
from shared.maintenance.models import SweepRequest, SweepResult

router = Router(title="codedrop sweep")


def sweep(call: Call) -> flask.Response:
    body = call.body_as(SweepRequest)
    return json_response(call.services.sweeper.sweep(body))


def serve_sweep(on: Router, rule: str, *, access: Access, summary: str) -> None:
    """Add the sweep's route: here for the scheduler, in admin_api for operators."""
    on.route(
        rule,
        methods=["POST"],
        access=access,
        summary=summary,
        body=SweepRequest,
        responses={200: SweepResult},
    )(sweep)


serve_sweep(
    router, "/", access=Access.IAM, summary="Publish the outbox and events the counters never saw."
)
