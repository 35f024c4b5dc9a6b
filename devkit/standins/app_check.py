"""A development App Check key set: Firebase has no App Check emulator, so the local stack and the
tests sign App Check tokens themselves and serve the public keys as a JWKS on 127.0.0.1.

The functions accept these keys only in demo- projects (CODEDROP_APP_CHECK_JWKS_URL, refused
elsewhere by shared/settings.py), and verify the tokens with firebase-admin's App Check module
exactly as they verify real ones.
`python -m devkit.standins.app_check --project demo-codedrop` serves a
fresh key set: `GET /jwks.json` (the key set) and `GET /token?app_id=...` (a token, with CORS,
for local pages: `{"token", "expireTimeMillis"}`, what the Firebase JS SDK's CustomProvider
wants).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

from devkit.standins.keys import DevSigningKey, KeySetServer

ISSUER = "https://firebaseappcheck.googleapis.com/"
# App Check names a project by number and id in `aud`; a demo project has no number.
DEV_PROJECT_NUMBER = "000000000000"
DEV_APP_ID = f"1:{DEV_PROJECT_NUMBER}:web:codedrop-dev"


class DevAppCheckKeys(DevSigningKey):
    """An RSA key pair that signs App Check-shaped tokens, and its public JWKS."""

    def __init__(self, key_id: str | None = None) -> None:
        super().__init__(key_id or f"dev-{secrets.token_hex(4)}")

    def token(
        self,
        *,
        project: str,
        app_id: str = DEV_APP_ID,
        lifetime_seconds: int = 3600,
        expires: bool = True,
    ) -> str:
        """A token as App Check issues it for `project` (`expires=False` leaves out `exp`, which
        App Check never does: the functions must refuse it)."""
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": f"{ISSUER}{DEV_PROJECT_NUMBER}",
            "sub": app_id,
            "aud": [f"projects/{DEV_PROJECT_NUMBER}", f"projects/{project}"],
            "iat": now,
        }
        if expires:
            claims["exp"] = now + lifetime_seconds
        return self.sign(claims, typ="JWT")


class DevAppCheckServer(KeySetServer):
    """Serves a key set's JWKS and mints tokens on 127.0.0.1 (a thread of this process)."""

    keys: DevAppCheckKeys

    def __init__(self, keys: DevAppCheckKeys, *, project: str, port: int = 0) -> None:
        self.project = project
        super().__init__(keys, port=port)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path == "/jwks.json":
                    self._json(server.keys.jwks())
                elif url.path == "/token":
                    app_id = parse_qs(url.query).get("app_id", [DEV_APP_ID])[0]
                    lifetime = 3600
                    token = server.keys.token(
                        project=server.project, app_id=app_id, lifetime_seconds=lifetime
                    )
                    expires = int((time.time() + lifetime) * 1000)
                    self._json({"token": token, "expireTimeMillis": expires})
                else:
                    self.send_error(404)

            def _json(self, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                # Local pages fetch their tokens here; the key proves nothing outside demo-.
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler


@contextlib.contextmanager
def dev_app_check(project: str, port: int = 0) -> Iterator[DevAppCheckServer]:
    """A fresh key set served for the duration of the block."""
    with DevAppCheckServer(DevAppCheckKeys(), project=project, port=port) as server:
        yield server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", required=True, help="a demo- project id")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.project.startswith("demo-"):
        parser.error("development App Check keys are for demo- projects only")
    with dev_app_check(args.project, args.port) as server:
        print(f"CODEDROP_APP_CHECK_JWKS_URL={server.jwks_url}", flush=True)
        print(f"tokens: {server.url}/token", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
