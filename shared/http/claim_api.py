"""claim_api: the public endpoints a landing page calls."""

from __future__ import annotations

import re
from collections.abc import Callable

import flask
from pydantic import BaseModel

from shared.campaigns.models import CampaignPublic, CampaignRecord
from shared.claims.models import ClaimPublic, HeldClaims
from shared.errors import (
    AppCheckRequired,
    CampaignNotActive,
    CampaignNotFound,
    ClaimNotFound,
    Contended,
    FairDropNotFound,
    IdentityInvalid,
    IdentityRequired,
    RequestValidationFailed,
    SignInProviderNotAllowed,
    SoldOut,
    TicketNotYours,
    WaitingRoom,
)
from shared.fairness.models import (
    EntryCreate,
    EntryPublic,
    Fairness,
    FairnessAdmissions,
    FairnessEntries,
    PageQuery,
    Transparency,
)
from shared.fairness.service import FairnessService
from shared.http import openapi
from shared.http.access import Access
from shared.http.requests import campaign_id_param
from shared.http.responses import ErrorBody, error_response, json_response
from shared.http.routing import Call, Router
from shared.types import RequestBody
from shared.waiting_room.admission import InvalidTicket

# Visible ASCII, as the IETF Idempotency-Key draft and Stripe-style clients send it.
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)

TICKET_HEADER = "X-Waiting-Room-Ticket"
APP_CHECK_HEADER = "X-Firebase-AppCheck"
TICKET_COOKIE_PREFIX = "codedrop_ticket_"
MAX_TICKET_CHARS = 1024

router = Router(title="codedrop claim_api", cors=True)


class ClaimCreate(RequestBody):
    """A claim takes no fields today; unknown ones are refused rather than silently ignored."""


class WaitingRoomAnswer(ErrorBody):
    """429 WAITING_ROOM: the shopper's place in line, to send back on the next try."""

    ticket: str | None  # null while a fair drop's draw is being made: nobody has a place yet
    retry_after_ms: int
    estimated_wait_seconds: float | None
    # In a fair drop, an entrant's entry and drawn place (docs/fair-drops.md).
    entry_id: str | None = None
    place: int | None = None


