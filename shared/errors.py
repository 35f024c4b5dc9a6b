"""The one exception family of codedrop. Each carries its documented error_code; the HTTP edge
maps the class to a status (shared/http/responses.py), so domain code never speaks HTTP."""

from __future__ import annotations

from typing import Any

# No error message repeats more of a caller's input than this (ids, paths, field names).
SHOWN_CHARS = 64


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """`value` as an error message may quote it: repr'd (so control characters are spelled
    out) and cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class CodedropError(Exception):
    error_code = "INTERNAL"
    default_message = "Internal error."

    def __init__(
        self,
        message: str | None = None,
        *,
        retry_after: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message or self.default_message)
        self.message = message or self.default_message
        self.retry_after = retry_after
        # Extra fields for the error body (e.g. a waiting-room ticket); never secrets.
        self.details = details or {}


class RequestValidationFailed(CodedropError):
    error_code = "REQUEST_VALIDATION_FAILED"
    default_message = "The request is not valid."


class CodeMalformed(RequestValidationFailed):
    error_code = "CODE_MALFORMED"
    default_message = "This is not a code of this campaign's format; check what was typed."


class RequestTooLarge(CodedropError):
    error_code = "REQUEST_TOO_LARGE"
    default_message = "The request body is too large."


class Unauthenticated(CodedropError):
    error_code = "UNAUTHENTICATED"
    default_message = "A valid Firebase ID token is required."


class AppCheckRequired(Unauthenticated):
    error_code = "APP_CHECK_REQUIRED"
    default_message = "This sale needs a valid Firebase App Check token (X-Firebase-AppCheck)."


class Forbidden(CodedropError):
    error_code = "FORBIDDEN"
    default_message = "This operation needs the admin claim."


class OwnerRequired(Forbidden):
    error_code = "FORBIDDEN"
    default_message = "Only an owner (an ID token with the owner claim) may change who is admin."


class IdentityRequired(Forbidden):
    error_code = "IDENTITY_REQUIRED"
    default_message = "This sale counts codes per verified identity your sign-in does not carry."


class IdentityInvalid(Forbidden):
    error_code = "IDENTITY_INVALID"
    default_message = "The email or phone number of your sign-in is not one this sale can count."


class SignInProviderNotAllowed(Forbidden):
    error_code = "SIGN_IN_PROVIDER_NOT_ALLOWED"
    default_message = "This sale does not accept your sign-in method."


class TicketNotYours(Forbidden):
    error_code = "TICKET_NOT_YOURS"
    default_message = "This waiting-room ticket was issued to another account."


class NotFound(CodedropError):
    error_code = "NOT_FOUND"
    default_message = "No such resource."


class CampaignNotFound(NotFound):
    error_code = "CAMPAIGN_NOT_FOUND"
    default_message = "No such campaign."


class ClaimNotFound(NotFound):
    error_code = "CLAIM_NOT_FOUND"
    default_message = "You hold no code in this campaign."


class FairDropNotFound(NotFound):
    error_code = "FAIR_DROP_NOT_FOUND"
    default_message = "This campaign has no pre-queue, so no draw to show."


class JobNotFound(NotFound):
    error_code = "JOB_NOT_FOUND"
    default_message = "No such job."


class CodeNotFound(NotFound):
    error_code = "CODE_NOT_FOUND"
    default_message = "No such code in this campaign."


class RedemptionNotFound(NotFound):
    error_code = "REDEMPTION_NOT_FOUND"
    default_message = "This order redeemed no code in this campaign."


class InvalidSignature(Unauthenticated):
    error_code = "INVALID_SIGNATURE"
    default_message = "The webhook signature is missing or does not match the body."


class AdminNotFound(NotFound):
    error_code = "ADMIN_NOT_FOUND"
    default_message = "No such admin."


class WebhookNotFound(NotFound):
    error_code = "WEBHOOK_NOT_FOUND"
    default_message = "No such webhook."


class DeliveryNotFound(NotFound):
    error_code = "DELIVERY_NOT_FOUND"
    default_message = "No such delivery of this webhook."


class WebhookUrlNotAllowed(RequestValidationFailed):
    error_code = "WEBHOOK_URL_NOT_ALLOWED"
    default_message = "Webhooks must be https URLs of public addresses."


class Conflict(CodedropError):
    error_code = "CONFLICT"


class CampaignExists(Conflict):
    error_code = "CAMPAIGN_EXISTS"
    default_message = "A campaign with this id already exists."


class CampaignChanged(Conflict):
    error_code = "CAMPAIGN_CHANGED"
    default_message = "The campaign was changed by someone else since you loaded it."


class CampaignNotEnded(Conflict):
    error_code = "CAMPAIGN_NOT_ENDED"
    default_message = "Only an ended campaign can be archived."


class CampaignNotDeletable(Conflict):
    error_code = "CAMPAIGN_NOT_DELETABLE"
    default_message = "Only a campaign that never started, or an archived one, can be deleted."


class JobNotFinished(Conflict):
    error_code = "JOB_NOT_FINISHED"
    default_message = "The job has not finished: its file is not written yet."


class CannotRemoveYourself(Conflict):
    error_code = "CANNOT_REMOVE_YOURSELF"
    default_message = "An owner cannot remove themselves; ask another owner."


class TooManyWebhooks(Conflict):
    error_code = "TOO_MANY_WEBHOOKS"
    default_message = "This campaign has as many webhooks as it may have."


class CampaignNotActive(Conflict):
    error_code = "CAMPAIGN_NOT_ACTIVE"
    default_message = "The campaign is not accepting claims."


class CodeNotClaimed(Conflict):
    error_code = "CODE_NOT_CLAIMED"
    default_message = "Nobody holds this code: it is available, or its hold was released."


class CodeAlreadyRedeemed(Conflict):
    error_code = "CODE_ALREADY_REDEEMED"
    default_message = "This code was redeemed by another order."


class CodeExpired(Conflict):
    error_code = "CODE_EXPIRED"
    default_message = "This code is past its valid_until."


class CodeVoided(Conflict):
    error_code = "CODE_VOIDED"
    default_message = "This code was voided: it can no longer be claimed or redeemed."


class SoldOut(CodedropError):
    error_code = "SOLD_OUT"
    default_message = "Every code of this campaign has been claimed."


class WaitingRoom(CodedropError):
    error_code = "WAITING_ROOM"
    default_message = "Too many shoppers right now; wait your turn."


class RateLimited(CodedropError):
    error_code = "RATE_LIMITED"
    default_message = "Too many code look-ups; retry after the given time."


class Contended(CodedropError):
    error_code = "CONTENDED"
    default_message = "Too many shoppers at once; retry shortly."


class AuthUnavailable(CodedropError):
    """Firebase Auth did not answer a change to an account: nothing was changed."""

    error_code = "AUTH_UNAVAILABLE"
    default_message = "Signing in and out is not reachable right now; retry shortly."


class MethodNotAllowed(CodedropError):
    error_code = "METHOD_NOT_ALLOWED"
    default_message = "Method not allowed on this path."
