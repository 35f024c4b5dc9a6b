"""InFlight: batches on a few threads, results taken in submission order, a bounded queue, and
a batch's failure raised to the caller (pure logic, batches the test releases)."""

from __future__ import annotations

import functools
import threading

import pytest

from shared.gcp.in_flight import InFlight


def test_results_arrive_in_submission_order_whatever_order_batches_end_in() -> None:
    collected: list[int] = []
    batches = InFlight[int](4, name="test", collect=collected.append)
    gates = [threading.Event() for _ in range(4)]

    def batch(n: int) -> int:
        assert gates[n].wait(5)
        return n

    for n in range(4):
        batches.submit(functools.partial(batch, n))
    for gate in reversed(gates):
        gate.set()
    batches.drain()
    batches.stop()
    assert collected == [0, 1, 2, 3]


def test_a_full_queue_takes_the_oldest_result_before_taking_more() -> None:
    collected: list[int] = []
    batches = InFlight[int](1, name="test", collect=collected.append)
    for n in range(3):
        batches.submit(functools.partial(int, n))
    assert collected == [0]  # two may wait per thread: the third submit took the first result
    batches.drain()
    batches.stop()
    assert collected == [0, 1, 2]


def test_a_failed_batch_raises_where_its_result_is_taken() -> None:
    batches = InFlight[int](2, name="test", collect=lambda _: None)

    def failing() -> int:
        raise RuntimeError("commit failed")

    batches.submit(failing)
    with pytest.raises(RuntimeError, match="commit failed"):
        batches.drain()
    batches.stop()


def test_finish_runs_the_last_submit_takes_every_result_and_stops_even_on_a_failure() -> None:
    collected: list[int] = []
    batches = InFlight[int](2, name="test", collect=collected.append)
    batches.submit(functools.partial(int, 1))
    batches.finish(lambda: batches.submit(functools.partial(int, 2)))
    assert collected == [1, 2]
    with pytest.raises(RuntimeError, match="shut"):
        batches.submit(functools.partial(int, 3))  # stopped: the executor takes no more

    failing = InFlight[int](1, name="test", collect=lambda _: None)

    def fail() -> int:
        raise RuntimeError("commit failed")

    with pytest.raises(RuntimeError, match="commit failed"):
        failing.finish(lambda: failing.submit(fail))
    with pytest.raises(RuntimeError, match="shut"):
        failing.submit(functools.partial(int, 3))
