"""admin_api: one router for marketers and operators (an ID token with the `admin` claim), shops'
checkouts (`redeemer` or `admin`) and Shopify's webhooks. Each resource is a module declaring its
routes; a new one is served by including its `routes` here."""

from __future__ import annotations

from shared.http import openapi
from shared.http.admin import campaigns, checkout, codes, maintenance, team, webhooks
from shared.http.routing import Router

# CORS for the console (web/console/), whose origin is listed in CODEDROP_CORS_ORIGINS.
router = Router(title="codedrop admin_api", cors=True)
openapi.serve(router)
router.include(campaigns.routes)
router.include(codes.routes)
router.include(webhooks.routes)
router.include(team.routes)
router.include(maintenance.routes)
router.include(checkout.routes)
