"""`--dist loadgroup` that works with pytest 9.2: tests marked with the same `xdist_group` run on
one pytest-xdist worker.

pytest-xdist 3.8 tells the controller a test's group by appending `@group` to the test's node id
(`item._nodeid`), which pytest 9.2 no longer reads (a node id is built from `item._id`): every
test was its own unit, so a group's module fixtures were made on each worker. Here the workers
write each test's group to a file, and the controller's scheduler reads it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

GROUPS_FILE = "xdist-groups-{worker}.json"


def write_groups(items: Sequence[pytest.Item], folder: Path, worker: str) -> None:
    """Each grouped test's group, as pytest-xdist names it (the names of its marks, joined)."""
    groups = {
        item.nodeid: "_".join(sorted({str(mark.args[0]) for mark in marks}))
        for item in items
        if (marks := list(item.iter_markers("xdist_group")))
    }
    (folder / GROUPS_FILE.format(worker=worker)).write_text(json.dumps(groups))


class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    """pytest-xdist's loadgroup: a group is one unit of work, the largest sent first; the
    other tests one by one, in collection order."""

    def __init__(self, config: pytest.Config, log: Producer | None, folder: Path) -> None:
        super().__init__(config, log)
        self._folder = folder
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:  # read once every worker has collected (and written)
            written = sorted(self._folder.glob(GROUPS_FILE.format(worker="*")))
            self._groups = json.loads(written[0].read_text()) if written else {}
        return self._groups.get(nodeid, nodeid)


class Scheduler:
    """The plugin the controller registers (only where pytest-xdist runs: the hook is its)."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(
        self, config: pytest.Config, log: Producer
    ) -> LoadScopeScheduling | None:
        if config.getvalue("dist") != "loadgroup":
            return None
        return GroupScheduling(config, log, self._folder)
