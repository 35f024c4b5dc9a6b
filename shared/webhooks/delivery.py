"""Sending deliveries to one endpoint: the retry schedule, the per-endpoint throttle, one signed
attempt, and a drain run that empties the endpoint's queue of due deliveries under its lease.

One drain run per endpoint at a time (the lease in store.py), each with its own HTTP client,
thread pool and pacer: a slow or dead endpoint holds only its own run, never another
endpoint's deliveries, and never a claim (claims are another function).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx
from google.cloud import firestore

from shared.ratelimit.pacing import Pacer
from shared.webhooks import store
from shared.webhooks.guard import AddressRefused
from shared.webhooks.models import DeliveryRecord, DeliveryState
from shared.webhooks.signing import SIGNATURE_HEADER, signature

log = logging.getLogger(__name__)

MAX_AGE = timedelta(hours=24)
RETRY_CAP_SECONDS = 3600.0
# An endpoint is taken for down after this many failed attempts in a row; its run stops and
# it cools down (the same schedule as a delivery's retries) before the next run.
DOWN_AFTER_FAILURES = 5
ROUND_SIZE = 100


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter: the n-th failed attempt waits between half and all of
    min(base * 2^(n-1), cap); a delivery is failed once its next attempt would fall more than
    `max_age` after the event was recorded."""

    base_seconds: float
    cap_seconds: float = RETRY_CAP_SECONDS
    max_age: timedelta = MAX_AGE

    def delay(self, attempts: int, rng: random.Random | None = None) -> float:
        full = min(self.base_seconds * 2.0 ** min(max(attempts, 1) - 1, 60), self.cap_seconds)
        return full / 2 + (rng or random).uniform(0, full / 2)

    def expired(self, created_at: datetime, at: datetime) -> bool:
        return at > created_at + self.max_age


# Starts are SPACING_MARGIN / max_per_second apart, so any max_per_second + 1 of them span 1.05 s:
# the receiver counts at most max_per_second in any second even when one request reaches it up
# to 50 ms late (threads, network jitter).
SPACING_MARGIN = 1.05


def endpoint_pacer(
    max_per_second: int,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Pacer:
    """A run's throttle, shared by its threads: evenly spaced starts rather than bursts of
    `max_per_second`, so the endpoint sees a steady flow."""
    return Pacer(max_per_second / SPACING_MARGIN, clock=clock, sleep=sleep)


@dataclass(frozen=True)
class Endpoint:
    """A webhook as a drain run needs it: where, the opened secret, the limits."""

    webhook_id: str
    url: str
    secret: str
    max_per_second: int
    max_in_flight: int


@dataclass(frozen=True)
class Attempt:
    status: int | None  # None: no HTTP answer (timeout, refused, connection error)
    error: str | None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def attempt(client: httpx.Client, endpoint: Endpoint, delivery: DeliveryRecord) -> Attempt:
    """POST the event's JSON, signed now. Only the status is read, never the answer's body."""
    body = delivery.body.encode()
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature(endpoint.secret, body, timestamp=int(time.time())),
        "X-Codedrop-Event-Id": delivery.event_id,
        "X-Codedrop-Event-Type": delivery.event_type,
        "X-Codedrop-Webhook-Id": endpoint.webhook_id,
        "X-Codedrop-Attempt": str(delivery.attempts + 1),
    }
    try:
        with client.stream("POST", endpoint.url, content=body, headers=headers) as response:
            return Attempt(status=response.status_code, error=None)
    except AddressRefused as exc:
        return Attempt(status=None, error=f"refused: {exc}")
    except httpx.TimeoutException:
        return Attempt(status=None, error="timeout")
    except httpx.HTTPError as exc:
        return Attempt(status=None, error=f"{type(exc).__name__}: {exc}"[:300])


def outcome_fields(
    delivery: DeliveryRecord,
    result: Attempt,
    *,
    now: datetime,
    policy: RetryPolicy,
    rng: random.Random | None = None,
) -> dict[str, Any]:
    """What the delivery document becomes after an attempt."""
    attempts = delivery.attempts + 1
    fields: dict[str, Any] = {
        "attempts": attempts,
        "last_status": result.status,
        "last_error": None if result.ok else (result.error or f"HTTP {result.status}"),
        "last_attempt_at": now,
    }
    if result.ok:
        return fields | {"state": DeliveryState.DELIVERED.value, "due_at": firestore.DELETE_FIELD}
    due = now + timedelta(seconds=policy.delay(attempts, rng))
    if policy.expired(delivery.created_at, due):
        return fields | {"state": DeliveryState.FAILED.value, "due_at": firestore.DELETE_FIELD}
    return fields | {"state": DeliveryState.RETRYING.value, "due_at": due}


