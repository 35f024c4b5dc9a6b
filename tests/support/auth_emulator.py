"""The Firebase Auth emulator (firebase-tools, installed by npm into node_modules): started in a
process group of its own with a config of its own (free ports, no UI, nothing downloaded), and
its REST API for signing users up and in."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from emulator import free_port

ROOT = Path(__file__).resolve().parents[2]
FIREBASE_CLI = ROOT / "node_modules" / ".bin" / "firebase"
NPM_HINT = "Install it with `npm ci --omit=optional` in the repository root (needs Node 20+)."
# Compiling the Identity Toolkit API spec at start costs 6-7 s of CPU; 10-30 s were measured.
READY_TIMEOUT = 120.0
API_KEY = "demo-api-key"  # the emulator takes any key


class AuthEmulatorUnavailable(RuntimeError):
    """firebase-tools is not installed; the message says how to install it."""


@dataclass(frozen=True, slots=True)
class User:
    uid: str
    id_token: str
    refresh_token: str


class AuthEmulator:
    def __init__(self, *, project: str, log_dir: Path, port: int | None = None) -> None:
        if not FIREBASE_CLI.exists():
            raise AuthEmulatorUnavailable(f"{FIREBASE_CLI} is missing. {NPM_HINT}")
        self.project = project
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.log_dir = log_dir
        self.log_path = log_dir / "auth.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.started_in: float | None = None

    @property
    def host_port(self) -> str:
        """The form FIREBASE_AUTH_EMULATOR_HOST takes."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host_port}"

    def _config(self) -> Path:
        # The hub and logging ports are always opened: free ones, so parallel stacks coexist.
        config = {
            "emulators": {
                "auth": {"host": self.host, "port": self.port},
                "hub": {"host": self.host, "port": free_port()},
                "logging": {"host": self.host, "port": free_port()},
                "ui": {"enabled": False},
            }
        }
        path = self.log_dir / "firebase.json"
        path.write_text(json.dumps(config))
        return path

    def start(self, timeout: float = READY_TIMEOUT) -> AuthEmulator:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        command = [
            str(FIREBASE_CLI),
            "emulators:start",
            "--only",
            "auth",
            "--project",
            self.project,
            "--config",
            str(self._config()),
        ]
        # CI: no prompts, no update check, no MOTD fetch (this machine may be offline).
        env = {**os.environ, "CI": "true", "NO_UPDATE_NOTIFIER": "1"}
        started = time.monotonic()
        with self.log_path.open("wb") as log_file:
            self.process = subprocess.Popen(
                command,
                cwd=self.log_dir,  # firebase-debug.log lands here
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() - started > timeout:
                self.stop()
                raise RuntimeError(
                    f"the Auth emulator did not start on {self.host_port} "
                    f"(exit {self.process.returncode}):\n{self._tail()}"
                )
            time.sleep(0.2)
        self.started_in = time.monotonic() - started
        return self

    def _ready(self) -> bool:
        try:
            response = requests.get(f"{self.url}/", timeout=2)
        except requests.RequestException:
            return False
        return response.ok and bool(response.json().get("authEmulator", {}).get("ready"))

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])
        return "(no log)"

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)

    def __enter__(self) -> AuthEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- REST -----------------------------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any], *, owner: bool = False) -> dict[str, Any]:
        headers = {"Authorization": "Bearer owner"} if owner else {}
        response = requests.post(
            f"{self.url}/identitytoolkit.googleapis.com/v1/{path}",
            params={"key": API_KEY},
            json=body,
            headers=headers,
            timeout=10,
        )
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer

    def sign_up_anonymous(self) -> User:
        answer = self._post("accounts:signUp", {"returnSecureToken": True})
        return User(answer["localId"], answer["idToken"], answer["refreshToken"])

    def users(self) -> list[dict[str, Any]]:
        answer = self._post(f"projects/{self.project}/accounts:query", {}, owner=True)
        users: list[dict[str, Any]] = answer.get("userInfo", [])
        return users
