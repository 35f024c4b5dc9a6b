"""Functions served by functions-framework in subprocesses on free ports, as the local stack
runs them, for the tests of the tools that talk to them over HTTP."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator import free_port
from tests.support.stack import MAIN, ROOT


class FunctionServer:
    """functions-framework serving `target` on a free port in a process group of its own, with
    this process's environment (the emulators fixture's)."""

    def __init__(self, target: str, *, signature_type: str, run_dir: Path) -> None:
        self.target = target
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = run_dir / f"{target}.log"
        command = [
            str(Path(sys.executable).parent / "functions-framework"),
            "--target",
            target,
            "--source",
            MAIN,
            "--signature-type",
            signature_type,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "WORKERS": "1",
            "THREADS": "4",
            # gunicorn 27 otherwise opens ~/.gunicorn/gunicorn.ctl, shared by every server.
            "XDG_RUNTIME_DIR": str(run_dir),
        }
        with self.log_path.open("wb") as log_file:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not _answers(self.url):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(
                    f"{self.target} did not start (exit {self.process.poll()}):\n"
                    + self.log_path.read_text(errors="replace")[-3000:]
                )
            time.sleep(0.1)

    def terminate(self) -> None:
        """SIGTERM to the group: gunicorn's master and its workers."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)

    def stop(self) -> None:
        """terminate(), wait, then SIGKILL whatever is left of the group."""
        self.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        # Whatever is left of the group (a worker that outlived its master) goes too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.process.returncode is None:
            self.process.wait(timeout=5)


@contextlib.contextmanager
def function_servers(specs: dict[str, str], *, run_dir: Path) -> Iterator[dict[str, str]]:
    """Servers for {target: signature_type}, started side by side; their URLs by target."""
    servers = [
        FunctionServer(target, signature_type=kind, run_dir=run_dir / target)
        for target, kind in specs.items()
    ]
    try:
        for server in servers:
            server.wait_ready()
        yield {server.target: server.url for server in servers}
    finally:
        for server in servers:
            server.terminate()  # all at once: each takes about a second to stop
        for server in servers:
            server.stop()


def _answers(url: str) -> bool:
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        opener.open(url, timeout=2).close()
    except urllib.error.HTTPError:
        return True  # any status: it is up
    except OSError:
        return False
    return True