def _idempotency_key(request: flask.Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not _IDEMPOTENCY_KEY.match(key):
        raise RequestValidationFailed("Idempotency-Key must be 1-255 visible ASCII characters.")
    return key


openapi.serve(router)


def live_campaign(call: Call, campaign_id: str) -> CampaignRecord:
    """The instance's copy of the campaign, as claims see it: landing pages poll these routes."""
    return call.services.claims.campaign(campaign_id_param(campaign_id))


@router.route(
    "/v1/campaigns/<campaign_id>",
    methods=["GET"],
    access=Access.PUBLIC,
    summary="A campaign as a landing page shows it.",
    responses={200: CampaignPublic},
    raises=[CampaignNotFound],
)
def get_campaign(call: Call, campaign_id: str) -> flask.Response:
    return json_response(call.services.claims.public_campaign(campaign_id_param(campaign_id)))


@router.route(
    "/v1/campaigns/<campaign_id>/claims",
    methods=["POST"],
    access=Access.SHOPPER,
    summary="Claim a code: 201 a new one, 200 the one already held.",
    body=ClaimCreate,
    responses={201: ClaimPublic, 200: ClaimPublic},
    raises=[
        InvalidTicket,
        TicketNotYours,
        CampaignNotFound,
        CampaignNotActive,
        SoldOut,
        WaitingRoom,
        Contended,
        IdentityRequired,
        IdentityInvalid,
        AppCheckRequired,
        SignInProviderNotAllowed,
    ],
    error_bodies={WaitingRoom: WaitingRoomAnswer},
    headers={
        "Idempotency-Key": {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN},
        TICKET_HEADER: {"type": "string", "maxLength": MAX_TICKET_CHARS},
    },
)
def create_claim(call: Call, campaign_id: str) -> flask.Response:
    request = call.request
    key = _idempotency_key(request)
    campaign_id = campaign_id_param(campaign_id)
    cookie = _ticket_cookie(campaign_id)
    ticket = request.headers.get(TICKET_HEADER) or request.cookies.get(cookie)
    if ticket is not None and len(ticket) > MAX_TICKET_CHARS:
        raise InvalidTicket("The waiting-room ticket is forged or damaged.")
    max_age = call.services.settings.ticket_max_age_seconds
    try:
        result = call.services.claims.claim(
            campaign_id=campaign_id,
            shopper=call.user.shopper(),
            idempotency_key=key,
            ticket=ticket,
            app_check_token=request.headers.get(APP_CHECK_HEADER),
        )
    except WaitingRoom as exc:
        response = error_response(exc)
        _keep_ticket(response, cookie, exc.details.get("ticket"), max_age)
        return response
    except (InvalidTicket, TicketNotYours) as exc:
        response = error_response(exc)
        # A bad ticket in the cookie would be sent forever: drop it, so the next try starts over.
        response.delete_cookie(cookie, secure=True, httponly=True, samesite="None")
        return response
    body = ClaimPublic.model_validate(result.claim, from_attributes=True).model_copy(
        update={"valid_until": result.valid_until}
    )
    response = json_response(body, 201 if result.created else 200)
    _keep_ticket(response, cookie, result.ticket, max_age)
    return response


def _ticket_cookie(campaign_id: str) -> str:
    # One cookie per campaign (named, not path-scoped: the function's public URL has a prefix
    # this code cannot see).
    return f"{TICKET_COOKIE_PREFIX}{campaign_id}"


def _keep_ticket(response: flask.Response, cookie: str, ticket: object, max_age: int) -> None:
    # For browsers; a landing page may also send the ticket back in X-Waiting-Room-Ticket.
    # The cookie lives exactly as long as the ticket it carries is valid.
    if isinstance(ticket, str):
        response.set_cookie(
            cookie, ticket, httponly=True, secure=True, samesite="None", max_age=max_age
        )


@router.route(
    "/v1/campaigns/<campaign_id>/claims/me",
    methods=["GET"],
    access=Access.SHOPPER,
    summary="The codes the caller holds in a campaign.",
    responses={200: HeldClaims},
    raises=[CampaignNotFound, ClaimNotFound, IdentityRequired, IdentityInvalid],
)
def my_claims(call: Call, campaign_id: str) -> flask.Response:
    held = call.services.claims.held(campaign_id_param(campaign_id), call.user.shopper())
    return json_response(held)


# --- fair drops (docs/fair-drops.md) ------------------------------------------------------------
@router.route(
    "/v1/campaigns/<campaign_id>/entries",
    methods=["POST"],
    access=Access.SHOPPER,
    summary="Join a fair drop's pre-queue: 201 a new entry, 200 the one the identity has.",
    body=EntryCreate,
    responses={201: EntryPublic, 200: EntryPublic},
    raises=[
        AppCheckRequired,
        SignInProviderNotAllowed,
        IdentityRequired,
        CampaignNotFound,
        FairDropNotFound,
        CampaignNotActive,
    ],
    headers={APP_CHECK_HEADER: {"type": "string"}},
)
def join_pre_queue(call: Call, campaign_id: str) -> flask.Response:
    entry, created = call.services.claims.enter(
        campaign_id=campaign_id_param(campaign_id),
        shopper=call.user.shopper(),
        app_check_token=call.request.headers.get(APP_CHECK_HEADER),
    )
    return json_response(entry, 201 if created else 200)


@router.route(
    "/v1/campaigns/<campaign_id>/fairness",
    methods=["GET"],
    access=Access.PUBLIC,
    summary="A fair drop's commitment, and after the start its entries' digest and seed.",
    responses={200: Fairness},
    raises=[CampaignNotFound, FairDropNotFound],
)
def fairness(call: Call, campaign_id: str) -> flask.Response:
    campaign = live_campaign(call, campaign_id)
    return json_response(call.services.fairness.fairness(campaign))


@router.route(
    "/v1/campaigns/<campaign_id>/fairness/entries",
    methods=["GET"],
    access=Access.PUBLIC,
    summary="A fair drop's drawn entries in place order, a page at a time.",
    query=PageQuery,
    responses={200: FairnessEntries},
    raises=[CampaignNotFound, FairDropNotFound, CampaignNotActive],
)
def fairness_entries(call: Call, campaign_id: str) -> flask.Response:
    return _fairness_page(call, campaign_id, FairnessService.entries)


@router.route(
    "/v1/campaigns/<campaign_id>/fairness/admissions",
    methods=["GET"],
    access=Access.PUBLIC,
    summary="A fair drop's admissions (entry and place, or a later arrival), a page at a time.",
    query=PageQuery,
    responses={200: FairnessAdmissions},
    raises=[CampaignNotFound, FairDropNotFound, CampaignNotActive],
)
def fairness_admissions(call: Call, campaign_id: str) -> flask.Response:
    return _fairness_page(call, campaign_id, FairnessService.admissions)


def _fairness_page(
    call: Call,
    campaign_id: str,
    page: Callable[[FairnessService, CampaignRecord, str | None], BaseModel],
) -> flask.Response:
    """One page of a fair drop's list, from the query's page token."""
    campaign = live_campaign(call, campaign_id)
    page_token = call.query_as(PageQuery).page_token
    return json_response(page(call.services.fairness, campaign, page_token))


@router.route(
    "/v1/campaigns/<campaign_id>/transparency",
    methods=["GET"],
    access=Access.PUBLIC,
    summary="After a fair drop: codes, entries, admitted, claimed, refusals, queue times.",
    responses={200: Transparency},
    raises=[CampaignNotFound, FairDropNotFound, CampaignNotActive],
)
def transparency(call: Call, campaign_id: str) -> flask.Response:
    campaign = live_campaign(call, campaign_id)
    return json_response(call.services.fairness.transparency(campaign))
