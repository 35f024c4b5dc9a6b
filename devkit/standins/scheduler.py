"""Cloud Scheduler's part in the local stack: POST the sweep function every minute.

In the cloud a Scheduler job calls `sweep` with an OIDC token (scripts/deployment); locally the
function is reachable without one, and this watcher calls it on the same schedule so lost events
are republished and stock re-checked as in production.
"""

from __future__ import annotations

import logging

from devkit import http
from devkit.standins.looping import LoopingStandIn

log = logging.getLogger("local_stack")

SWEEP_EVERY_SECONDS = 60.0


class SweepScheduler(LoopingStandIn):
    """A failed sweep is logged and tried again next minute, as Scheduler does."""

    name = "sweep scheduler"
    thread_name = "sweep-scheduler"

    def __init__(self, *, url: str, every: float = SWEEP_EVERY_SECONDS) -> None:
        super().__init__()
        self._url = url
        self._every = every

    def __str__(self) -> str:
        return f"POST {self._url} every {self._every:g} s"

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                status, body = http.call_json("POST", self._url, body={})
            except http.Unreachable as exc:
                log.warning("sweep unreachable: %s", exc)
                continue
            if status != 200:
                log.warning("sweep answered %s: %s", status, body)
