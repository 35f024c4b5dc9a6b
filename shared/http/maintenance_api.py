"""sweep: the function Cloud Scheduler calls every minute. It is deployed without public access
(IAM admits only the scheduler's service account), so its one route checks no token; operators
can run the same sweep through admin_api's POST /v1/maintenance/sweep with an admin token."""

from __future__ import annotations

import flask

from shared.http.routing import Access, Call, Router, json_response, parse_body
from shared.maintenance.models import SweepRequest

router = Router()


@router.route("/", methods=["POST"], access=Access.IAM)
def sweep(call: Call) -> flask.Response:
    body = parse_body(call.request, SweepRequest)
    return json_response(call.services.sweeper.sweep(body))
