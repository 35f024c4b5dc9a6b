"""Batches committed on a few threads at once, their results taken in the order they were
submitted: the shape of every bulk write (an import's codes, an assignment's pairs)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

R = TypeVar("R")


class InFlight(Generic[R]):
    """Runs submitted work on `parallel` threads and hands each result to `collect`, in order.
    At most two batches per thread wait: a slow database slows the caller that reads the rows
    instead of filling memory. A batch's failure is raised where its result is taken."""

    def __init__(self, parallel: int, *, name: str, collect: Callable[[R], None]) -> None:
        self._executor = ThreadPoolExecutor(parallel, thread_name_prefix=name)
        self._waiting: deque[Future[R]] = deque()
        self._bound = parallel * 2
        self._collect = collect

    def submit(self, work: Callable[[], R]) -> None:
        while len(self._waiting) >= self._bound:
            self._collect(self._waiting.popleft().result())
        self._waiting.append(self._executor.submit(work))

    def drain(self) -> None:
        """Take every result still to come."""
        while self._waiting:
            self._collect(self._waiting.popleft().result())

    def finish(self, last: Callable[[], None]) -> None:
        """Run `last` (it submits the caller's last batch), take every result still to come,
        then stop: stopped also when one of them raises."""
        try:
            last()
            self.drain()
        finally:
            self.stop()

    def stop(self) -> None:
        """Let running batches end and start no other."""
        self._executor.shutdown(wait=True, cancel_futures=True)
