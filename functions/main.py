"""Cloud Functions entry points. Each hands its trigger to the shared package, with this
instance's service container."""

from __future__ import annotations

from pathlib import Path

import flask
import functions_framework
from cloudevents.http import CloudEvent

from shared.assignments import trigger as storage_trigger
from shared.container import instance_services
from shared.http import admin as admin_routes
from shared.http import claim_api as claim_routes
from shared.http import entry_points, wsgi
from shared.http import maintenance_api as maintenance_routes
from shared.logs import configure_logging
from shared.usage import trigger as usage_trigger
from shared.webhooks import trigger as webhook_trigger

configure_logging()
instance_services()  # a wrong configuration fails the instance at start-up, not a request

if flask.has_app_context():
    # functions-framework runs this module inside the Flask app it builds for one target: bound
    # its bodies and make its own errors JSON before it serves anything. The target's kind is
    # its decorator below.
    kind = entry_points.entry_points(Path(__file__)).get(flask.current_app.name)
    wsgi.harden(flask.current_app, event_function=kind is entry_points.Kind.CLOUD_EVENT)


@functions_framework.http
def claim_api(request: flask.Request) -> flask.Response:
    return claim_routes.router.dispatch(request, instance_services())


@functions_framework.http
def admin_api(request: flask.Request) -> flask.Response:
    return admin_routes.router.dispatch(request, instance_services())


@functions_framework.http
def sweep(request: flask.Request) -> flask.Response:
    return maintenance_routes.router.dispatch(request, instance_services())


@functions_framework.cloud_event
def import_codes(event: CloudEvent) -> None:
    services = instance_services()
    storage_trigger.handle(
        event,
        intake=services.intake,
        assignments=services.assignments,
        exports=services.exports,
        deletions=services.deletions,
    )


@functions_framework.cloud_event
def count_usage(event: CloudEvent) -> None:
    usage_trigger.handle(event, instance_services().usage_counter)


@functions_framework.cloud_event
def deliver_webhooks(event: CloudEvent) -> None:
    webhook_trigger.handle(event, instance_services().webhooks)
