"""Firebase App Check tokens (`X-Firebase-AppCheck`), verified with firebase-admin's App Check
module: the token is signed by App Check's keys, for this project, and not expired.

Locally there is no App Check service. A demo- project may name a development key set
(CODEDROP_APP_CHECK_JWKS_URL, refused elsewhere by Settings) that the local stack and the tests
serve and sign with; the module's own checks then run unchanged on those tokens.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import jwt
from firebase_admin import app_check
from firebase_admin import exceptions as firebase_exceptions

from shared.errors import AppCheckRequired
from shared.gcp.firebase import firebase_app
from shared.settings import Settings

log = logging.getLogger(__name__)

# App Check's own key sets are cached for 6 hours (firebase-admin); a development one as long.
_JWKS_LIFESPAN_SECONDS = 21_600


class AppCheckVerifier:
    def __init__(self, settings: Settings) -> None:
        self._project_id = settings.project_id
        self._jwks_url = settings.app_check_jwks_url
        self._consume = settings.app_check_consume_tokens
        self._ready = False
        self._lock = threading.Lock()

    def _prepare(self) -> None:
        """Create the module's service for this app once; point it at the development key set
        when one is configured (firebase-admin 7.7 keeps its key client in `_jwks_client`)."""
        with self._lock:
            if self._ready:
                return
            app = firebase_app(self._project_id)
            if self._jwks_url is not None:
                if not app.project_id.startswith("demo-"):  # Settings refuses it; never trust
                    raise RuntimeError("development App Check keys outside a demo- project")
                service = app_check._get_app_check_service(app)
                if not hasattr(service, "_jwks_client"):
                    raise RuntimeError("firebase-admin's App Check service changed: pin 7.7")
                service._jwks_client = jwt.PyJWKClient(
                    self._jwks_url, lifespan=_JWKS_LIFESPAN_SECONDS
                )
            self._ready = True

    def verify(self, token: str | None) -> None:
        if not token:
            raise AppCheckRequired()
        self._prepare()
        try:
            claims: dict[str, Any] = app_check.verify_token(
                token, app=firebase_app(self._project_id), consume=self._consume
            )
        # ValueError: a bad token. PyJWKClientError (a PyJWTError): an unknown key id, or the key
        # set could not be fetched. AttributeError: no `iss` (the module calls .startswith on
        # it). FirebaseError: the App Check service refused or failed to consume the token.
        except (
            ValueError,
            AttributeError,
            jwt.PyJWTError,
            firebase_exceptions.FirebaseError,
        ) as exc:
            if isinstance(exc, jwt.PyJWKClientConnectionError | firebase_exceptions.FirebaseError):
                log.warning("App Check token could not be verified", extra={"error": repr(exc)})
            else:
                log.info("App Check token refused", extra={"reason": str(exc)[:200]})
            # A fixed answer: the library's reason quotes the token's own fields (its `kid`).
            raise AppCheckRequired("Invalid App Check token.") from exc
        # The module accepts a token without `exp` (PyJWT does not require it): a token that
        # never expires would be a bot's for good.
        if not isinstance(claims.get("exp"), int | float):
            raise AppCheckRequired("Invalid App Check token: it has no expiry.")
        if claims.get("already_consumed") is True:
            raise AppCheckRequired("This App Check token was already used.")
