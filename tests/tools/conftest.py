"""Fixtures of the operator-tool tests (upload_codes, assign_codes, reconcile)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.cloud.storage import Client as StorageClient

from devkit.emulators import EmulatorStack
from devkit.standins.storage_notifier import StorageNotifier, running
from tests.support.servers import fast_notifier, function_servers


@pytest.fixture(scope="module")
def servers(
    emulators: EmulatorStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """admin_api and import_codes over HTTP, as the local stack serves them."""
    with function_servers(
        ["admin_api", "import_codes"],
        run_dir=tmp_path_factory.mktemp("servers"),
    ) as urls:
        yield urls


@pytest.fixture
def notifier(storage_client: StorageClient, servers: dict[str, str]) -> Iterator[StorageNotifier]:
    """The bucket poller delivering uploads' events to import_codes."""
    with running(fast_notifier(storage_client, f"{servers['import_codes']}/")) as watcher:
        yield watcher
