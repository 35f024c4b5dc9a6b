"""Fixtures of the operator-tool tests: upload_codes, assign_codes and reconcile against the
local stack, and the deploy's dry runs (tests/support/deploy.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from google.cloud.storage import Client as StorageClient

from devkit.standins.storage_notifier import StorageNotifier, running
from tests.support import deploy
from tests.support.servers import FunctionServers, fast_notifier


@pytest.fixture(scope="session")
def servers(shared_servers: FunctionServers) -> dict[str, str]:
    """admin_api and import_codes over HTTP, as the local stack serves them."""
    return shared_servers.urls(["admin_api", "import_codes"])


@pytest.fixture
def notifier(storage_client: StorageClient, servers: dict[str, str]) -> Iterator[StorageNotifier]:
    """The bucket poller delivering uploads' events to import_codes."""
    with running(fast_notifier(storage_client, f"{servers['import_codes']}/")) as watcher:
        yield watcher


@pytest.fixture(scope="session")
def runtime_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The deploy's import-check environment, made once (tests using it share an xdist group)."""
    return deploy.runtime_env(tmp_path_factory.mktemp("runtime"))


@pytest.fixture
def build_dir(tmp_path: Path, runtime_env: Path) -> Path:
    """A fresh --build-dir for a dry run, its runtime-env the session's."""
    return deploy.build_dir(tmp_path / "build", runtime_env)


@pytest.fixture(scope="session")
def printed_plan(tmp_path_factory: pytest.TempPathFactory, runtime_env: Path) -> deploy.Printed:
    """`--dry-run` of the whole plan for deploy.PROJECT (tests/tools/test_deploy.py reads its
    function deploys, tests/tools/test_deploy_plan.py the rest)."""
    return deploy.full_plan(deploy.build_dir(tmp_path_factory.mktemp("plan"), runtime_env))
