"""Token buckets: one (`TokenBucket`), and one per key holding this instance's share of a limit
over all instances (`TokenBuckets`).

The time is an argument, never read here, so a simulation or a test drives them on a virtual
clock.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(slots=True)
class TokenBucket:
    """Lets a request through while fewer than `burst` have passed and not yet drained at `rate`
    a second. Kept as its level (the leaky-bucket form of the same algorithm), so what passed
    recently stays counted when `rate` or `burst` change: a lowered burst holds at once, a
    raised one lets only the difference through. Starts empty. Not thread-safe: its owner holds
    a lock."""

    rate: float
    burst: float
    at: float
    level: float = 0.0

    def _drain(self, now: float) -> None:
        # A clock that steps back drains nothing (concurrent callers read it a moment apart).
        if now > self.at:
            self.level = max(0.0, self.level - (now - self.at) * self.rate)
            self.at = now

    def wait(self, now: float) -> float:
        """Seconds until a request may pass (0: now)."""
        self._drain(now)
        over = self.level + 1 - self.burst
        return 0.0 if over <= 0 else over / self.rate

    def try_acquire(self, now: float) -> bool:
        """Let one request through if there is room; a refusal charges nothing."""
        self._drain(now)
        if self.level + 1 <= self.burst:
            self.level += 1
            return True
        return False


@dataclass(frozen=True, slots=True)
class Limit:
    rate: float  # a second, over all instances
    burst: float

    @classmethod
    def per_minute(cls, requests: float, *, burst: float) -> Limit:
        return cls(rate=requests / 60, burst=burst)


class TokenBuckets:
    """This instance's buckets for one limit, one per key. Thread-safe (`lock`).

    Each of the `instances` serving the limit refills at rate / instances and holds
    burst / instances (at least one request). If every instance knows the count, however a
    caller's requests are spread, at most max(burst, instances) + rate * T pass in any T
    seconds; a caller whose requests all reach one instance gets only that instance's share,
    the price of deciding without talking to the others.

    At most `max_keys` buckets, the least recently used dropped first: a bucket left alone for
    burst / rate seconds is empty, which is what a dropped one comes back as, so dropping costs
    the limit nothing unless more than `max_keys` keys are busy at once.
    """

    def __init__(self, limit: Limit, *, max_keys: int) -> None:
        self.limit = limit
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._shape = (0, limit.rate, limit.burst)  # (instances, rate, burst) last used
        self.lock = threading.Lock()

    def bucket(self, key: str, *, instances: int, now: float) -> TokenBucket:
        """`key`'s bucket, shaped to this instance's share (caller holds the lock)."""
        share = max(1, instances)
        if self._shape[0] != share:
            self._shape = (share, self.limit.rate / share, max(1.0, self.limit.burst / share))
        _, rate, burst = self._shape
        found = self._buckets.get(key)
        if found is None:
            found = self._buckets[key] = TokenBucket(rate=rate, burst=burst, at=now)
            if len(self._buckets) > self._max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
            found.rate, found.burst = rate, burst
        return found

    def __len__(self) -> int:
        return len(self._buckets)


def try_acquire_all(
    checks: Sequence[tuple[TokenBuckets, str]], *, instances: int, now: float
) -> int | None:
    """Let one request pass every (buckets, key) of `checks`, or none: None when it passed (a
    token taken from each), else the whole seconds to wait (at least 1). A refused request
    charges no bucket, so a caller who retries too soon is let in as soon as the limit allows."""
    locks = sorted({id(b.lock): b.lock for b, _ in checks}.items())
    for _, lock in locks:
        lock.acquire()
    try:
        buckets = [keyed.bucket(key, instances=instances, now=now) for keyed, key in checks]
        wait = max(bucket.wait(now) for bucket in buckets)
        if wait > 0:
            return max(1, math.ceil(wait))
        for bucket in buckets:
            bucket.try_acquire(now)
        return None
    finally:
        for _, lock in reversed(locks):
            lock.release()
