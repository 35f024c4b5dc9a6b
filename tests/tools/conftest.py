"""Fixtures of the operator-tool tests (upload_codes, assign_codes, reconcile)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.cloud.storage import Client as StorageClient

from devkit.standins.storage_notifier import StorageNotifier, running
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
