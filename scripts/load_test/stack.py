"""The stack a load test runs against: the local stack it starts on the ports it is given (or
free ones), or a stack that is already running."""

from __future__ import annotations

import os
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devkit.emulators import free_port
from devkit.emulators.processes import GroupProcess, ProcessFailed, spawn
from scripts.load_test import SetupError, operations, say
from scripts.load_test.options import REPO, Options
from scripts.localstack.config import FUNCTIONS, PORTS, READY_LINE, env_int

STACK_READY_TIMEOUT = 240.0
STACK_STOP_TIMEOUT = 60.0


@dataclass
class Target:
    claim_url: str
    admin_url: str
    storage_host: str
    firestore_host: str
    project: str
    bucket: str
    started: bool
    stack_pid: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    # where its functions write the operations they count (scripts/load_test/operations.py)
    operations: Path | None = None

    def ports(self) -> list[int]:
        """The ports of the stack's servers that these URLs name."""
        found: list[int] = []
        for url in (self.claim_url, self.admin_url, self.storage_host, self.firestore_host):
            port = urllib.parse.urlsplit(url if "//" in url else f"//{url}").port
            if port is not None:
                found.append(port)
        return found


def _env_port(key: str, given: Mapping[str, int]) -> int:
    """The port given as a flag, else its variable, else the local stack's default."""
    port = next(p for p in PORTS if p.key == key)
    return given.get(key) or env_int(port.env, port.default)


class StartedStack:
    """The local stack (`python -m scripts.localstack`) as a process group of its own (Ctrl-C
    reaches only the load test, which stops it in order), from its ready line until stop()."""

    def __init__(self, options: Options, log_dir: Path) -> None:
        self.options = options
        self.log_dir = log_dir
        self.log_path = log_dir / "local_stack.out"
        self.operations = log_dir / "operations"
        self.group: GroupProcess | None = None
        self.exports: dict[str, str] = {}
        self.ports: dict[str, int] = {}

    def _choose_ports(self) -> dict[str, int]:
        if self.options.free_ports:
            chosen: dict[str, int] = {}
            while len(chosen) < len(PORTS):
                number = free_port()
                if number not in chosen.values():
                    chosen[PORTS[len(chosen)].key] = number
            chosen.update(self.options.ports)
            return chosen
        return {p.key: _env_port(p.key, self.options.ports) for p in PORTS}

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({port.env: str(self.ports[port.key]) for port in PORTS})
        if self.options.claim_workers:
            env["CODEDROP_CLAIM_API_WORKERS"] = str(self.options.claim_workers)
        if self.options.claim_threads:
            env["CODEDROP_CLAIM_API_THREADS"] = str(self.options.claim_threads)
        env["CODEDROP_IMPORTS_BUCKET"] = self.options.bucket
        return operations.environment(self.operations, env)

    def _ready(self) -> bool:
        """Whether the stack printed its ready line; the variables it exported meanwhile."""
        lines = [line.strip() for line in self.log_path.read_text(errors="replace").splitlines()]
        for line in lines:
            if line.startswith("export ") and "=" in line:
                name, _, value = line.removeprefix("export ").partition("=")
                self.exports[name] = value
        return READY_LINE in lines

    def start(self) -> Target:
        self.ports = self._choose_ports()
        self.operations.mkdir(parents=True, exist_ok=True)
        env = self._environment()
        command = [sys.executable, "-m", "scripts.localstack", "--project", self.options.project]
        command += ["--log-dir", str(self.log_dir)]
        say(f"starting the local stack (logs in {self.log_dir}) …")
        process = spawn(command, log_path=self.log_path, env=env, cwd=REPO)
        self.group = GroupProcess("the local stack", process, self.log_path)
        try:
            self.group.wait_ready(self._ready, where="its ready line", timeout=STACK_READY_TIMEOUT)
        except ProcessFailed as exc:
            raise SetupError(f"{exc}\n(ports in use? try --free-ports)") from exc
        host = "http://127.0.0.1"
        claim_api = next(f for f in FUNCTIONS if f.name == "claim_api")
        return Target(
            claim_url=f"{host}:{self.ports['claim-api']}",
            admin_url=f"{host}:{self.ports['admin-api']}",
            storage_host=self.exports.get(
                "STORAGE_EMULATOR_HOST", f"{host}:{self.ports['storage']}"
            ),
            firestore_host=self.exports.get(
                "FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{self.ports['firestore']}"
            ),
            project=self.options.project,
            bucket=self.options.bucket,
            started=True,
            stack_pid=process.pid,
            operations=self.operations,
            settings={
                "ports": self.ports,
                "claim_api_workers": int(env.get(claim_api.workers_env) or claim_api.workers),
                "claim_api_threads": int(env.get(claim_api.threads_env) or claim_api.threads),
            },
        )

    def died(self) -> str | None:
        """Why the stack is gone (its last lines), or None while it runs."""
        if self.group is None or self.group.process.poll() is None:
            return None
        return f"exit {self.group.process.returncode}:\n{self.group.tail()}"

    def stop(self) -> None:
        """SIGTERM: it stops its functions and emulators itself; SIGKILL if it hangs."""
        if self.group is None or self.group.process.poll() is not None:
            return
        say("stopping the local stack …")
        self.group.stop(timeout=STACK_STOP_TIMEOUT)


def running_target(options: Options) -> Target:
    assert options.target_claim
    assert options.target_admin
    storage = (
        options.storage_host
        or os.environ.get("STORAGE_EMULATOR_HOST")
        or f"http://127.0.0.1:{_env_port('storage', options.ports)}"
    )
    firestore_host = (
        options.firestore_host
        or os.environ.get("FIRESTORE_EMULATOR_HOST")
        or f"127.0.0.1:{_env_port('firestore', options.ports)}"
    )
    return Target(
        claim_url=options.target_claim,
        admin_url=options.target_admin,
        storage_host=storage,
        firestore_host=firestore_host,
        project=options.project,
        bucket=options.bucket,
        started=False,
        settings={"claim_api_workers": "as running", "claim_api_threads": "as running"},
    )
