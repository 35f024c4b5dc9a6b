"""Who may claim in a campaign, and as whom: the checks a claim passes before the engine.

A campaign may require a Firebase App Check token (the request comes from the shop's own app),
accept only some sign-in providers (no anonymous accounts, say), and count its per-user limit on
a verified phone number or email instead of the account, so a thousand accounts behind one
phone number share one limit. The engine enforces the limit on the key returned here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from shared.campaigns.models import CampaignRecord
from shared.claims.identity import IdentityKind, identity_key
from shared.errors import IdentityRequired, SignInProviderNotAllowed


@dataclass(frozen=True, slots=True)
class Shopper:
    """The caller as their verified Firebase ID token describes them."""

    user_id: str
    sign_in_provider: str | None = None  # firebase.sign_in_provider
    phone_number: str | None = None  # only set by Firebase for a verified phone
    email: str | None = None
    email_verified: bool = False


class AppCheck(Protocol):
    def verify(self, token: str | None) -> None:
        """Return if the token is a valid App Check token for this project; otherwise raise
        AppCheckRequired."""


def holder_key(campaign: CampaignRecord, shopper: Shopper) -> str:
    """The key the campaign's per-user limit counts for this shopper: IDENTITY_REQUIRED when the
    token does not carry the identity the campaign counts, IDENTITY_INVALID when it is not one
    (a phone number outside E.164)."""
    kind = campaign.identity
    if kind is IdentityKind.PHONE:
        if not shopper.phone_number:
            raise IdentityRequired(
                "This sale gives one code per phone number: sign in with your phone."
            )
        return identity_key(kind, shopper.phone_number)
    if kind is IdentityKind.EMAIL:
        if not shopper.email or shopper.email_verified is not True:
            raise IdentityRequired(
                "This sale gives one code per email address: sign in with a verified email."
            )
        return identity_key(kind, shopper.email, email_rule=campaign.email_canonicalization)
    return identity_key(IdentityKind.UID, shopper.user_id)


def admit(
    campaign: CampaignRecord, shopper: Shopper, *, app_check: AppCheck, app_check_token: str | None
) -> str:
    """Check the claim against the campaign's rules; returns the shopper's holder key."""
    if campaign.require_app_check:
        app_check.verify(app_check_token)
    allowed = campaign.allowed_sign_in_providers
    if allowed is not None and shopper.sign_in_provider not in allowed:
        raise SignInProviderNotAllowed(
            f"This sale accepts sign-ins with {', '.join(allowed)}, "
            f"not {shopper.sign_in_provider or 'an unknown provider'}."
        )
    return holder_key(campaign, shopper)
