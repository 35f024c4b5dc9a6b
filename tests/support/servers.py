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
from devkit.standins.storage_notifier import StorageNotifier
from scripts.localstack.config import Function
from scripts.localstack.errors import StackError
from scripts.localstack.functions import FunctionProcess, function_env, start_function
from shared.http.entry_points import entry_points
from tests.support.stack import BUCKET, MAIN


@contextlib.contextmanager
def function_servers(targets: Iterable[str], *, run_dir: Path) -> Iterator[dict[str, str]]:
    """Servers for main.py's `targets` with this process's environment (the emulators
    fixture's), started side by side as the kind main.py declares; their URLs by target."""
    env = function_env({})
    servers: list[FunctionProcess] = []
    kinds = entry_points(Path(MAIN))
    try:
        for target in targets:
            function = Function(target, workers=1, threads=4, kind=kinds[target])
            servers.append(
                start_function(
                    function, port=free_port(), env=env, log_dir=run_dir, run_dir=run_dir
                )
            )
        for server in servers:
            try:
                server.wait_answering(timeout=60)
            except StackError as exc:
                pytest.fail(str(exc))
        yield {server.name: server.url for server in servers}
    finally:
        for server in servers:
            server.terminate()  # all at once: each takes about a second to stop
        for server in servers:
            server.stop()


def fast_notifier(
    client: StorageClient, target_url: str, *, max_attempts: int = 3, first_backoff: float = 0.1
) -> StorageNotifier:
    """A storage notifier on the test bucket that polls and retries quickly (not started)."""
    return StorageNotifier(
        client=client,
        bucket=BUCKET,
        target_url=target_url,
        poll_interval=0.1,
        max_attempts=max_attempts,
        first_backoff=first_backoff,
    )
