"""Pacers (shared/ratelimit/pacing.py) on a fake clock: evenly spaced starts sized by their cost,
a deadline that refuses without waiting, threads that never start closer than the rate allows,
and Firestore's write ramp."""

from __future__ import annotations

import threading
import time

import pytest

from shared.ratelimit.pacing import Pacer, Ramp, Unlimited, WriteLimiter
from tests.support.fake_time import FakeTime


def test_starts_are_spaced_by_their_cost_over_the_rate() -> None:
    fake = FakeTime()
    pacer = Pacer(10, clock=fake.clock, sleep=fake.sleep)
    starts = []
    for cost in (1, 5, 1, 1):
        assert pacer.acquire(cost)
        starts.append(fake.now - 1000.0)
    # The first at once; a start of 5 keeps the next half a second away.
    assert starts == pytest.approx([0.0, 0.1, 0.6, 0.7])


def test_a_start_after_the_deadline_is_refused_without_waiting() -> None:
    fake = FakeTime()
    pacer = Pacer(2, clock=fake.clock, sleep=fake.sleep)

    assert pacer.acquire(deadline=fake.now + 0.25)
    assert not pacer.acquire(deadline=fake.now + 0.25)  # the next start is 0.5 s away
    assert fake.now == 1000.0
    assert pacer.acquire(deadline=fake.now + 1)
    assert fake.now == pytest.approx(1000.5)


def test_a_late_start_pushes_the_next_one_back() -> None:
    fake = FakeTime()
    pacer = Pacer(4, clock=fake.clock, sleep=fake.sleep)
    assert pacer.acquire()
    fake.now += 1.0  # nobody asked for a second
    assert pacer.acquire()
    assert pacer.acquire()
    # No burst for the idle second: the third came a quarter second after the second.
    assert fake.now == pytest.approx(1001.25)


def test_threads_sharing_a_pacer_start_one_after_another_at_its_rate() -> None:
    pacer = Pacer(200)
    starts: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def sender() -> None:
        barrier.wait()  # all four ask at once
        for _ in range(10):
            assert pacer.acquire()
            with lock:
                starts.append(time.monotonic())

    threads = [threading.Thread(target=sender) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    starts.sort()
    assert len(starts) == 40
    # Recorded after the pacer let each go, so a gap can only be wider than 1/200 s, give or
    # take the moment between a release and its time stamp.
    assert starts[-1] - starts[0] >= 39 / 200 * 0.9


def test_the_ramp_grows_by_half_every_five_minutes_and_a_retry_continues_it() -> None:
    fake = FakeTime()
    ramp = Ramp(clock=fake.clock, sleep=fake.sleep)
    assert ramp.rate == 500
    fake.now += 299
    assert ramp.rate == 500
    fake.now += 1
    assert ramp.rate == 750
    assert Ramp(elapsed=11 * 60, clock=fake.clock).rate == 500 * 1.5**2


def test_the_ramp_paces_batches_of_writes() -> None:
    fake = FakeTime()
    ramp = Ramp(clock=fake.clock, sleep=fake.sleep)
    for _ in range(3):
        ramp.acquire(250)
    assert fake.now == pytest.approx(1001.0)  # 750 writes at 500 a second: the third at 1 s


def test_every_write_limiter_has_the_same_shape() -> None:
    limiters: list[WriteLimiter] = [Pacer(1), Ramp(), Unlimited()]
    assert all(limiter.acquire(1, deadline=time.monotonic() + 60) for limiter in limiters)
