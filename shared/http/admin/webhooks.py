"""A campaign's webhook subscriptions, their signing secrets and their deliveries."""

from __future__ import annotations

import re
from typing import TypedDict

import flask

from shared.errors import (
    CampaignNotFound,
    Contended,
    DeliveryNotFound,
    TooManyWebhooks,
    WebhookNotFound,
    WebhookUrlNotAllowed,
)
from shared.http.access import Access
from shared.http.requests import campaign_id_param, path_id
from shared.http.responses import json_response
from shared.http.routing import Call, Routes, answers, raises
from shared.webhooks.models import (
    DeliveriesQuery,
    DeliveryList,
    DeliveryQueued,
    WebhookCreate,
    WebhookCreated,
    WebhookList,
)

routes = Routes()
_WEBHOOK_ID = re.compile(r"^wh_[a-f0-9]{16}$")
# An event id as events and test events spell them (never Firestore's reserved __x__).
_EVENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,299}$")
_WEBHOOK_ERRORS = (CampaignNotFound, WebhookNotFound)


class WebhookPath(TypedDict):
    campaign_id: str
    webhook_id: str


def _webhook(campaign_id: str, webhook_id: str) -> WebhookPath:
    """The path's ids, each well-formed or refused as not found."""
    return WebhookPath(
        campaign_id=campaign_id_param(campaign_id),
        webhook_id=path_id(webhook_id, _WEBHOOK_ID, WebhookNotFound, "Webhook {} does not exist."),
    )


@routes.post("/v1/campaigns/<campaign_id>/webhooks", access=Access.ADMIN, body=WebhookCreate)
@answers(201, WebhookCreated)
@raises(CampaignNotFound, WebhookUrlNotAllowed, TooManyWebhooks, Contended)
def create_webhook(call: Call, campaign_id: str) -> flask.Response:
    """Subscribe an endpoint to the campaign's events (its signing secret is shown once)."""
    data = call.body_as(WebhookCreate)
    created = call.services.webhooks.subscribe(
        campaign_id=campaign_id_param(campaign_id), data=data, audit=call.audit()
    )
    return json_response(created, 201)


@routes.get("/v1/campaigns/<campaign_id>/webhooks", access=Access.ADMIN)
@answers(200, WebhookList)
@raises(CampaignNotFound)
def list_webhooks(call: Call, campaign_id: str) -> flask.Response:
    """The campaign's webhook subscriptions."""
    campaign_id = campaign_id_param(campaign_id)
    return json_response(call.services.webhooks.list_webhooks(campaign_id=campaign_id))


@routes.delete("/v1/campaigns/<campaign_id>/webhooks/<webhook_id>", access=Access.ADMIN)
@answers(204)
@raises(*_WEBHOOK_ERRORS, Contended)
def delete_webhook(call: Call, campaign_id: str, webhook_id: str) -> flask.Response:
    """Stop delivering to an endpoint."""
    call.services.webhooks.unsubscribe(**_webhook(campaign_id, webhook_id), audit=call.audit())
    return flask.Response(status=204)


@routes.get(
    "/v1/campaigns/<campaign_id>/webhooks/<webhook_id>/deliveries",
    access=Access.ADMIN,
    query=DeliveriesQuery,
)
@answers(200, DeliveryList)
@raises(*_WEBHOOK_ERRORS)
def list_deliveries(call: Call, campaign_id: str, webhook_id: str) -> flask.Response:
    """The endpoint's recent deliveries: event, attempts, last status, next attempt."""
    limit = call.query_as(DeliveriesQuery).limit
    return json_response(
        call.services.webhooks.deliveries(**_webhook(campaign_id, webhook_id), limit=limit)
    )


@routes.post("/v1/campaigns/<campaign_id>/webhooks/<webhook_id>:test", access=Access.ADMIN)
@answers(202, DeliveryQueued)
@raises(*_WEBHOOK_ERRORS)
def test_webhook(call: Call, campaign_id: str, webhook_id: str) -> flask.Response:
    """Send the endpoint a signed webhook.test event now (retried like any other)."""
    ids = _webhook(campaign_id, webhook_id)
    return json_response(call.services.webhooks.send_test(**ids, audit=call.audit()), 202)


@routes.post(
    "/v1/campaigns/<campaign_id>/webhooks/<webhook_id>/deliveries/<event_id>:redeliver",
    access=Access.ADMIN,
)
@answers(202, DeliveryQueued)
@raises(*_WEBHOOK_ERRORS, DeliveryNotFound)
def redeliver(call: Call, campaign_id: str, webhook_id: str, event_id: str) -> flask.Response:
    """Send a delivery again, from a first attempt (a new 24 hours of retries)."""
    ids = _webhook(campaign_id, webhook_id)
    event_id = path_id(event_id, _EVENT_ID, DeliveryNotFound, "No delivery {}.")
    queued = call.services.webhooks.redeliver(**ids, event_id=event_id, audit=call.audit())
    return json_response(queued, 202)


@routes.post("/v1/campaigns/<campaign_id>/webhooks/<webhook_id>:rotate_secret", access=Access.ADMIN)
@answers(200, WebhookCreated)
@raises(*_WEBHOOK_ERRORS)
def rotate_webhook_secret(call: Call, campaign_id: str, webhook_id: str) -> flask.Response:
    """Give the endpoint a new signing secret (shown once); the old one stops at once."""
    ids = _webhook(campaign_id, webhook_id)
    return json_response(call.services.webhooks.rotate_secret(**ids, audit=call.audit()))