def expired_fields(delivery: DeliveryRecord) -> dict[str, Any]:
    """A delivery whose 24 hours ran out while its endpoint was cooling down."""
    return {
        "state": DeliveryState.FAILED.value,
        "due_at": firestore.DELETE_FIELD,
        "last_error": delivery.last_error or "expired before an attempt",
    }


@dataclass
class RunReport:
    attempted: int = 0
    delivered: int = 0
    failed: int = 0  # gave up for good
    endpoint_down: bool = False

    def add(self, other: RunReport) -> None:
        self.attempted += other.attempted
        self.delivered += other.delivered
        self.failed += other.failed
        self.endpoint_down = self.endpoint_down or other.endpoint_down


@dataclass
class _Streak:
    """Failed attempts in a row across a run's threads."""

    failures: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, ok: bool) -> None:
        with self.lock:
            self.failures = 0 if ok else self.failures + 1

    @property
    def down(self) -> bool:
        return self.failures >= DOWN_AFTER_FAILURES


@dataclass(kw_only=True, eq=False)
class DrainRun:
    """Drains one endpoint's due deliveries until none is left (and none came for `linger`
    seconds) or `deadline` (time.monotonic) passes; the caller holds the lease."""

    db: firestore.Client
    endpoint: Endpoint
    client: httpx.Client
    policy: RetryPolicy
    clock: Callable[[], datetime]
    deadline: float
    linger: float
    still_subscribed: Callable[[], bool]
    report: RunReport = field(init=False, default_factory=RunReport)

    def __post_init__(self) -> None:
        self._pacer = endpoint_pacer(self.endpoint.max_per_second)
        self._streak = _Streak()

    def run(self) -> RunReport:
        idle_since: float | None = None
        with ThreadPoolExecutor(
            self.endpoint.max_in_flight, thread_name_prefix=f"webhook-{self.endpoint.webhook_id}"
        ) as pool:
            while time.monotonic() < self.deadline and not self._streak.down:
                due = store.due_deliveries(
                    self.db,
                    webhook_id=self.endpoint.webhook_id,
                    now=self.clock(),
                    limit=ROUND_SIZE,
                )
                if not due:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since >= self.linger:
                        break
                    time.sleep(min(0.2, self.linger))
                    continue
                idle_since = None
                if not self.still_subscribed():
                    break
                self._round(pool, due)
        self.report.endpoint_down = self._streak.down
        return self.report

    def _round(self, pool: ThreadPoolExecutor, due: Iterable[DeliveryRecord]) -> None:
        updates: list[tuple[str, dict[str, Any]]] = []
        for done in pool.map(self._one, due):
            if done is None:
                continue
            event_id, fields, attempted = done
            updates.append((event_id, fields))
            self.report.attempted += attempted
            self.report.delivered += fields["state"] == DeliveryState.DELIVERED.value
            self.report.failed += fields["state"] == DeliveryState.FAILED.value
        store.save_attempts(self.db, webhook_id=self.endpoint.webhook_id, updates=updates)

    def _one(self, delivery: DeliveryRecord) -> tuple[str, dict[str, Any], bool] | None:
        if self.policy.expired(delivery.created_at, self.clock()):
            return delivery.event_id, expired_fields(delivery), False
        if self._streak.down or not self._pacer.acquire(deadline=self.deadline):
            return None  # left due for the next run
        result = attempt(self.client, self.endpoint, delivery)
        self._streak.note(result.ok)
        fields = outcome_fields(delivery, result, now=self.clock(), policy=self.policy)
        if not result.ok:
            log.info(
                "webhook delivery failed",
                extra={
                    "webhook_id": self.endpoint.webhook_id,
                    "event_id": delivery.event_id,
                    "status": result.status,
                    "error": result.error,
                    "attempts": fields["attempts"],
                },
            )
        return delivery.event_id, fields, True
