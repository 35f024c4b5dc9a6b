"""The candidate pool's logic on an in-memory stand-in for Firestore (fast, no emulator): one
pool, and several pools sharing one campaign as several instances would."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from shared.campaigns.segments import segment_id
from shared.claims import candidate_pool
from shared.claims.candidate_pool import MIN_REFILL, CandidatePool, Exhausted, PoolTimeout
from shared.coupons.store import Candidate
from shared.settings import Settings
from tests.support.fake_supply import FakeSupply


def _never(_: int) -> Sequence[Candidate] | Exhausted:
    raise AssertionError("prove must not run while codes are free")


def _deadline(seconds: float = 5) -> float:
    return time.monotonic() + seconds


SETTINGS = Settings(project_id="demo-codedrop-test")
REFILL_HORIZON_SECONDS = SETTINGS.pool_refill_seconds


def _pool(
    supply: FakeSupply, *, max_refill: int = 500, generation: int = 0, **tuning: float
) -> CandidatePool:
    settings = SETTINGS.model_copy(update={"pool_refill_size": max_refill, **tuning})
    pool = CandidatePool(supply=supply, settings=settings)
    pool.observe_generation(generation, codes_total=len(supply.free))
    return pool


def _prover(supply: FakeSupply) -> candidate_pool.Prove:
    """The engine's proof, on the stand-in: codes still free anywhere, or SOLD_OUT."""

    def prove(limit: int) -> Sequence[Candidate] | Exhausted:
        return supply.prove(limit) or Exhausted.SOLD_OUT

    return prove


class Shoppers:
    """Threads claiming through pools until told sold out; what each pool took recorded."""

    def __init__(self, supply: FakeSupply, pools: list[CandidatePool]) -> None:
        self.supply = supply
        self.pools = pools
        self.created: list[str] = []
        self.conflicts = 0
        self.taken_by: dict[int, list[str]] = {i: [] for i in range(len(pools))}
        self._lock = threading.Lock()

    def run(self, threads_per_pool: int) -> None:
        with ThreadPoolExecutor(len(self.pools) * threads_per_pool) as ex:
            futures = [
                ex.submit(self._shop, i)
                for i in range(len(self.pools))
                for _ in range(threads_per_pool)
            ]
            for future in futures:
                future.result()

    def _shop(self, index: int) -> None:
        pool, prove = self.pools[index], _prover(self.supply)
        while (candidate := pool.take(deadline=_deadline(), prove=prove)) is not None:
            with self._lock:
                self.taken_by[index].append(candidate.coupon_id)
            if self.supply.assign(candidate):
                pool.settle(candidate)
                with self._lock:
                    self.created.append(candidate.coupon_id)
            else:
                pool.settle(candidate, taken_elsewhere=True)
                with self._lock:
                    self.conflicts += 1


def test_concurrent_takers_get_distinct_candidates_until_all_are_used() -> None:
    supply = FakeSupply(500)
    pool = _pool(supply, max_refill=16)
    shoppers = Shoppers(supply, [pool])

    shoppers.run(threads_per_pool=16)

    assert len(shoppers.created) == len(set(shoppers.created)) == 500
    assert shoppers.conflicts == 0
    assert pool.sold_out


@pytest.mark.parametrize(("instances", "threads"), [(1, 8), (8, 2), (32, 1)])
def test_the_cost_of_the_supply_does_not_grow_with_instances(instances: int, threads: int) -> None:
    """Several instances share one campaign: each coupon is read by one instance (segments are
    leased, steals reserve what they read) but for races, so reads stay about one per code."""
    supply = FakeSupply(2000, latency=0.0005)
    pools = [_pool(supply) for _ in range(instances)]
    shoppers = Shoppers(supply, pools)

    shoppers.run(threads_per_pool=threads)

    assert sorted(shoppers.created) == sorted(supply.assigned)
    assert len(shoppers.created) == 2000
    assert not supply.free
    # Instances read disjoint coupons but for races with steals: a holder reading while a
    # steal reserves the top of its segment reads some of them too and drops them, and when
    # three steals in a row beat its record of progress it keeps a few (the commit decides).
    # Races need threads preempted mid-step, so a loaded machine sees more of them: 1 % when
    # quiet, up to 2 % at a load average of 10 (the claim benchmark measures the real figure).
    assert shoppers.conflicts <= 2000 * 0.03
    # Coupon documents plus segment queries, empty answers and guarded-write rereads (with
    # 2,000 codes over 256 segments, about eight codes a segment document).
    assert supply.bill.reads <= 2000 * 1.6
    assert all(pool.sold_out for pool in pools)


