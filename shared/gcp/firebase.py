"""The firebase-admin app of this process (ID tokens, App Check)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import firebase_admin
from firebase_admin import auth as firebase_auth
from google.auth.credentials import AnonymousCredentials

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
    """End the user's refresh tokens: no new ID token after the one they hold (an hour)."""
    firebase_auth.revoke_refresh_tokens(uid, app=firebase_app(project_id))
