"""The retry schedule (exponential backoff with jitter, 24 hours) and the per-endpoint throttle,
on fake clocks."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore

from shared.webhooks.delivery import (
    SPACING_MARGIN,
    Attempt,
    RetryPolicy,
    endpoint_pacer,
    outcome_fields,
)
from shared.webhooks.models import DeliveryRecord, DeliveryState
from tests.support.fake_time import FakeTime

CREATED = datetime(2026, 11, 27, 10, 0, tzinfo=UTC)
POLICY = RetryPolicy(base_seconds=10)


def pending_delivery(attempts: int = 0, *, at: datetime = CREATED) -> DeliveryRecord:
    """A coupon.claimed delivery created and due `at`, tried `attempts` times."""
    return DeliveryRecord(
        event_id="claimed.c.1",
        event_type="coupon.claimed",
        body='{"event_id":"claimed.c.1"}',
        state=DeliveryState.PENDING,
        attempts=attempts,
        created_at=at,
        due_at=at,
    )


@pytest.mark.parametrize(
    ("attempts", "full"),
    [(1, 10), (2, 20), (3, 40), (6, 320), (9, 2560), (10, 3600), (30, 3600)],
)
def test_each_failure_waits_between_half_and_all_of_a_doubling_delay(
    attempts: int, full: float
) -> None:
    rng = random.Random(attempts)
    delays = [POLICY.delay(attempts, rng) for _ in range(500)]

    assert full / 2 <= min(delays)
    assert max(delays) <= full
    assert max(delays) - min(delays) > full / 4  # jittered: retries of one burst spread out


def test_a_2xx_delivers_and_leaves_the_queue() -> None:
    fields = outcome_fields(pending_delivery(), Attempt(204, None), now=CREATED, policy=POLICY)

    assert fields["state"] == DeliveryState.DELIVERED
    assert fields["due_at"] is firestore.DELETE_FIELD
    assert (fields["attempts"], fields["last_status"], fields["last_error"]) == (1, 204, None)


@pytest.mark.parametrize(
    "attempt",
    [Attempt(500, None), Attempt(302, None), Attempt(None, "timeout")],
    ids=["500", "redirect", "timeout"],
)
def test_anything_else_is_retried_later(attempt: Attempt) -> None:
    now = CREATED + timedelta(seconds=1)
    fields = outcome_fields(
        pending_delivery(), attempt, now=now, policy=POLICY, rng=random.Random(1)
    )

    assert fields["state"] == DeliveryState.RETRYING
    assert now + timedelta(seconds=5) <= fields["due_at"] <= now + timedelta(seconds=10)
    assert fields["last_error"] == (attempt.error or f"HTTP {attempt.status}")


def test_a_delivery_failing_for_24_hours_is_marked_failed() -> None:
    """Follow one delivery whose endpoint never answers 2xx, attempt after attempt."""
    rng = random.Random(7)
    delivery, now, attempts_at = pending_delivery(), CREATED, []
    while delivery.state in (DeliveryState.PENDING, DeliveryState.RETRYING):
        attempts_at.append(now)
        fields = outcome_fields(delivery, Attempt(503, None), now=now, policy=POLICY, rng=rng)
        due = fields["due_at"]
        delivery = delivery.model_copy(
            update={
                "state": fields["state"],
                "attempts": fields["attempts"],
                "due_at": None if due is firestore.DELETE_FIELD else due,
            }
        )
        now = delivery.due_at or now

    assert delivery.state == DeliveryState.FAILED
    assert attempts_at[-1] <= CREATED + timedelta(hours=24)
    assert attempts_at[-1] > CREATED + timedelta(hours=22)  # retried for about a day
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(attempts_at)]
    assert gaps[0] <= 10
    assert max(gaps) <= 3600
    assert 25 <= len(attempts_at) <= 45


def test_an_endpoints_pacer_spaces_starts_so_no_second_sees_more_than_its_rate() -> None:
    time = FakeTime()
    pacer = endpoint_pacer(5, clock=time.clock, sleep=time.sleep)
    starts = []
    for _ in range(23):
        assert pacer.acquire(deadline=time.now + 60)
        starts.append(time.now)
        time.now += 0.01  # the request itself

    for i, start in enumerate(starts):
        assert sum(1 for s in starts[i:] if s < start + 1.0) <= 5
    assert starts[-1] - starts[0] == pytest.approx(22 * 0.2 * SPACING_MARGIN)
