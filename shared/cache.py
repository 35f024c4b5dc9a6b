"""Values read recently, re-read by one caller at a time.

The claim path keeps a few reads for a fraction of a second per instance (the campaign, the
counters' totals). When such a value expired and each request re-read it, every request of a
busy instance arriving in the same moment read it at once: dozens of identical reads, each
waiting behind the others, and the polls of a waiting room stalled for seconds on a loaded
machine. Here the first caller to find a value expired reads it again, and the others go on with
the value they had (at most `max_age` plus one read old) until the read is back; past
`2 * max_age` they wait for that same read instead of starting another. Callers that find no
value at all share the read in flight.

Values are stamped with when their read started, so a slow read never replaces a newer value,
nor brings back one that was forgotten after it started.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


@dataclass(eq=False)
class _Read(Generic[V]):
    done: threading.Event = field(default_factory=threading.Event)
    value: V | None = None
    error: BaseException | None = None


class RecentReads(Generic[K, V]):
    def __init__(self, *, max_age: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[K, tuple[V, float]] = {}  # value, when its read started
        self._forgotten: dict[K, float] = {}
        self._reads: dict[K, _Read[V]] = {}

    def get(self, key: K, read: Callable[[], V]) -> V:
        """The value for `key`, read by `read` at most `max_age` ago (see the module)."""
        started = self._clock()
        if self._max_age <= 0:
            # Nothing kept: every answer rests on a read of its own.
            value = read()
            self.put(key, value, read_at=started)
            return value
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and started - entry[1] < self._max_age:
                return entry[0]
            in_flight = self._reads.get(key)
            lead = in_flight is None
            if in_flight is None:
                in_flight = self._reads[key] = _Read()
            elif entry is not None and started - entry[1] < 2 * self._max_age:
                return entry[0]
        return self._lead(key, in_flight, read, started) if lead else self._follow(in_flight)

    def _follow(self, in_flight: _Read[V]) -> V:
        in_flight.done.wait()
        if in_flight.error is not None:
            raise in_flight.error
        return in_flight.value  # type: ignore[return-value]

    def _lead(self, key: K, in_flight: _Read[V], read: Callable[[], V], started: float) -> V:
        try:
            in_flight.value = value = read()
            self.put(key, value, read_at=started)
            return value
        # Whoever waits for this read gets the failure a read of their own would have given.
        except BaseException as exc:
            in_flight.error = exc
            raise
        finally:
            with self._lock:
                self._reads.pop(key, None)
            in_flight.done.set()

    def put(self, key: K, value: V, *, read_at: float | None = None) -> None:
        """Record a value read at `read_at` (now if not given), unless a newer one is kept or
        the key was forgotten after that read started."""
        read_at = self._clock() if read_at is None else read_at
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[1] > read_at:
                return
            if self._forgotten.get(key, -float("inf")) > read_at:
                return
            self._entries[key] = (value, read_at)

    def forget(self, key: K) -> None:
        """Drop the value: the next caller reads afresh, and reads already under way are not
        kept."""
        with self._lock:
            self._entries.pop(key, None)
            self._forgotten[key] = self._clock()


class WhenDue:
    """Work done again once it is due, by one caller at a time: the very first call waits for it
    (there is nothing to go on with yet); later callers, before it is due or while another caller
    does it, go on at once with what the last run left. The work sets `due_at`."""

    def __init__(self) -> None:
        self.due_at: float | None = None  # None: never done
        self._running = threading.Lock()

    def run(self, now: float, work: Callable[[float], None]) -> None:
        first = self.due_at is None
        if self.due_at is not None and now < self.due_at:
            return
        if not self._running.acquire(blocking=first):
            return
        try:
            if self.due_at is None or now >= self.due_at:
                work(now)
        finally:
            self._running.release()
