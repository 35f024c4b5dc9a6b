"""Pacers: acquisitions start evenly spaced at a rate, with no burst, and the caller sleeps
until its turn. A job's writes (Firestore's ramp) and a webhook endpoint's requests use them."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Protocol


class WriteLimiter(Protocol):
    def acquire(self, cost: float = 1, *, deadline: float = math.inf) -> bool:
        """Block until `cost` may start; False, having waited for nothing, if that would be
        after `deadline` (the limiter's clock)."""
        ...


class Pacer:
    """An acquisition of `cost` keeps the next one at least cost / rate seconds after its start.
    Shared by threads. A start is recorded when its thread is let go, so one that overslept
    never lets the next start early."""

    def __init__(
        self,
        rate: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._rate = rate
        self._clock = clock
        self._sleep = sleep
        self._opens = -math.inf
        self._lock = threading.Lock()

    @property
    def rate(self) -> float:
        return self._rate

    def acquire(self, cost: float = 1, *, deadline: float = math.inf) -> bool:
        while True:
            with self._lock:
                now = self._clock()
                opens = self._opens
                if now >= opens:
                    self._opens = now + cost / self.rate
                    return True
                if opens > deadline:
                    return False
            self._sleep(opens - now)


class Ramp(Pacer):
    """Firestore's 500/50/5 rule for new write traffic: `initial` a second, `growth` times more
    every `period_seconds`. `elapsed` is how long the ramp has already run (a retried job
    continues it)."""

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
        super().__init__(initial, clock=clock, sleep=sleep)
        self._growth, self._period = growth, period_seconds
        self._started = clock() - max(elapsed, 0.0)

    @property
    def rate(self) -> float:
        steps = int((self._clock() - self._started) // self._period)
        return float(self._rate * self._growth**steps)


class Unlimited:
    def acquire(self, cost: float = 1, *, deadline: float = math.inf) -> bool:
        return True
