"""Recent reads: one re-read at a time, the others served what was read (pure logic, a clock
the test moves and reads the test holds open); WhenDue, the same for work done when due."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from shared.cache import RecentReads, WhenDue


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class GatedRead:
    """A read that returns `value` once the test opens the gate; counts its calls."""

    def __init__(self, value: str, *, fail: bool = False) -> None:
        self.value = value
        self.fail = fail
        self.calls = 0
        self.started = threading.Event()
        self.gate = threading.Event()

    def __call__(self) -> str:
        self.calls += 1
        self.started.set()
        assert self.gate.wait(5)
        if self.fail:
            raise RuntimeError("unavailable")
        return self.value


def _cache(clock: Clock, max_age: float = 0.5) -> RecentReads[str, str]:
    return RecentReads(max_age=max_age, clock=clock)


def test_a_value_younger_than_max_age_is_served_without_a_read() -> None:
    clock = Clock()
    cache = _cache(clock)
    cache.put("c", "v1")
    clock.now += 0.4
    assert cache.get("c", lambda: pytest.fail("read while fresh")) == "v1"


def test_while_one_caller_re_reads_the_others_are_served_the_value_they_had() -> None:
    clock, pool = Clock(), ThreadPoolExecutor(4)
    cache = _cache(clock)
    cache.put("c", "v1")
    clock.now += 0.7  # expired, but younger than twice max_age
    read = GatedRead("v2")
    leader: Future[str] = pool.submit(cache.get, "c", read)
    assert read.started.wait(5)

    others = [cache.get("c", lambda: pytest.fail("a second read")) for _ in range(20)]

    assert others == ["v1"] * 20
    read.gate.set()
    assert leader.result(5) == "v2"
    assert read.calls == 1
    assert cache.get("c", lambda: pytest.fail("read while fresh")) == "v2"


def test_past_twice_max_age_callers_wait_for_the_read_in_flight() -> None:
    clock, pool = Clock(), ThreadPoolExecutor(8)
    cache = _cache(clock)
    cache.put("c", "v1")
    clock.now += 1.5
    read = GatedRead("v2")
    leader = pool.submit(cache.get, "c", read)
    assert read.started.wait(5)
    followers = [
        pool.submit(cache.get, "c", lambda: pytest.fail("a second read")) for _ in range(5)
    ]
    assert not any(f.done() for f in followers)

    read.gate.set()

    assert [f.result(5) for f in [leader, *followers]] == ["v2"] * 6
    assert read.calls == 1


def test_callers_without_a_value_share_the_first_read_and_its_failure() -> None:
    clock, pool = Clock(), ThreadPoolExecutor(8)
    cache = _cache(clock)
    read = GatedRead("v1", fail=True)
    leader = pool.submit(cache.get, "c", read)
    assert read.started.wait(5)
    followers = [pool.submit(cache.get, "c", read) for _ in range(5)]

    read.gate.set()

    for future in [leader, *followers]:
        with pytest.raises(RuntimeError, match="unavailable"):
            future.result(5)
    assert read.calls == 1
    # Nothing was kept: the next caller reads again.
    assert cache.get("c", lambda: "v2") == "v2"


def test_a_slow_read_neither_replaces_a_newer_value_nor_brings_back_a_forgotten_one() -> None:
    clock, pool = Clock(), ThreadPoolExecutor(2)
    cache = _cache(clock)
    slow = GatedRead("old")
    leader = pool.submit(cache.get, "c", slow)
    assert slow.started.wait(5)
    clock.now += 0.1
    cache.put("c", "newer")  # a fresh read made elsewhere while the slow one was out
    slow.gate.set()
    assert leader.result(5) == "old"  # its caller gets what it read...
    assert cache.get("c", lambda: pytest.fail("read while fresh")) == "newer"  # ...not kept

    clock.now += 1.0
    slow = GatedRead("before the change")
    leader = pool.submit(cache.get, "c", slow)
    assert slow.started.wait(5)
    clock.now += 0.1
    cache.forget("c")  # e.g. the campaign was just marked sold out
    slow.gate.set()
    leader.result(5)
    assert cache.get("c", lambda: "after the change") == "after the change"


def test_with_max_age_zero_every_call_reads() -> None:
    cache = _cache(Clock(), max_age=0)
    values = iter(["v1", "v2", "v3"])
    assert [cache.get("c", lambda: next(values)) for _ in range(3)] == ["v1", "v2", "v3"]


# --- WhenDue: work done again once due, by one caller at a time ---------------------------------
def test_when_due_runs_only_once_due() -> None:
    runs: list[float] = []

    def work(now: float) -> None:
        runs.append(now)
        gate.due_at = now + 10

    gate = WhenDue()
    gate.run(100.0, work)
    gate.run(109.0, work)  # not due yet
    gate.run(110.0, work)
    assert runs == [100.0, 110.0]


def test_when_due_others_go_on_while_one_runs_and_a_failed_first_run_is_tried_again() -> None:
    def failing(now: float) -> None:
        raise RuntimeError("unavailable")

    gate = WhenDue()
    with pytest.raises(RuntimeError):
        gate.run(100.0, failing)
    assert gate.due_at is None  # nothing done yet: the next caller runs it again

    started, release = threading.Event(), threading.Event()

    def slow(now: float) -> None:
        started.set()
        assert release.wait(5)
        gate.due_at = now + 10

    gate.due_at = 90.0  # done once, due again
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(gate.run, 100.0, slow)
        assert started.wait(5)
        others: list[float] = []
        gate.run(100.0, others.append)  # returns at once: another caller is at it
        assert others == []
        release.set()
        running.result(5)
    assert gate.due_at == 110.0
