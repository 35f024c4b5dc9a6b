"""The OIDC token a Pub/Sub push subscription signs its requests with (`Authorization: Bearer`):
Google-signed, for our audience, naming the service account the subscription pushes as.

Cloud Run's IAM check admits any caller granted the invoker role; this check admits only the push
subscription's account, so another holder of the role (or a mistake in IAM) cannot push forged
events. Locally the Pub/Sub emulator signs nothing: the local stack and the tests push through a
relay that signs with a development key set (devkit/standins/push_auth.py), whose JWKS a demo-
project may name (CODEDROP_PUSH_JWKS_URL, refused elsewhere by Settings); the same checks run on it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any

import jwt

from shared.settings import Settings

log = logging.getLogger(__name__)

GOOGLE_JWKS_URL = "https://www.googleapis.com/oauth2/v3/certs"
GOOGLE_ISSUERS = ("https://accounts.google.com", "accounts.google.com")
# Google rotates its signing keys over days; an unknown `kid` refetches at once (PyJWKClient).
_JWKS_LIFESPAN_SECONDS = 3600
_LEEWAY_SECONDS = 30
# Pub/Sub signs a token for many pushes (as the local relay does); a token that passed is
# admitted again until it expires without its signature checked anew, which was a tenth of
# count_usage's CPU a push. Bounded: the oldest are forgotten first.
_VERIFIED_TOKENS = 256


class PushRefused(Exception):
    """The request is not a push of our subscription (its message is safe to answer)."""


class PushUnverifiable(Exception):
    """The signing keys could not be fetched: a retry may pass."""


class PushVerifier:
    def __init__(self, settings: Settings) -> None:
        if settings.push_audience is None or settings.push_service_account is None:
            raise ValueError("push verification needs an audience and a service account")
        self._audience = settings.push_audience
        self._account = settings.push_service_account
        self._jwks_url = settings.push_jwks_url or GOOGLE_JWKS_URL
        self._client: jwt.PyJWKClient | None = None
        self._lock = threading.Lock()
        self._verified: OrderedDict[str, float] = OrderedDict()  # token: its expiry

    def _keys(self) -> jwt.PyJWKClient:
        with self._lock:
            if self._client is None:
                self._client = jwt.PyJWKClient(self._jwks_url, lifespan=_JWKS_LIFESPAN_SECONDS)
            return self._client

    def verify(self, authorization: str | None) -> None:
        """Return if `authorization` carries a valid push token; PushRefused or
        PushUnverifiable otherwise. The token's own content is logged cut short, never
        answered."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise PushRefused("A push must carry its subscription's OIDC token.")
        with self._lock:
            expires = self._verified.get(token)
        if expires is not None and time.time() < expires + _LEEWAY_SECONDS:
            return
        claims = self._checked(token)
        with self._lock:
            self._verified[token] = float(claims["exp"])
            while len(self._verified) > _VERIFIED_TOKENS:
                self._verified.popitem(last=False)

    def _checked(self, token: str) -> dict[str, Any]:
        """The claims of a token of our push subscription; PushRefused or PushUnverifiable."""
        try:
            key = self._keys().get_signing_key_from_jwt(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=["RS256"],
                audience=self._audience,
                leeway=_LEEWAY_SECONDS,
                options={"require": ["exp", "iat", "iss", "aud"]},
            )
        except jwt.PyJWKClientConnectionError as exc:
            log.warning("push signing keys could not be fetched", extra={"error": repr(exc)})
            raise PushUnverifiable("The push could not be verified right now.") from exc
        except jwt.PyJWTError as exc:
            log.warning("push token refused", extra={"reason": str(exc)[:200]})
            raise PushRefused("The push's OIDC token is not valid.") from exc
        if (
            claims.get("iss") not in GOOGLE_ISSUERS
            or claims.get("email") != self._account
            or claims.get("email_verified") is not True
        ):
            log.warning(
                "push token of another issuer or account refused",
                extra={"issuer": str(claims.get("iss"))[:100]},
            )
            raise PushRefused("The push is not signed as the push service account.")
        return claims
