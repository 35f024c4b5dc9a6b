"""Cloud Functions entry points. Each only hands its trigger to the shared package."""

from __future__ import annotations

import flask
import functions_framework
from cloudevents.http import CloudEvent

from shared import admin_routes, claim_routes, intake_trigger, usage_trigger
from shared.settings import get_settings
from shared.structured_logging import configure_logging

configure_logging()
get_settings()  # a wrong configuration fails the instance at start-up, not a shopper's request


@functions_framework.http
def claim_api(request: flask.Request) -> flask.Response:
    return claim_routes.handle(request)


@functions_framework.http
def admin_api(request: flask.Request) -> flask.Response:
    return admin_routes.handle(request)


@functions_framework.cloud_event
def import_codes(event: CloudEvent) -> None:
    intake_trigger.handle(event)


@functions_framework.cloud_event
def count_usage(event: CloudEvent) -> None:
    usage_trigger.handle(event)