def test_refills_follow_the_demand_of_the_instance() -> None:
    supply = FakeSupply(3000)
    pool = _pool(supply)
    sizes: list[int] = []
    fetch = supply.fetch

    def sized(*, low: float, low_inclusive: bool, high: float, limit: int) -> list[Candidate]:
        sizes.append(limit)
        return fetch(low=low, low_inclusive=low_inclusive, high=high, limit=limit)

    supply.fetch = sized  # type: ignore[method-assign]
    # One shopper every 0.15 s: small reads.
    for _ in range(12):
        candidate = pool.take(deadline=_deadline(), prove=_never)
        assert candidate is not None
        assert supply.assign(candidate)
        pool.settle(candidate)
        time.sleep(0.15)
    alone = max(sizes)
    sizes.clear()
    # A crowd: the reads grow with it.
    Shoppers(supply, [pool]).run(threads_per_pool=64)

    # About what one shopper every 0.15 s takes over the refill horizon, nowhere near a crowd's.
    assert alone <= 2 * max(MIN_REFILL, REFILL_HORIZON_SECONDS / 0.15)
    assert max(sizes) >= 64


def test_a_released_candidate_goes_to_the_next_taker() -> None:
    supply = FakeSupply(1)
    pool = _pool(supply, max_refill=4)

    first = pool.take(deadline=_deadline(), prove=_never)
    assert first is not None
    pool.release(first)
    second = pool.take(deadline=_deadline(), prove=_never)

    assert second == first


def test_a_taker_waits_for_in_flight_candidates_instead_of_declaring_sold_out() -> None:
    supply = FakeSupply(1)
    pool = _pool(supply, max_refill=4)
    in_flight = pool.take(deadline=_deadline(), prove=_never)
    assert in_flight is not None

    # The commit of the in-flight candidate fails (say the shopper already held a code).
    threading.Timer(0.1, pool.release, args=(in_flight,)).start()
    again = pool.take(deadline=_deadline(), prove=_never)

    assert again == in_flight


def test_prove_runs_once_and_sold_out_sticks_until_new_codes() -> None:
    supply = FakeSupply(0)
    pool = _pool(supply, max_refill=4, generation=3)
    proofs = 0

    def prove(_: int) -> Exhausted:
        nonlocal proofs
        proofs += 1
        return Exhausted.SOLD_OUT

    assert pool.take(deadline=_deadline(), prove=prove) is None
    assert pool.take(deadline=_deadline(), prove=prove) is None
    assert proofs == 1

    supply.add(1, seed=1)
    pool.observe_generation(4)  # an import bumped the campaign: every segment is open again
    fresh = pool.take(deadline=_deadline(), prove=prove)
    assert fresh is not None
    assert fresh.coupon_id.startswith("n1-")


def test_an_import_reopens_segments_drained_by_other_instances() -> None:
    supply = FakeSupply(300)
    first, second = _pool(supply), _pool(supply)
    Shoppers(supply, [first]).run(threads_per_pool=4)
    assert first.sold_out

    supply.add(50, seed=2)
    for pool in (first, second):
        pool.observe_generation(1, codes_total=350)
    shoppers = Shoppers(supply, [first, second])
    shoppers.run(threads_per_pool=4)

    assert len(shoppers.created) == 50
    assert not supply.free


def test_after_a_release_instances_look_for_segments_in_different_places() -> None:
    """Every segment was drained at the old generation: Firestore orders open segments by the
    generation they were drained at, so each instance's first query starts at its own random
    place inside that group, and they do not all race for the first segments."""
    supply = FakeSupply(64 * 16, latency=0.001)
    Shoppers(supply, [_pool(supply)]).run(threads_per_pool=4)
    # Seeds whose first random start falls on seven different segments (a run is one segment:
    # sixteen codes a segment, four wanted).
    seeds = (0, 1, 2, 3, 5, 6, 7)
    pools = [_pool(supply) for _ in seeds]
    supply.add(64 * 16, seed=4)
    for seed, pool in zip(seeds, pools, strict=True):
        pool.rng = random.Random(seed)
        pool.observe_generation(1, codes_total=64 * 16)
    races_before = supply.bill.segment_races

    with ThreadPoolExecutor(len(pools)) as ex:
        taken = list(ex.map(lambda p: p.take(deadline=_deadline(), prove=_never), pools))

    assert all(candidate is not None for candidate in taken)
    assert supply.bill.segment_races == races_before
    starts = {int(random.Random(seed).random() * 64) for seed in seeds}
    holders = {pool.holder for pool in pools}
    leased = {i for i in range(64) if supply.segment(segment_id(i)).holder in holders}
    assert leased == starts


