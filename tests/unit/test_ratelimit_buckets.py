"""Token buckets (shared/ratelimit/buckets.py), given the time: one bucket's burst and refill,
and per-key buckets holding an instance's share of a limit, so however a caller spreads requests
over the instances, no more than the limit passes."""

from __future__ import annotations

import random

import pytest

from shared.ratelimit.buckets import Limit, TokenBucket, TokenBuckets, try_acquire_all


def test_a_bucket_lets_its_burst_through_then_its_rate() -> None:
    bucket = TokenBucket(rate=2, burst=3, at=0.0)
    assert [bucket.try_acquire(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.wait(0.0) == pytest.approx(0.5)
    assert bucket.try_acquire(0.5)
    assert not bucket.try_acquire(0.5)
    # Left alone, it drains empty and lets a burst through again, no more.
    assert [bucket.try_acquire(100.0) for _ in range(4)] == [True, True, True, False]


def test_a_refused_request_charges_nothing() -> None:
    bucket = TokenBucket(rate=1, burst=1, at=0.0)
    assert bucket.try_acquire(0.0)
    for now in (0.2, 0.4, 0.6, 0.8):
        assert not bucket.try_acquire(now)
    assert bucket.try_acquire(1.0)


def test_what_passed_stays_counted_when_the_burst_changes() -> None:
    bucket = TokenBucket(rate=1, burst=4, at=5.0)
    assert [bucket.try_acquire(5.0) for _ in range(2)] == [True, True]
    bucket.burst = 2  # lowered: the two that passed fill it
    assert not bucket.try_acquire(5.0)
    assert bucket.wait(5.0) == pytest.approx(1.0)
    bucket.burst = 3  # raised: only the difference passes
    assert [bucket.try_acquire(5.0) for _ in range(2)] == [True, False]
    assert not bucket.try_acquire(4.0)  # a clock stepping back drains nothing


def buckets(per_minute: float, burst: float, *, max_keys: int = 1000) -> TokenBuckets:
    return TokenBuckets(Limit.per_minute(per_minute, burst=burst), max_keys=max_keys)


def take(checks: list[tuple[TokenBuckets, str]], *, instances: int, now: float) -> int | None:
    return try_acquire_all(checks, instances=instances, now=now)


def passed(instance: TokenBuckets, key: str, *, instances: int, now: float) -> bool:
    return take([(instance, key)], instances=instances, now=now) is None


def test_a_caller_gets_the_burst_then_the_rate() -> None:
    limiter = buckets(60, 6)
    at_once = [passed(limiter, "u", instances=1, now=0.0) for _ in range(10)]
    assert at_once == [True] * 6 + [False] * 4
    # One a second refills.
    assert passed(limiter, "u", instances=1, now=1.0)
    assert not passed(limiter, "u", instances=1, now=1.5)
    assert passed(limiter, "u", instances=1, now=2.0)


def test_a_refusal_says_how_long_to_wait_and_charges_nothing() -> None:
    limiter = buckets(6, 1)  # one every 10 s
    assert take([(limiter, "u")], instances=1, now=0.0) is None
    assert take([(limiter, "u")], instances=1, now=1.0) == 9
    assert take([(limiter, "u")], instances=1, now=9.5) == 1
    assert take([(limiter, "u")], instances=1, now=10.0) is None


def test_callers_and_addresses_are_separate_and_a_request_needs_both() -> None:
    callers, addresses = buckets(60, 2), buckets(60, 3)
    both = [
        take([(callers, user), (addresses, "1.2.3.4")], instances=1, now=0.0) is None
        for user in ["a", "a", "a", "b", "b"]
    ]
    # a: 2 (its own limit), the third refused without charging the address; b: 1 more
    # (the address's third).
    assert both == [True, True, False, True, False]


@pytest.mark.parametrize("instances", [1, 2, 4, 8])
@pytest.mark.parametrize("spread", ["even", "random", "one"])
def test_over_instances_a_caller_never_gets_more_than_the_bound(
    instances: int, spread: str
) -> None:
    """1,000 requests a minute for 3 minutes over `instances` instances, each with its own
    buckets: at most max(burst, n) + the limit per minute pass, however they are spread."""
    per_minute, burst = 60, 6
    shares = [buckets(per_minute, burst) for _ in range(instances)]
    rng = random.Random(instances)
    through = 0
    seconds = 180.0
    sent = int(1000 * seconds / 60)
    for n in range(sent):
        now = n * seconds / sent
        index = {"even": n % instances, "random": rng.randrange(instances), "one": 0}[spread]
        through += passed(shares[index], "guesser", instances=instances, now=now)
    bound = max(burst, instances) + per_minute * seconds / 60
    assert through <= bound
    if spread != "one":
        assert through >= 0.9 * per_minute * seconds / 60  # and the limit is not starved


def test_memory_is_bounded_and_an_evicted_bucket_comes_back_with_its_burst() -> None:
    limiter = buckets(60, 1, max_keys=100)
    for n in range(1000):
        assert passed(limiter, f"k{n}", instances=1, now=float(n) / 1000)
    assert len(limiter) == 100


def test_a_clock_stepping_back_refills_nothing() -> None:
    limiter = buckets(60, 1)
    assert passed(limiter, "u", instances=1, now=100.0)
    assert not passed(limiter, "u", instances=1, now=50.0)
    assert not passed(limiter, "u", instances=1, now=100.5)


def test_an_instance_that_learns_of_others_shrinks_to_its_share_at_once() -> None:
    limiter = buckets(60, 6)
    assert passed(limiter, "u", instances=1, now=0.0)
    # Two instances now: this one's share is 3, of which the first request took one, and it
    # drains at 0.5 a second.
    assert [passed(limiter, "u", instances=2, now=0.0) for _ in range(3)] == [True, True, False]
    assert take([(limiter, "u")], instances=2, now=0.5) == 2
