"""The example landing page and the console over HTTP (./scripts/run --demo, and the browser
tests): web/example at /, web/codedrop.js beside it, web/console at /console/ with uPlot from npm
in /console/vendor/, the Firebase JS SDK installed by npm at the path the import maps name, and
config.json files telling each page where claim_api or admin_api, the Auth emulator and the
development App Check tokens are. A thread of the calling process; only GET, only those files."""

from __future__ import annotations

import json
import mimetypes
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from devkit.emulators.auth import API_KEY
from devkit.emulators.manager import NPM_HINT
from devkit.serving import BackgroundServer
from scripts.web_assets import FIREBASE_SDK, SDK_BUILD, UPLOT_DIST, UPLOT_FILES, WEB

EXAMPLE = WEB / "example"
CONSOLE = WEB / "console"
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".json": None}


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


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    """What the console needs to know (served as /console/config.json)."""

    admin_api_base: str
    project: str
    auth_emulator_url: str

    def as_json(self) -> dict[str, Any]:
        return {
            "adminApiBase": self.admin_api_base,
            "firebase": {
                "apiKey": API_KEY,
                "authDomain": f"{self.project}.firebaseapp.com",
                "projectId": self.project,
            },
            "authEmulatorUrl": self.auth_emulator_url,
        }


class _Handler(BaseHTTPRequestHandler):
    server: _PageHTTPServer

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/config.json":
            self._send(json.dumps(self.server.config.as_json()).encode(), "application/json")
            return
        if path == "/console":
            self.send_response(HTTPStatus.MOVED_PERMANENTLY)
            self.send_header("Location", "/console/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/console/config.json":
            console = self.server.console
            if console is None:
                self.send_error(HTTPStatus.NOT_FOUND)
                return
            self._send(json.dumps(console.as_json()).encode(), "application/json")
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

    def __init__(
        self,
        address: tuple[str, int],
        config: PageConfig,
        sdk: Path,
        console: ConsoleConfig | None,
    ) -> None:
        super().__init__(address, _Handler)
        self.config = config
        self.console = console
        self.sdk = sdk
        self.vendor = f"/vendor/firebasejs/{firebase_sdk_version(sdk)}/"
        if console is not None and not all((UPLOT_DIST / n).is_file() for n in UPLOT_FILES):
            raise PagesUnavailable(f"uPlot is not installed in {UPLOT_DIST}. {NPM_HINT}")

    def resolve(self, path: str) -> Path | None:
        """The file a URL path names, or None; nothing outside the served folders."""
        if path.startswith(self.vendor):
            name = path.removeprefix(self.vendor)
            # The builds' source maps too, for the browser's developer tools.
            return self.sdk / name if SDK_BUILD.match(name.removesuffix(".map")) else None
        if path == "/codedrop.js":
            return WEB / "codedrop.js"
        if path.startswith("/console/"):
            return self._console_file(path.removeprefix("/console/"))
        name = "index.html" if path in ("/", "/index.html") else path.lstrip("/")
        return _inside(EXAMPLE, name)

    def _console_file(self, name: str) -> Path | None:
        if self.console is None:
            return None
        if name.startswith("vendor/"):
            vendored = name.removeprefix("vendor/")
            return UPLOT_DIST / vendored if vendored in UPLOT_FILES else None
        return _inside(CONSOLE, name or "index.html")


def _inside(folder: Path, name: str) -> Path | None:
    """The file `name` in `folder`, or None (also for names that would leave it)."""
    file = (folder / name).resolve()
    if not file.is_relative_to(folder) or not file.is_file():
        return None
    return file


class PageServer(BackgroundServer):
    """web/example (and with a ConsoleConfig web/console) on host:port, in a thread of this
    process."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        config: PageConfig,
        sdk: Path = FIREBASE_SDK,
        console: ConsoleConfig | None = None,
    ) -> None:
        server = _PageHTTPServer((host, port), config, sdk, console)
        super().__init__(server, host=host, name="page-server")
