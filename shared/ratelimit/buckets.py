"""Token buckets, one per key, each holding this instance's share of a limit over all instances.

A limit of `per_minute` with a burst of `burst` is split evenly among the `instances` serving it:
each instance's bucket refills at per_minute / instances and holds burst / instances (at least
one request). If every instance knows the count, whatever way a caller's requests are spread
over them, they pass at most burst' + per_minute * T / 60 in any T seconds (burst' = the burst,
or one per instance when that is more). A caller whose requests all reach one instance gets only
that instance's share: the price of deciding without talking to the others.

Memory is bounded: at most `max_keys` buckets, the least recently used dropped first. A bucket
left alone for burst / rate seconds is full, which is what a dropped bucket comes back as, so
dropping costs the limit nothing unless more than `max_keys` keys are busy at once.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limit:
    per_minute: float
    burst: float


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class TokenBuckets:
    """This instance's buckets for one limit. Thread-safe."""

    def __init__(self, limit: Limit, *, max_keys: int) -> None:
        self.limit = limit
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self.lock = threading.Lock()

    def _shape(self, instances: int) -> tuple[float, float]:
        """(tokens a second, capacity) of this instance's share."""
        share = max(1, instances)
        return self.limit.per_minute / 60 / share, max(1.0, self.limit.burst / share)

    def _refilled(self, key: str, now: float, instances: int) -> _Bucket:
        """The key's bucket brought up to `now` (caller holds the lock)."""
        rate, capacity = self._shape(instances)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(tokens=capacity, at=now)
            if len(self._buckets) > self._max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
            # A clock that steps back refills nothing.
            bucket.tokens = min(capacity, bucket.tokens + max(0.0, now - bucket.at) * rate)
            bucket.at = max(bucket.at, now)
        return bucket

    def wait(self, key: str, *, instances: int, now: float) -> float:
        """Seconds until `key` may pass (0: now). Caller holds the lock."""
        bucket = self._refilled(key, now, instances)
        if bucket.tokens >= 1:
            return 0.0
        rate, _ = self._shape(instances)
        return (1 - bucket.tokens) / rate

    def spend(self, key: str) -> None:
        """Take a token from `key`'s bucket, brought up to date by `wait` under the same lock."""
        self._buckets[key].tokens -= 1

    def __len__(self) -> int:
        return len(self._buckets)


def take(checks: Sequence[tuple[TokenBuckets, str]], *, instances: int, now: float) -> int | None:
    """Let one request pass every (buckets, key) of `checks`, or none: None when it passes (a
    token taken from each), else the whole seconds to wait (at least 1). No bucket is charged
    for a refused request, so a caller who keeps retrying too soon is let in as soon as the
    limit allows, not later."""
    locks = sorted({id(b.lock): b.lock for b, _ in checks}.items())
    for _, lock in locks:
        lock.acquire()
    try:
        wait = max(buckets.wait(key, instances=instances, now=now) for buckets, key in checks)
        if wait > 0:
            return max(1, math.ceil(wait))
        for buckets, key in checks:
            buckets.spend(key)
        return None
    finally:
        for _, lock in reversed(locks):
            lock.release()
