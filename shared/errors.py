"""The one exception family of codedrop. Each carries its documented error_code; the HTTP edge
maps the class to a status (shared/http/routing.py), so domain code never speaks HTTP."""

from __future__ import annotations

from typing import Any


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


class Unauthenticated(CodedropError):
    error_code = "UNAUTHENTICATED"
    default_message = "A valid Firebase ID token is required."


class AppCheckRequired(Unauthenticated):
    error_code = "APP_CHECK_REQUIRED"
    default_message = "This sale needs a valid Firebase App Check token (X-Firebase-AppCheck)."


class Forbidden(CodedropError):
    error_code = "FORBIDDEN"
    default_message = "This operation needs the admin claim."


class IdentityRequired(Forbidden):
    error_code = "IDENTITY_REQUIRED"
    default_message = "This sale counts codes per verified identity your sign-in does not carry."


class SignInProviderNotAllowed(Forbidden):
    error_code = "SIGN_IN_PROVIDER_NOT_ALLOWED"
    default_message = "This sale does not accept your sign-in method."


class NotFound(CodedropError):
    error_code = "NOT_FOUND"
    default_message = "No such resource."


class CampaignNotFound(NotFound):
    error_code = "CAMPAIGN_NOT_FOUND"
    default_message = "No such campaign."


class ClaimNotFound(NotFound):
    error_code = "CLAIM_NOT_FOUND"
    default_message = "You hold no code in this campaign."


class JobNotFound(NotFound):
    error_code = "JOB_NOT_FOUND"
    default_message = "No such job."


class Conflict(CodedropError):
    error_code = "CONFLICT"


class CampaignExists(Conflict):
    error_code = "CAMPAIGN_EXISTS"
    default_message = "A campaign with this id already exists."


class CampaignNotActive(Conflict):
    error_code = "CAMPAIGN_NOT_ACTIVE"
    default_message = "The campaign is not accepting claims."


class SoldOut(CodedropError):
    error_code = "SOLD_OUT"
    default_message = "Every code of this campaign has been claimed."


class WaitingRoom(CodedropError):
    error_code = "WAITING_ROOM"
    default_message = "Too many shoppers right now; wait your turn."


class Contended(CodedropError):
    error_code = "CONTENDED"
    default_message = "Too many shoppers at once; retry shortly."


class MethodNotAllowed(CodedropError):
    error_code = "METHOD_NOT_ALLOWED"
    default_message = "Method not allowed on this path."
