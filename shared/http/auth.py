"""Shopper and admin identity from a Firebase ID token (`Authorization: Bearer <token>`)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import firebase_admin
from firebase_admin import auth as firebase_auth

from shared.errors import Unauthenticated
from shared.settings import Settings

log = logging.getLogger(__name__)

_app_lock = threading.Lock()
_APP_NAME = "codedrop"


@dataclass(frozen=True, slots=True)
class Principal:
    user_id: str
    is_admin: bool
    # A shop's checkout: may look codes up and redeem them (admins may too).
    is_redeemer: bool = False


def _firebase_app(settings: Settings) -> firebase_admin.App:
    with _app_lock:
        try:
            return firebase_admin.get_app(_APP_NAME)
        except ValueError:
            return firebase_admin.initialize_app(
                options={"projectId": settings.project_id}, name=_APP_NAME
            )


def bearer_token(authorization: str | None) -> str:
    if not authorization:
        raise Unauthenticated("Missing Authorization header.")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("Authorization must be 'Bearer <Firebase ID token>'.")
    return token.strip()


def authenticate(authorization: str | None, *, settings: Settings) -> Principal:
    """Verify the ID token. With FIREBASE_AUTH_EMULATOR_HOST set (allowed only for demo-
    projects, see Settings) firebase-admin accepts the Auth emulator's unsigned tokens."""
    token = bearer_token(authorization)
    try:
        claims = firebase_auth.verify_id_token(token, app=_firebase_app(settings))
    except (ValueError, firebase_auth.InvalidIdTokenError) as exc:
        # The library's reason may quote the token and its claims: logged (cut short), never
        # answered.
        log.info("ID token refused", extra={"reason": str(exc)[:200]})
        raise Unauthenticated("The ID token is invalid or expired.") from exc
    except firebase_auth.CertificateFetchError as exc:
        # Google's public keys could not be fetched: not the shopper's fault, but no identity.
        raise Unauthenticated("ID token could not be verified right now.") from exc
    user_id = claims.get("uid") or claims.get("sub")
    if not isinstance(user_id, str) or not user_id:
        raise Unauthenticated("ID token has no subject.")
    is_admin = claims.get("admin") is True
    return Principal(
        user_id=user_id, is_admin=is_admin, is_redeemer=is_admin or claims.get("redeemer") is True
    )
