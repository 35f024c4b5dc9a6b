"""The candidate pool's logic on an in-memory stand-in for Firestore (fast, no emulator)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from shared.claims.candidate_pool import RANGE_COUNT, CandidatePool, Exhausted, PoolTimeout
from shared.coupons.store import Candidate

READ_AT = datetime(2026, 1, 1, tzinfo=UTC)


class FakeCoupons:
    """Unassigned coupons by random_float, answering range queries like the real one."""

    def __init__(self, count: int, seed: int = 7) -> None:
        rng = random.Random(seed)
        self.free = {f"c{i}": rng.random() for i in range(count)}
        self.lock = threading.Lock()
        self.queries: list[tuple[float, bool, float]] = []

    def fetch(self, low: float, inclusive: bool, high: float, limit: int) -> list[Candidate]:
        with self.lock:
            self.queries.append((low, inclusive, high))
            hits = sorted(
                (rf, cid)
                for cid, rf in self.free.items()
                if (rf >= low if inclusive else rf > low) and rf < high
            )[:limit]
        return [Candidate(coupon_id=c, code=c, random_float=rf, read_at=READ_AT) for rf, c in hits]

    def assign(self, coupon_id: str) -> bool:
        with self.lock:
            return self.free.pop(coupon_id, None) is not None


def _never(*_: object) -> Sequence[Candidate] | Exhausted:
    raise AssertionError("prove must not run while codes are free")


def _deadline() -> float:
    return time.monotonic() + 5


def test_concurrent_takers_get_distinct_candidates_until_all_are_used() -> None:
    coupons = FakeCoupons(500)
    pool = CandidatePool(fetch=coupons.fetch, refill_size=16)
    pool.observe_generation(0)
    taken: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        while True:
            candidate = pool.take(deadline=_deadline(), prove=lambda: Exhausted.SOLD_OUT)
            if candidate is None:
                return
            assert coupons.assign(candidate.coupon_id)
            pool.settle(candidate)
            with lock:
                taken.append(candidate.coupon_id)

    with ThreadPoolExecutor(16) as ex:
        for f in [ex.submit(worker) for _ in range(16)]:
            f.result()

    assert len(taken) == len(set(taken)) == 500
    assert pool.sold_out


def test_each_coupon_is_read_once_thanks_to_range_floors() -> None:
    coupons = FakeCoupons(300)
    pool = CandidatePool(fetch=coupons.fetch, refill_size=10)
    pool.observe_generation(0)
    reads = 0
    original = coupons.fetch

    def counting_fetch(low: float, inclusive: bool, high: float, limit: int) -> list[Candidate]:
        nonlocal reads
        found = original(low, inclusive, high, limit)
        reads += len(found)
        return found

    pool.fetch = counting_fetch
    while (c := pool.take(deadline=_deadline(), prove=lambda: Exhausted.SOLD_OUT)) is not None:
        coupons.assign(c.coupon_id)
        pool.settle(c)

    assert reads == 300
    # Queries: ~300/10 fills plus one empty answer per range to learn it is drained.
    assert len(coupons.queries) <= 300 // 10 + 2 * RANGE_COUNT


def test_a_released_candidate_goes_to_the_next_taker() -> None:
    coupons = FakeCoupons(1)
    pool = CandidatePool(fetch=coupons.fetch, refill_size=4)
    pool.observe_generation(0)

    first = pool.take(deadline=_deadline(), prove=_never)
    assert first is not None
    pool.release(first)
    second = pool.take(deadline=_deadline(), prove=_never)

    assert second == first


def test_a_taker_waits_for_in_flight_candidates_instead_of_declaring_sold_out() -> None:
    coupons = FakeCoupons(1)
    pool = CandidatePool(fetch=coupons.fetch, refill_size=4)
    pool.observe_generation(0)
    in_flight = pool.take(deadline=_deadline(), prove=_never)
    assert in_flight is not None

    # The commit of the in-flight candidate fails (say the shopper already held a code).
    threading.Timer(0.1, pool.release, args=(in_flight,)).start()
    again = pool.take(deadline=_deadline(), prove=_never)

    assert again == in_flight


def test_prove_runs_once_and_sold_out_sticks_until_new_codes() -> None:
    coupons = FakeCoupons(0)
    pool = CandidatePool(fetch=coupons.fetch, refill_size=4)
    pool.observe_generation(3)
    proofs = 0

    def prove() -> Exhausted:
        nonlocal proofs
        proofs += 1
        return Exhausted.SOLD_OUT

    assert pool.take(deadline=_deadline(), prove=prove) is None
    assert pool.take(deadline=_deadline(), prove=prove) is None
    assert proofs == 1

    coupons.free["new"] = 0.5
    pool.observe_generation(4)  # an import bumped the campaign
    fresh = pool.take(deadline=_deadline(), prove=prove)
    assert fresh is not None
    assert fresh.coupon_id == "new"


def test_look_again_rescans_after_an_import_landed_during_the_proof() -> None:
    coupons = FakeCoupons(0)
    pool = CandidatePool(fetch=coupons.fetch, refill_size=4)
    pool.observe_generation(0)

    def prove() -> Exhausted:
        # The import lands between the range scan and the guarded sold-out write.
        coupons.free["late"] = 0.25
        pool.observe_generation(1)
        return Exhausted.LOOK_AGAIN

    candidate = pool.take(deadline=_deadline(), prove=prove)

    assert candidate is not None
    assert candidate.coupon_id == "late"


def test_codes_missed_by_the_ranges_are_found_by_the_proof() -> None:
    coupons = FakeCoupons(0)
    pool = CandidatePool(fetch=coupons.fetch, refill_size=4)
    pool.observe_generation(0)
    stray = Candidate(coupon_id="stray", code="stray", random_float=0.5, read_at=READ_AT)

    candidate = pool.take(deadline=_deadline(), prove=lambda: [stray])

    assert candidate == stray


def test_take_gives_up_at_the_deadline_while_a_refill_is_stuck() -> None:
    release = threading.Event()

    def slow_fetch(low: float, inclusive: bool, high: float, limit: int) -> list[Candidate]:
        release.wait(5)
        return []

    pool = CandidatePool(fetch=slow_fetch, refill_size=4)
    pool.observe_generation(0)
    stuck = threading.Thread(
        target=lambda: pool.take(deadline=_deadline(), prove=lambda: Exhausted.SOLD_OUT)
    )
    stuck.start()
    time.sleep(0.05)

    with pytest.raises(PoolTimeout):
        pool.take(deadline=time.monotonic() + 0.1, prove=_never)
    release.set()
    stuck.join()


def test_a_run_of_candidates_taken_elsewhere_flushes_the_pool() -> None:
    coupons = FakeCoupons(100)
    coupons.free = {k: v / 10 for k, v in coupons.free.items()}  # all in one range: one query
    pool = CandidatePool(fetch=coupons.fetch, refill_size=100)
    pool.observe_generation(0)
    first = pool.take(deadline=_deadline(), prove=_never)
    assert first is not None
    assert coupons.assign(first.coupon_id)
    pool.settle(first)
    # Another instance worked the same range first: it took the next 60 in the same order.
    for coupon_id in sorted(coupons.free, key=coupons.free.__getitem__)[:60]:
        coupons.assign(coupon_id)

    seen_stale = 0
    while True:
        candidate = pool.take(deadline=_deadline(), prove=lambda: Exhausted.SOLD_OUT)
        if candidate is None:
            break
        if coupons.assign(candidate.coupon_id):
            pool.settle(candidate)
        else:
            seen_stale += 1
            pool.settle(candidate, taken_elsewhere=True)

    assert pool.metrics.flushes >= 1
    assert seen_stale < 60  # the flush spared the rest of the stale candidates
    assert not coupons.free
