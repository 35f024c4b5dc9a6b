"""Who may call a route, and the check the router makes before any handler runs."""

from __future__ import annotations

import logging
from enum import Enum

import flask

from shared import errors
from shared.container import Services
from shared.http import shopify
from shared.http.auth import Principal, authenticate

log = logging.getLogger(__name__)


class Access(Enum):
    PUBLIC = "public"
    SHOPPER = "shopper"  # any valid Firebase ID token
    REDEEMER = "redeemer"  # an ID token with the `redeemer` or the `admin` custom claim
    ADMIN = "admin"  # an ID token with the `admin` custom claim
    # No Google or Firebase identity: Shopify signs the raw body with the app's secret.
    SHOPIFY_WEBHOOK = "shopify_webhook"
    # Behind IAM: Cloud Run admits only callers granted the invoker role (Cloud Scheduler's
    # service account), so the function itself checks no token. Never on a public function.
    IAM = "iam"


NEEDS_TOKEN = (Access.SHOPPER, Access.REDEEMER, Access.ADMIN)
NEEDS_CUSTOM_CLAIM = (Access.REDEEMER, Access.ADMIN)


def _verify_shopify(request: flask.Request, services: Services) -> None:
    settings = services.settings
    key = settings.shopify_webhook_key
    if key is None:
        log.error("Shopify webhook refused: CODEDROP_SHOPIFY_WEBHOOK_SECRET is not set")
    # The body stays cached for the handler, which parses the very bytes checked here.
    shopify.verify(request.get_data(cache=True), request.headers.get(shopify.SIGNATURE_HEADER), key)
    shopify.verify_shop(
        request.headers.get(shopify.SHOP_HEADER),
        settings.shopify_shop_domain,
        required=not settings.is_local,
    )


def authorize(request: flask.Request, access: Access, services: Services) -> Principal | None:
    """The caller when `access` names one, after checking they may call; None for routes that
    take no token."""
    if access in (Access.PUBLIC, Access.IAM):
        return None
    if access is Access.SHOPIFY_WEBHOOK:
        _verify_shopify(request, services)
        return None
    # Shoppers' tokens are not checked for revocation: a claim is bounded by the campaign's own
    # limits, and a read of the account per claim would cost the sale's hot path.
    privileged = access in NEEDS_CUSTOM_CLAIM and services.settings.check_revoked
    principal = authenticate(
        request.headers.get("Authorization"),
        settings=services.settings,
        revocations=services.revocations if privileged else None,
    )
    if access is Access.ADMIN and not principal.is_admin:
        raise errors.Forbidden("This operation needs an ID token with the admin claim.")
    if access is Access.REDEEMER and not principal.is_redeemer:
        raise errors.Forbidden("This operation needs an ID token with the redeemer claim.")
    return principal