def test_a_run_is_leased_as_long_as_the_demand_not_shorter_from_what_the_last_look_left() -> None:
    """Free segments a look saw and did not lease are tried first next time (no read), but only
    when they make a run long enough: on Firestore's emulator a query costs about the same
    whatever it returns, so a short run would only bring one more query soon."""
    supply = FakeSupply(64 * 100)  # a hundred codes a segment: 300 wanted is a run of three
    pool = _pool(supply)
    first = pool._acquire(300)
    assert first is not None
    assert len(first.segments) == 3
    left = pool._free_seen
    assert len(left) >= 1
    pool._free_seen = left[:1]
    queries = supply.bill.segment_queries

    second = pool._acquire(300)

    assert second is not None
    assert len(second.segments) == 3
    assert supply.bill.segment_queries == queries + 1  # looked again instead
    # Three adjacent free segments left by a look: leased without looking again.
    free = [supply.segment(segment_id(i)) for i in range(64)]
    start = next(i for i in range(62) if all(s.holder is None for s in free[i : i + 3]))
    pool._free_seen = free[start : start + 3]
    queries = supply.bill.segment_queries

    third = pool._acquire(300)

    assert third is not None
    assert third.segments[0].segment_id == segment_id(start)
    assert len(third.segments) == 3
    assert supply.bill.segment_queries == queries


def test_look_again_rescans_after_an_import_landed_during_the_proof() -> None:
    supply = FakeSupply(0)
    pool = _pool(supply, max_refill=4)

    def prove(_: int) -> Exhausted:
        # The import lands between the segment scan and the guarded sold-out write.
        supply.add(1, seed=3)
        pool.observe_generation(1)
        return Exhausted.LOOK_AGAIN

    candidate = pool.take(deadline=_deadline(), prove=prove)

    assert candidate is not None
    assert candidate.coupon_id.startswith("n3-")


def test_codes_in_flight_elsewhere_are_taken_only_after_starving_a_while() -> None:
    """Every segment drained, one code still unassigned in the pool of an instance that died:
    another instance takes it, but not at once (a live holder is about to use it)."""
    supply = FakeSupply(40)
    dead = _pool(supply, pool_starved_seconds=0.3)
    held = dead.take(deadline=_deadline(), prove=_never)  # its holder then dies
    assert held is not None
    while (c := dead.take(deadline=_deadline(), prove=_prover(supply))) is not None:
        if c.coupon_id != held.coupon_id:
            assert supply.assign(c)
        dead.settle(c)
        if len(supply.free) == 1:
            break
    survivor = _pool(supply, pool_starved_seconds=0.3)

    started = time.monotonic()
    candidate = survivor.take(deadline=_deadline(), prove=_prover(supply))

    assert candidate is not None
    assert candidate.coupon_id == held.coupon_id
    assert time.monotonic() - started >= 0.3


def test_a_starving_instance_looks_again_only_when_it_may_take_codes_in_flight() -> None:
    """Its first look finds the code in another pool; looking again before it has starved long
    enough to take it would only find the same."""
    supply = FakeSupply(1)
    elsewhere = _pool(supply, pool_starved_seconds=0.3)
    assert elsewhere.take(deadline=_deadline(), prove=_never) is not None  # and keeps it
    starving = _pool(supply, pool_starved_seconds=0.3)

    candidate = starving.take(deadline=_deadline(), prove=_prover(supply))

    assert candidate is not None
    assert starving.metrics.proofs == 2


def test_slow_refills_bring_more_of_the_demand_at_a_time() -> None:
    """When Firestore answers slowly, a prefetch must last until it lands: refills cover
    REFILL_LATENCY_FACTOR times as long as they take, not fewer codes more often."""
    fast, slow = FakeSupply(200), FakeSupply(200, latency=0.4)
    pools = [_pool(fast), _pool(slow)]

    for pool, supply in zip(pools, (fast, slow), strict=True):
        candidate = pool.take(deadline=_deadline(), prove=_never)
        assert candidate is not None
        assert supply.assign(candidate)

    assert pools[0].state()["horizon"] == REFILL_HORIZON_SECONDS
    assert float(pools[1].state()["horizon"]) > 2 * REFILL_HORIZON_SECONDS  # type: ignore[arg-type]


