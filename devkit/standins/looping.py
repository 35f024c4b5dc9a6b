"""A stand-in whose work is one loop on a daemon thread, told to stop by an event."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import ClassVar


class LoopingStandIn(ABC):
    """Started once, stopped once; a round of its loop that fails is logged and tried again, so
    it never reports a failure of its own (the local stack's Watcher)."""

    name: str
    thread_name: ClassVar[str]
    stop_timeout: ClassVar[float] = 5.0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def failure(self) -> str | None:
        return None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.stop_timeout)

    @abstractmethod
    def _run(self) -> None:
        """The loop: runs until `self._stop` is set."""
