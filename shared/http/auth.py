"""Shopper and admin identity from a Firebase ID token (`Authorization: Bearer <token>`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.claims.policy import Shopper
from shared.errors import Unauthenticated
from shared.gcp.firebase import Revocations, verify_id_token
from shared.settings import Settings


@dataclass(frozen=True, slots=True)
class Principal:
    user_id: str
    is_admin: bool
    # May invite and remove admins (the `owner` custom claim, given with `admin`).
    is_owner: bool = False
    # A shop's checkout: may look codes up and redeem them (admins may too).
    is_redeemer: bool = False
    # What campaigns may count or require (shared/claims/policy.py).
    sign_in_provider: str | None = None
    phone_number: str | None = None
    email: str | None = None
    email_verified: bool = False

    def shopper(self) -> Shopper:
        return Shopper(
            user_id=self.user_id,
            sign_in_provider=self.sign_in_provider,
            phone_number=self.phone_number,
            email=self.email,
            email_verified=self.email_verified,
        )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def bearer_token(authorization: str | None) -> str:
    if not authorization:
        raise Unauthenticated("Missing Authorization header.")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("Authorization must be 'Bearer <Firebase ID token>'.")
    return token.strip()


def authenticate(
    authorization: str | None, *, settings: Settings, revocations: Revocations | None = None
) -> Principal:
    """Verify the ID token. With FIREBASE_AUTH_EMULATOR_HOST set (allowed only for demo-
    projects, see Settings) firebase-admin accepts the Auth emulator's unsigned tokens. With
    `revocations` (admin and redeemer routes), a token of a disabled, deleted or signed-out
    account is refused too."""
    claims = verify_id_token(bearer_token(authorization), project_id=settings.project_id)
    user_id = claims.get("uid") or claims.get("sub")
    if not isinstance(user_id, str) or not user_id:
        raise Unauthenticated("ID token has no subject.")
    if revocations is not None:
        issued_at = claims.get("iat")
        if not isinstance(issued_at, int | float):
            raise Unauthenticated("ID token has no issue time.")
        revocations.check(user_id, issued_at=issued_at)
    firebase = claims.get("firebase")
    is_admin = claims.get("admin") is True
    return Principal(
        user_id=user_id,
        is_admin=is_admin,
        is_owner=is_admin and claims.get("owner") is True,
        is_redeemer=is_admin or claims.get("redeemer") is True,
        sign_in_provider=_text(firebase.get("sign_in_provider"))
        if isinstance(firebase, dict)
        else None,
        phone_number=_text(claims.get("phone_number")),
        email=_text(claims.get("email")),
        email_verified=claims.get("email_verified") is True,
    )
