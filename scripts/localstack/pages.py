"""The example landing page over HTTP (./scripts/run --demo, and the browser tests): web/example
at /, web/codedrop.js beside it, the Firebase JS SDK installed by npm at the path the page's
import map names, and /config.json telling the page where claim_api, the Auth emulator and the
development App Check tokens are. A thread of the calling process; only GET, only those files."""

from __future__ import annotations

import json
import mimetypes
import re
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from devkit.emulators.auth import API_KEY
from scripts.localstack.config import REPO

WEB = REPO / "web"
EXAMPLE = WEB / "example"
FIREBASE_SDK = REPO / "node_modules" / "firebase"
# Only the SDK's browser builds (firebase-app.js, firebase-auth.js, …), never its sources.
_SDK_FILE = re.compile(r"^firebase-[a-z-]+\.js(\.map)?$")
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".json": None}

NPM_HINT = (
    "Install the Node packages with `npm ci --omit=optional` in the repository root "
    "(./scripts/run does it)."
)


class PagesUnavailable(RuntimeError):
    """The Firebase JS SDK is not installed; the message says how to install it."""


def firebase_sdk_version(sdk: Path = FIREBASE_SDK) -> str:
    """The version of the Firebase JS SDK npm installed (the page's import map must match)."""
    try:
        package = json.loads((sdk / "package.json").read_text())
    except (OSError, ValueError) as exc:
        raise PagesUnavailable(f"The Firebase JS SDK is not installed ({exc}). {NPM_HINT}") from exc
    version = package.get("version")
    if not isinstance(version, str):
        raise PagesUnavailable(f"{sdk / 'package.json'} names no version. {NPM_HINT}")
    return version


@dataclass(frozen=True, slots=True)
class PageConfig:
    """What the page needs to know (served as /config.json)."""

    api_base: str
    project: str
    auth_emulator_url: str
    campaign_id: str | None = None
    # The development App Check key set's token URL (devkit/standins/app_check.py), if any.
    app_check_token_url: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "apiBase": self.api_base,
            "campaignId": self.campaign_id,
            # The Auth emulator takes any API key; authDomain matters only for redirects.
            "firebase": {
                "apiKey": API_KEY,
                "authDomain": f"{self.project}.firebaseapp.com",
                "projectId": self.project,
            },
            "authEmulatorUrl": self.auth_emulator_url,
            "signInMethod": "anonymous",
            "appCheckTokenUrl": self.app_check_token_url,
        }


class _Handler(BaseHTTPRequestHandler):
    server: _PageHTTPServer

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/config.json":
            self._send(json.dumps(self.server.config.as_json()).encode(), "application/json")
            return
        file = self.server.resolve(path)
        if file is None:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        kind = _TYPES.get(file.suffix) or mimetypes.guess_type(file.name)[0]
        self._send(file.read_bytes(), kind or "application/octet-stream")

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: the page's own requests are not news


class _PageHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], config: PageConfig, sdk: Path) -> None:
        super().__init__(address, _Handler)
        self.config = config
        self.sdk = sdk
        self.vendor = f"/vendor/firebasejs/{firebase_sdk_version(sdk)}/"

    def resolve(self, path: str) -> Path | None:
        """The file a URL path names, or None; nothing outside the served folders."""
        if path.startswith(self.vendor):
            name = path.removeprefix(self.vendor)
            return self.sdk / name if _SDK_FILE.match(name) else None
        if path == "/codedrop.js":
            return WEB / "codedrop.js"
        name = "index.html" if path in ("/", "/index.html") else path.lstrip("/")
        file = (EXAMPLE / name).resolve()
        if not file.is_relative_to(EXAMPLE) or not file.is_file():
            return None
        return file


class PageServer:
    """web/example on host:port, in a thread of this process."""

    def __init__(
        self, *, host: str, port: int, config: PageConfig, sdk: Path = FIREBASE_SDK
    ) -> None:
        self._server = _PageHTTPServer((host, port), config, sdk)
        self.url = f"http://{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="page-server", daemon=True
        )

    def start(self) -> PageServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> PageServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
