"""Cloud Scheduler's part in the local stack: POST the sweep function every minute.

In the cloud a Scheduler job calls `sweep` with an OIDC token (scripts/deployment); locally the
function is reachable without one, and this watcher calls it on the same schedule so lost events
are republished and stock re-checked as in production.
"""

from __future__ import annotations

import logging
import threading

from devkit import http

log = logging.getLogger("local_stack")

SWEEP_EVERY_SECONDS = 60.0


class SweepScheduler:
    name = "sweep scheduler"

    def __init__(self, *, url: str, every: float = SWEEP_EVERY_SECONDS) -> None:
        self._url = url
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sweep-scheduler", daemon=True)

    def __str__(self) -> str:
        return f"POST {self._url} every {self._every:g} s"

    def start(self) -> None:
        self._thread.start()

    def failure(self) -> str | None:
        return None  # a failed sweep is logged and tried again next minute, as Scheduler does

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                status, body = http.call_json("POST", self._url, body={})
            except http.Unreachable as exc:
                log.warning("sweep unreachable: %s", exc)
                continue
            if status != 200:
                log.warning("sweep answered %s: %s", status, body)
