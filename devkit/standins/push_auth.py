"""Signed Pub/Sub pushes on the local stack: the Pub/Sub emulator pushes without a token, so its
push subscriptions point at this relay, which adds the OIDC token a real subscription would send
(`Authorization: Bearer`, signed by a development key set, for the configured audience and push
service account) and forwards the push to the function, answering with the function's status so
the emulator's retries and dead letters work as before.

The functions verify these tokens exactly as they verify Google's (shared/gcp/push_auth.py),
against this key set's JWKS (`GET /jwks.json`), which only demo- projects may name
(CODEDROP_PUSH_JWKS_URL). So the check is exercised locally and in the tests, never skipped.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx

from devkit.standins.keys import DevSigningKey, KeySetServer

ISSUER = "https://accounts.google.com"
# What the local stack and the tests configure (CODEDROP_PUSH_AUDIENCE / _SERVICE_ACCOUNT).
LOCAL_AUDIENCE = "codedrop-local-push"
LOCAL_ACCOUNT = "codedrop-invoker@demo-codedrop.iam.gserviceaccount.com"
_FORWARD_TIMEOUT_SECONDS = 120  # deliver_webhooks may drain an endpoint for a while
_TOKEN_REUSE_SECONDS = 600


class DevPushKeys(DevSigningKey):
    """An RSA key pair that signs push tokens shaped as Google's, and its public JWKS."""

    def __init__(self) -> None:
        super().__init__(f"dev-push-{secrets.token_hex(4)}")

    def token(
        self,
        *,
        audience: str = LOCAL_AUDIENCE,
        email: str = LOCAL_ACCOUNT,
        lifetime_seconds: int = 3600,
    ) -> str:
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "aud": audience,
            "sub": "100000000000000000000",
            "email": email,
            "email_verified": True,
            "iat": now,
            "exp": now + lifetime_seconds,
        }
        return self.sign(claims)

    def authorization(self, **kwargs: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(**kwargs)}"}


class PushRelay(KeySetServer):
    """Serves the key set's JWKS and relays `POST /<function>/` to that function's URL with a
    fresh token, on 127.0.0.1 (a thread of this process)."""

    keys: DevPushKeys

    def __init__(
        self,
        keys: DevPushKeys,
        *,
        targets: Mapping[str, str] | None = None,
        audience: str = LOCAL_AUDIENCE,
        account: str = LOCAL_ACCOUNT,
        port: int = 0,
    ) -> None:
        self.targets = dict(targets or {})
        self._audience = audience
        self._account = account
        # One client for every push: httpx.post builds a client (and its TLS context) a call,
        # 35 ms of this process's CPU against 1.5 ms, which the load test counted against the
        # stack for every message pushed.
        self._client = httpx.Client(timeout=_FORWARD_TIMEOUT_SECONDS)
        # One token signed per ten minutes, not one per push: an RSA signature costs about a
        # millisecond of this process's CPU, as much again as the forward itself, and a token is
        # good for an hour (the functions check the signature, audience, account and expiry).
        self._token: tuple[float, dict[str, str]] | None = None
        self._token_lock = threading.Lock()
        super().__init__(keys, port=port)

    def push_endpoint(self, function: str) -> str:
        return f"{self.url}/{function}"

    def stop(self) -> None:
        super().stop()
        self._client.close()

    def _authorization(self) -> dict[str, str]:
        with self._token_lock:
            if self._token is None or time.monotonic() - self._token[0] > _TOKEN_REUSE_SECONDS:
                authorization = self.keys.authorization(
                    audience=self._audience, email=self._account
                )
                self._token = (time.monotonic(), authorization)
            return self._token[1]

    def _forward(self, function: str, body: bytes, content_type: str) -> tuple[int, bytes]:
        headers = {"Content-Type": content_type, **self._authorization()}
        try:
            answer = self._client.post(self.targets[function], content=body, headers=headers)
        except httpx.HTTPError:
            return 502, b""  # the function is down: the emulator retries
        return answer.status_code, answer.content

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/jwks.json":
                    self.send_error(404)
                    return
                self._answer(200, json.dumps(relay.keys.jwks()).encode(), "application/json")

            def do_POST(self) -> None:
                function = self.path.strip("/")
                if function not in relay.targets:
                    self.send_error(404)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                content_type = self.headers.get("Content-Type") or "application/json"
                status, answer = relay._forward(function, body, content_type)
                self._answer(status, answer, "application/json")

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # the functions log each push

        return Handler
