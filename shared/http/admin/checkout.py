"""A shop's checkout: code look-ups, redemptions and their reversals, voids, and Shopify's order
and refund webhooks (signed by Shopify, no ID token)."""

from __future__ import annotations

import flask
from pydantic import TypeAdapter

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
from shared.errors import (
    CampaignNotFound,
    CodeAlreadyRedeemed,
    CodeExpired,
    CodeMalformed,
    CodeNotClaimed,
    CodeNotFound,
    CodeVoided,
    Contended,
    RateLimited,
    RedemptionNotFound,
)
from shared.http import shopify
from shared.http.access import Access
from shared.http.requests import campaign_id_param, client_address, path_id
from shared.http.responses import json_response
from shared.http.routing import Call, Routes, answers, raises
from shared.intake.csv_rows import MAX_CODE_LENGTH

routes = Routes()
# Shopify sends other topics to a URL only if it was subscribed to them; they are acknowledged
# and ignored, so a misconfigured subscription never redeems (or reverses) anything.
REDEEMING_TOPICS = {"orders/create"}
REVERSING_TOPICS = {"orders/cancelled"}
REFUND_TOPICS = {"refunds/create"}
_ORDER_ID: TypeAdapter[str] = TypeAdapter(OrderId)


def limit_guessing(call: Call) -> None:
    """Look-ups and redemptions are limited per caller and per address before anything is read
    (shared/ratelimit), so codes cannot be probed faster than the limits."""
    call.services.guess_limiter.check(
        caller=call.user.user_id, address=client_address(call.request)
    )


def typed_code(call: Call, campaign_id: str, typed: str) -> str:
    """The campaign's code that `typed` stands for (typed in any case); longer than any code,
    it names none."""
    if len(typed) > MAX_CODE_LENGTH:
        raise CodeNotFound(f"Campaign {campaign_id!r} has no such code.")
    return call.services.typed_codes.matched(campaign_id=campaign_id, typed=typed)


def _ignored(order_id: str, topic: str) -> flask.Response:
    return json_response(OrderRedemptions(order_id=order_id, results=[], ignored_topic=topic))


@routes.get("/v1/campaigns/<campaign_id>/codes/<code>", access=Access.REDEEMER)
@answers(200, CodeStatus)
@raises(CampaignNotFound, CodeNotFound, CodeMalformed, RateLimited)
def code_status(call: Call, campaign_id: str, code: str) -> flask.Response:
    """Where a code stands: available, held, claimed or redeemed (typed in any case)."""
    campaign_id = campaign_id_param(campaign_id)
    limit_guessing(call)
    code = typed_code(call, campaign_id, code)
    return json_response(call.services.redemptions.status(campaign_id=campaign_id, code=code))


@routes.post(
    "/v1/campaigns/<campaign_id>/redemptions", access=Access.REDEEMER, body=RedemptionCreate
)
@answers(201, RedemptionPublic)
@answers(200, RedemptionPublic)
@raises(
    CampaignNotFound,
    CodeNotFound,
    CodeMalformed,
    CodeNotClaimed,
    CodeAlreadyRedeemed,
    CodeExpired,
    CodeVoided,
    Contended,
    RateLimited,
)
def redeem(call: Call, campaign_id: str) -> flask.Response:
    """Redeem a held or claimed code for an order (idempotent on the order)."""
    body = call.body_as(RedemptionCreate)
    campaign_id = campaign_id_param(campaign_id)
    limit_guessing(call)
    code = typed_code(call, campaign_id, body.code)
    outcome = call.services.redemptions.redeem(
        campaign_id=campaign_id, code=code, order_id=body.order_id
    )
    return json_response(outcome.redemption, 201 if outcome.created else 200)


@routes.post("/v1/campaigns/<campaign_id>/redemptions/<order_id>:reverse", access=Access.REDEEMER)
@answers(200, OrderReversal)
@raises(CampaignNotFound, RedemptionNotFound, Contended)
def reverse_order(call: Call, campaign_id: str, order_id: str) -> flask.Response:
    """Reverse what a cancelled or refunded order redeemed in the campaign; the campaign's
    on_cancel says what becomes of each code (idempotent: a repeat answers the same)."""
    reversal = call.services.reversals.reverse_order(
        campaign_id=campaign_id_param(campaign_id),
        order_id=path_id(
            order_id, _ORDER_ID, RedemptionNotFound, "No order {} redeemed a code here."
        ),
    )
    return json_response(reversal)


@routes.post("/v1/campaigns/<campaign_id>/codes/<code>:void", access=Access.ADMIN)
@answers(200, CodeStatus)
@raises(CampaignNotFound, CodeNotFound, CodeMalformed, CodeAlreadyRedeemed, Contended)
def void_code(call: Call, campaign_id: str, code: str) -> flask.Response:
    """Void a code: it can no longer be claimed or redeemed (idempotent)."""
    campaign_id = campaign_id_param(campaign_id)
    code = typed_code(call, campaign_id, code)
    return json_response(call.services.reversals.void(campaign_id=campaign_id, code=code))


@routes.post("/v1/webhooks/shopify/orders", access=Access.SHOPIFY_WEBHOOK, body=ShopifyOrder)
@answers(200, OrderRedemptions)
@raises(CampaignNotFound, Contended)
def shopify_orders(call: Call) -> flask.Response:
    """Shopify's orders/create webhook redeems the order's discount codes; its orders/cancelled
    webhook reverses what the order redeemed."""
    order = call.body_as(ShopifyOrder)
    topic = call.request.headers.get(shopify.TOPIC_HEADER)
    if topic in REVERSING_TOPICS:
        return json_response(call.services.reversals.reverse_shop_order(order.id))
    if topic is not None and topic not in REDEEMING_TOPICS:
        return _ignored(order.id, topic)
    return json_response(call.services.redemptions.redeem_order(order))


@routes.post("/v1/webhooks/shopify/refunds", access=Access.SHOPIFY_WEBHOOK, body=ShopifyRefund)
@answers(200, OrderRedemptions)
@raises(CampaignNotFound, Contended)
def shopify_refunds(call: Call) -> flask.Response:
    """Shopify's refunds/create webhook: reverse what the refunded order redeemed."""
    refund = call.body_as(ShopifyRefund)
    topic = call.request.headers.get(shopify.TOPIC_HEADER)
    if topic is not None and topic not in REFUND_TOPICS:
        return _ignored(refund.order_id, topic)
    return json_response(call.services.reversals.reverse_shop_order(refund.order_id))
