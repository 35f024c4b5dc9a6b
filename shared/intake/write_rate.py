"""The 500/50/5 ramp Firestore asks of new write traffic, as a blocking rate limiter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class RampLimiter:
    """Allows `initial` writes/s, growing by 50% every 5 minutes; `acquire` blocks as needed.

    `elapsed` is how long the ramp has already run (a retried import attempt continues it)."""

    def __init__(
        self,
        *,
        initial: float = 500.0,
        growth: float = 1.5,
        period_seconds: float = 300.0,
        elapsed: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._initial, self._growth, self._period = initial, growth, period_seconds
        self._clock, self._sleep = clock, sleep
        self._started = clock() - max(elapsed, 0.0)
        self._next_free = clock()
        self._lock = threading.Lock()

    def rate(self) -> float:
        steps = int((self._clock() - self._started) // self._period)
        return float(self._initial * self._growth**steps)

    def acquire(self, writes: int) -> None:
        with self._lock:
            now = self._clock()
            start = max(now, self._next_free)
            self._next_free = start + writes / self.rate()
        if start > now:
            self._sleep(start - now)


class Unlimited:
    def acquire(self, writes: int) -> None:
        return None