def test_a_segment_held_but_read_to_its_top_sends_a_starving_instance_to_the_proof() -> None:
    """The holder and a stealer have read all of the only segment into pools that stopped
    taking (their instances died): a third instance gets those codes through the proof after
    starving a while, instead of waiting out the holder's lease."""
    supply = FakeSupply(30, segments=1)
    holder, stealer, third = (
        # Steals take all of a segment at once.
        _pool(supply, pool_starved_seconds=0.3, pool_idle_holder_seconds=0.0)
        for _ in range(3)
    )
    assert holder.take(deadline=_deadline(), prove=_never) is not None  # leases, reads a few
    assert stealer.take(deadline=_deadline(), prove=_never) is not None  # steals the rest
    # Both stop here: the segment stays leased to the holder, with nothing left between its
    # cursors, and every free code sits in their pools.

    started = time.monotonic()
    candidate = third.take(deadline=_deadline(), prove=_prover(supply))

    assert candidate is not None
    assert third.metrics.proofs > 0
    assert time.monotonic() - started < SETTINGS.pool_lease_seconds / 10


def test_a_steal_takes_the_top_of_a_held_segment_and_never_what_its_holder_reads() -> None:
    # One segment: the second instance can only steal.
    supply = FakeSupply(1000, segments=1, latency=0.002)
    holder, stealer = _pool(supply), _pool(supply)
    first = holder.take(deadline=_deadline(), prove=_never)  # the holder leases the segment
    assert first is not None
    holder.release(first)
    shoppers = Shoppers(supply, [holder, stealer])

    shoppers.run(threads_per_pool=1)

    assert not supply.free
    assert shoppers.conflicts == 0
    assert stealer.metrics.steals > 0
    assert holder.metrics.steals == 0
    holder_took, stealer_took = (shoppers.taken_by[i] for i in (0, 1))
    assert not set(holder_took) & set(stealer_took)
    # The stealer took from the top, the holder from the bottom up.
    assert min(map(supply.random_float, stealer_took)) > max(map(supply.random_float, holder_took))


def test_take_gives_up_at_the_deadline_while_a_refill_is_stuck() -> None:
    release = threading.Event()
    supply = FakeSupply(10)
    fetch = supply.fetch

    def slow_fetch(*, low: float, low_inclusive: bool, high: float, limit: int) -> list[Candidate]:
        release.wait(5)
        return fetch(low=low, low_inclusive=low_inclusive, high=high, limit=limit)

    supply.fetch = slow_fetch  # type: ignore[method-assign]
    pool = _pool(supply, max_refill=4)
    stuck = threading.Thread(
        target=lambda: pool.take(deadline=_deadline(), prove=lambda _: Exhausted.SOLD_OUT)
    )
    stuck.start()
    time.sleep(0.05)

    with pytest.raises(PoolTimeout):
        pool.take(deadline=time.monotonic() + 0.1, prove=_never)
    release.set()
    stuck.join()


def test_a_run_of_candidates_taken_elsewhere_flushes_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(candidate_pool, "MIN_REFILL", 100)  # the first read takes them all
    supply = FakeSupply(100, segments=1)
    pool = _pool(supply, max_refill=100)
    first = pool.take(deadline=_deadline(), prove=_never)
    assert first is not None
    assert supply.assign(first)
    pool.settle(first)
    # Something else took the next 60 in the same order (say a holder the lease was lost to).
    for coupon_id in sorted(supply.free, key=supply.free.__getitem__)[:60]:
        assert supply.assign(supply.candidate(coupon_id, supply.free[coupon_id]))

    outcomes: Counter[str] = Counter()
    while (candidate := pool.take(deadline=_deadline(), prove=_prover(supply))) is not None:
        if supply.assign(candidate):
            pool.settle(candidate)
            outcomes["ok"] += 1
        else:
            pool.settle(candidate, taken_elsewhere=True)
            outcomes["stale"] += 1

    assert pool.metrics.flushes >= 1
    assert outcomes["stale"] < 60  # the flush spared the rest of the stale candidates
    assert not supply.free
