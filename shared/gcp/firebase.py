"""The firebase-admin app of this process (ID tokens, App Check), and the revocation check of
the admin and redeemer routes."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import firebase_admin
from firebase_admin import auth as firebase_auth
from firebase_admin.exceptions import FirebaseError
from google.auth.credentials import AnonymousCredentials

from shared.cache import RecentReads
from shared.errors import AuthUnavailable, Unauthenticated

log = logging.getLogger(__name__)

_app_lock = threading.Lock()
_APP_NAME = "codedrop"


def firebase_app(project_id: str) -> firebase_admin.App:
    """The app for `project_id`, created once. A demo- project has no Google credentials and
    needs none (emulator tokens, development App Check keys); firebase-admin would otherwise
    look them up when its App Check service is created."""
    with _app_lock:
        try:
            return firebase_admin.get_app(_APP_NAME)
        except ValueError:
            demo = project_id.startswith("demo-")
            credential = AnonymousCredentials() if demo else None  # type: ignore[no-untyped-call]
            return firebase_admin.initialize_app(
                credential, options={"projectId": project_id}, name=_APP_NAME
            )


def verify_id_token(token: str, *, project_id: str) -> dict[str, Any]:
    """The token's claims once its signature, audience, issuer and expiry hold (the Auth
    emulator's unsigned tokens only where Settings allows the emulator)."""
    try:
        claims: dict[str, Any] = firebase_auth.verify_id_token(token, app=firebase_app(project_id))
    except (ValueError, firebase_auth.InvalidIdTokenError) as exc:
        # The library's reason may quote the token: logged cut short, never answered.
        log.info("ID token refused", extra={"reason": str(exc)[:200]})
        raise Unauthenticated("The ID token is invalid or expired.") from exc
    except firebase_auth.CertificateFetchError as exc:
        raise Unauthenticated("ID token could not be verified right now.") from exc
    return claims


@dataclass(frozen=True, slots=True)
class AccountState:
    exists: bool
    disabled: bool = False
    valid_after_ms: int = 0  # tokens issued before this were revoked (revoke_refresh_tokens)


class Revocations:
    """What firebase-admin's `verify_id_token(check_revoked=True)` checks (the account exists,
    is not disabled, and the token was issued after its last revocation), with the account
    read from Firebase Auth at most every `max_age` seconds per account and instance
    (shared/cache.RecentReads: an answer rests on a read at most 2 x max_age old). So a
    disabled, deleted or signed-out account's token is refused within that bound, at one Auth
    read per account per period instead of one per request."""

    def __init__(self, project_id: str, *, max_age: float) -> None:
        self._project_id = project_id
        self._reads: RecentReads[str, AccountState] = RecentReads(max_age=max_age)

    def check(self, uid: str, *, issued_at: float) -> None:
        state = self._reads.get(uid, lambda: self._read(uid))
        if not state.exists:
            raise Unauthenticated("This account no longer exists.")
        if state.disabled:
            raise Unauthenticated("This account is disabled.")
        if issued_at * 1000 < state.valid_after_ms:
            raise Unauthenticated("This ID token was revoked: sign in again.")

    def _read(self, uid: str) -> AccountState:
        try:
            user = firebase_auth.get_user(uid, app=firebase_app(self._project_id))
        except firebase_auth.UserNotFoundError:
            return AccountState(exists=False)
        except (FirebaseError, ValueError) as exc:
            # Fail closed: an account that cannot be checked acts on nothing (not cached).
            log.warning("account could not be checked", extra={"error": repr(exc)[:300]})
            raise Unauthenticated("Your sign-in could not be checked right now; retry.") from exc
        return AccountState(
            exists=True,
            disabled=bool(user.disabled),
            valid_after_ms=int(user.tokens_valid_after_timestamp or 0),
        )


@dataclass(frozen=True, slots=True)
class AuthUser:
    uid: str
    email: str | None
    claims: dict[str, Any]


def user_by_email(email: str, *, project_id: str, create: bool) -> AuthUser | None:
    """The Firebase Auth user with this email; created (unverified, no password: they sign in
    with Google or an email link) when `create` and there is none."""
    app = firebase_app(project_id)
    try:
        user = firebase_auth.get_user_by_email(email, app=app)
    except firebase_auth.UserNotFoundError:
        if not create:
            return None
        user = firebase_auth.create_user(email=email, app=app)
    return AuthUser(uid=user.uid, email=user.email, claims=dict(user.custom_claims or {}))


def user_by_uid(uid: str, *, project_id: str) -> AuthUser | None:
    try:
        user = firebase_auth.get_user(uid, app=firebase_app(project_id))
    except firebase_auth.UserNotFoundError:
        return None
    return AuthUser(uid=user.uid, email=user.email, claims=dict(user.custom_claims or {}))


def set_claims(uid: str, claims: dict[str, Any], *, project_id: str) -> None:
    """Replace the user's custom claims (their next ID token carries them)."""
    firebase_auth.set_custom_user_claims(uid, claims or None, app=firebase_app(project_id))


def revoke_sessions(uid: str, *, project_id: str) -> None:
    """End the user's refresh tokens: no new ID token, and the admin and redeemer routes refuse
    the one they hold once their revocation check's cache expires (Revocations). A user that
    no longer exists has no session left to end."""
    try:
        firebase_auth.revoke_refresh_tokens(uid, app=firebase_app(project_id))
    except firebase_auth.UserNotFoundError:
        return
    except FirebaseError as exc:
        raise AuthUnavailable() from exc
