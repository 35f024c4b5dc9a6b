"""Functions served by functions-framework in subprocesses on free ports, started exactly as the
local stack starts them, and the storage notifier that feeds import_codes, for the tests of the
tools that talk to them over HTTP."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from google.cloud.storage import Client as StorageClient

from devkit.emulators import free_port
from devkit.standins.storage_notifier import Retries, StorageNotifier
from scripts.localstack.config import Function
from scripts.localstack.errors import StackError
from scripts.localstack.functions import FunctionProcess, function_env, start_function
from shared.http.entry_points import entry_points
from tests.support.stack import BUCKET, MAIN


class FunctionServers:
    """Servers for main.py's functions, each started on its first use (as the kind main.py
    declares) with this process's environment as it was when the pool was made, and kept
    until stop(). The suite's session keeps one pool (the `shared_servers` fixture): a start
    costs seconds of CPU, and a server holds no state of a test's (that is in the emulators,
    under the test's own ids)."""

    def __init__(self, run_dir: Path) -> None:
        self._run_dir = run_dir
        self._env = function_env({})
        self._kinds = entry_points(Path(MAIN))
        self._servers: dict[str, FunctionProcess] = {}

    def urls(self, targets: Iterable[str]) -> dict[str, str]:
        """The targets' URLs, starting those not running yet side by side."""
        wanted = list(targets)
        started: list[FunctionProcess] = []
        for target in wanted:
            if target not in self._servers:
                function = Function(target, workers=1, threads=4, kind=self._kinds[target])
                self._servers[target] = server = start_function(
                    function,
                    port=free_port(),
                    env=self._env,
                    log_dir=self._run_dir,
                    run_dir=self._run_dir,
                )
                started.append(server)
        for server in started:
            try:
                server.wait_answering(timeout=60)
            except StackError as exc:
                pytest.fail(str(exc))
        return {target: self._servers[target].url for target in wanted}

    def stop(self) -> None:
        for server in self._servers.values():
            server.terminate()  # all at once: each takes about a second to stop
        for server in self._servers.values():
            server.stop()


@contextlib.contextmanager
def function_servers(targets: Iterable[str], *, run_dir: Path) -> Iterator[dict[str, str]]:
    """Servers of their own for `targets`, with this process's environment now (a fixture's
    that changes it, e.g. the browser tests' CORS), started side by side; URLs by target."""
    servers = FunctionServers(run_dir)
    try:
        yield servers.urls(targets)
    finally:
        servers.stop()


def fast_notifier(
    client: StorageClient, target_url: str, *, max_attempts: int = 3, first_backoff: float = 0.1
) -> StorageNotifier:
    """A storage notifier on the test bucket that polls and retries quickly (not started)."""
    return StorageNotifier(
        client=client,
        bucket=BUCKET,
        target_url=target_url,
        poll_interval=0.1,
        retries=Retries(max_attempts, first_backoff=first_backoff),
    )
