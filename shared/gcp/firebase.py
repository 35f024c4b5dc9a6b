"""The firebase-admin app of this process (ID tokens, App Check)."""

from __future__ import annotations

import threading

import firebase_admin
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
