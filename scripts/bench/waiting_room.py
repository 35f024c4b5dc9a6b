"""Waiting-room benchmark: a discrete-event simulation of a flash-sale burst, on a virtual clock.

    .venv/bin/python -m scripts.bench.waiting_room [--shoppers 20000] [--arrival-seconds 10]
        [--arrivals uniform|burst] [--rate 200] [--tick 1.0] [--kp 0.5]
        [--jitter-low 0.5] [--jitter-high 1.0] [--instances 1[,2,10,100]]
        [--heartbeat-lag 0.1] [--seed 7] [--json PATH] [--check]

No sleeping and no network: time is a number the simulation advances from event to event.
`--shoppers` shoppers arrive within `--arrival-seconds` (uniformly, or `burst`: front-loaded,
exponentially decaying with a fifth of the window as time constant, truncated to the window).
Every shopper polls at once on arrival, then again after Retry-After until admitted: for the
fair queue, what the controller answers (shared/waiting_room/admission.py, retry_after: just
after the next tick for those it passes then, 0.2-0.4 tick for those right at the threshold,
0.5-1 tick for the rest), for the others uniform in [jitter-low, jitter-high] ticks. Capacity is
`--rate` admissions per second in total. Every policy sees the same arrivals, and each poll
goes to an instance drawn at random (a load balancer). With several `--instances` (a list runs
each in turn), the fair queue's instances share their counts through heartbeats as the service
does: each exchanges them on its first request, then at the interval the service uses (sooner
while new, or while the queue is young), and a heartbeat is seen `--heartbeat-lag` seconds after
it is written (the write's round trip).

  random      Shopify's first attempt: a bucket per instance (shared.ratelimit's TokenBucket, its
              share of the rate, burst one tick of it) takes whoever polls while it has room;
              no order.
  fair        shared.waiting_room.admission.AdmissionController, one per instance: arrive(now)
              on a shopper's first poll (the ticket then carries that time),
              decide(first_attempt, now) after.
              Tick `--tick`, gain `--kp` (the service's defaults: 1.0 s, 0.5).
  ideal-fifo  a reference, not a policy: one central queue admitting in exact arrival order,
              as early as the same total bucket allows, with no polling delay. It bounds what
              any order-keeping policy can reach on these arrivals.

Reported per policy (time in queue = admission time - arrival time):
  queue p50 / p95, p95/p50   over all shoppers of the sale.
  per-tick p95/p50           Shopify's chart: p95/p50 of the time in queue of the shoppers
                             admitted in the same tick-long window; the median and the worst
                             over the settled windows (those holding >= 20 admissions).
  rate                       admissions per 1-second window over the middle 80% of the
                             admission period (first to last admission): mean, max deviation.
  order                      a violation is a shopper admitted more than one tick after the
                             earliest admission among shoppers who arrived later; count and the
                             worst lag (own admission - earliest later-arrival's admission).
  total                      time from the first arrival until everyone is admitted.
  polls                      requests served, per shopper and per second (load on the service).
  heartbeats                 heartbeat documents the instances read per second (each exchange
                             reads every instance's: this grows with the square of the count).

On the overall p95/p50: when a burst exceeds capacity, any policy that keeps the order admits
the k-th shopper at about k / rate, so the time in queue grows linearly with the rank and is
close to uniform between 0 and the drain time: p95/p50 is then about 1.9 however fair the queue
(the ideal-fifo row shows it). The figure that separates fair from random is the spread among
the shoppers admitted together (Shopify's chart), and the ordering count. `--check` (exit 1
on a miss) therefore checks the fair queue on: per-tick p95/p50 (worst settled window) <= 1.5,
the settled rate within 10% of the target (mean, and every window), no ordering violation,
everyone admitted; the whole-sale ratio is printed beside the ideal FIFO's, not checked.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import math
import random
import sys
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

from devkit.measure import percentiles
from scripts.bench import harness
from scripts.bench.harness import Row, fmt
from shared.ratelimit.buckets import TokenBucket
from shared.settings import Settings
from shared.waiting_room.admission import AdmissionController, RoomShare
from shared.waiting_room.service import heartbeat_interval

# The room as deployed (shared/settings.py), and how shoppers and instances behave in it:
# Config's defaults (the fair drop simulates this room), and those of the options.
TICK: float = Settings.model_fields["waiting_room_tick_seconds"].default
KP: float = Settings.model_fields["waiting_room_kp"].default
JITTER_LOW, JITTER_HIGH = 0.5, 1.0
HEARTBEAT_LAG = 0.1

SETTLED_FRACTION = 0.8  # the middle 80% of the admission period
MIN_WINDOW_ADMISSIONS = 20  # per-tick ratios of emptier windows are noise
RATE_TOLERANCE = 0.10
RATIO_TARGET = 1.5


@dataclass(frozen=True, slots=True)
class Config:
    shoppers: int
    arrival_seconds: float
    arrivals: str
    rate: float
    instances: int
    exchange_seconds: float
    seed: int
    horizon_seconds: float
    tick: float = TICK
    kp: float = KP
    jitter_low: float = JITTER_LOW
    jitter_high: float = JITTER_HIGH
    heartbeat_lag: float = HEARTBEAT_LAG


class Policy(Protocol):
    def first(self, instance: int, now: float) -> bool: ...

    def poll(self, instance: int, first_attempt: float, now: float) -> bool: ...

    # When a shopper told to wait asks again (draw: uniform in [0, 1)); None: the jitter.
    def retry(
        self, instance: int, first_attempt: float, now: float, draw: float
    ) -> float | None: ...


class RandomPolicy:
    """Whoever polls while the instance's bucket has room gets in."""

    def __init__(self, cfg: Config) -> None:
        share = cfg.rate / cfg.instances
        self._buckets = [
            TokenBucket(rate=share, burst=max(1.0, share * cfg.tick), at=0.0)
            for _ in range(cfg.instances)
        ]

    def first(self, instance: int, now: float) -> bool:
        return self._buckets[instance].try_acquire(now)

    def poll(self, instance: int, first_attempt: float, now: float) -> bool:
        return self._buckets[instance].try_acquire(now)

    def retry(self, instance: int, first_attempt: float, now: float, draw: float) -> float | None:
        return None


class FairPolicy:
    """The service's controller, one per instance, sharing its counts through heartbeats.

    As in shared/waiting_room/service.py: an instance's first request, and then its first
    request once the interval its controller asks for has passed (`heartbeat_interval`, sooner
    while it learns the room or the queue is young), writes its heartbeat (its RoomShare) and
    reads everyone's.
    A heartbeat becomes visible to readers `--heartbeat-lag` seconds after it is written (the
    write's round trip, a reader's request in flight)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.controllers = [
            AdmissionController(rate=cfg.rate, tick_seconds=cfg.tick, kp=cfg.kp, now=0.0)
            for _ in range(cfg.instances)
        ]
        for controller in self.controllers:
            controller.set_rate(cfg.rate, instances=cfg.instances)
        # The first request of an instance writes its first heartbeat.
        self._next_beat = [0.0] * cfg.instances
        self._beaten = [0] * cfg.instances
        self.heartbeat_reads = 0  # heartbeat documents read (each exchange reads all of them)
        # Per instance: its heartbeats as (visible from, share), oldest first.
        self._beats: list[deque[tuple[float, RoomShare]]] = [deque() for _ in self.controllers]
        # Exchanges under way, as (when the read completes, instance, when it began).
        self._exchanging: list[tuple[float, int, float]] = []
        self._busy = [False] * cfg.instances

    def _hand_over(
        self, controller: AdmissionController, seen: dict[str, RoomShare], began: float
    ) -> None:
        """The peers' shares an exchange read, to the controller."""
        controller.update_peers(seen, live=seen.keys(), now=began)

    def _read(self, instance: int, began: float, at: float) -> None:
        """An exchange's read, at `at`: every heartbeat visible then, handed to the controller
        with the time the exchange began (the service's `now`)."""
        seen: dict[str, RoomShare] = {}
        for other, beats in enumerate(self._beats):
            while len(beats) > 1 and beats[1][0] <= at:
                beats.popleft()
            if other != instance and beats and beats[0][0] <= at:
                seen[str(other)] = beats[0][1]
        controller = self.controllers[instance]
        self._hand_over(controller, seen, began)
        self.heartbeat_reads += len(self._beats)
        interval = heartbeat_interval(self._beaten[instance])
        self._next_beat[instance] = began + controller.heartbeat_within(began, interval)
        self._beaten[instance] += 1
        self._busy[instance] = False

    def _heartbeat(self, instance: int, now: float) -> None:
        # Reads completed by now, in time order (they may belong to other instances).
        while self._exchanging and self._exchanging[0][0] <= now:
            at, other, began = heapq.heappop(self._exchanging)
            self._read(other, began, at)
        if self._busy[instance] or now < self._next_beat[instance]:
            return  # an exchange under way: the others go on with what the instance knows
        controller = self.controllers[instance]
        self._beats[instance].append((now + self.cfg.heartbeat_lag, controller.share(now)))
        if self.cfg.exchange_seconds <= 0:
            self._read(instance, now, now)
        else:
            self._busy[instance] = True
            heapq.heappush(self._exchanging, (now + self.cfg.exchange_seconds, instance, now))

    def first(self, instance: int, now: float) -> bool:
        self._heartbeat(instance, now)
        return self.controllers[instance].arrive(now).admitted

    def poll(self, instance: int, first_attempt: float, now: float) -> bool:
        self._heartbeat(instance, now)
        return self.controllers[instance].decide(first_attempt, now).admitted

    def retry(self, instance: int, first_attempt: float, now: float, draw: float) -> float | None:
        return self.controllers[instance].retry_after(first_attempt, now, draw)


def make_arrivals(cfg: Config) -> list[float]:
    rng = random.Random(cfg.seed)
    if cfg.arrivals == "uniform":
        times = [rng.uniform(0.0, cfg.arrival_seconds) for _ in range(cfg.shoppers)]
    else:  # burst: exponential decay, time constant a fifth of the window, truncated to it
        scale = cfg.arrival_seconds / 5
        cut = 1.0 - math.exp(-cfg.arrival_seconds / scale)
        times = [-scale * math.log(1.0 - rng.random() * cut) for _ in range(cfg.shoppers)]
    times.sort()
    return times


@dataclass(slots=True)
class Run:
    admitted_at: list[float]  # per shopper (index in arrival order); inf if never admitted
    polls: int
    cpu_seconds: float
    heartbeat_reads: int = 0


def simulate(policy: Policy, arrivals: Sequence[float], cfg: Config, *, seed: int) -> Run:
    """Every shopper polls on arrival and then at Retry-After until admitted."""
    rng = random.Random(seed)
    started = time.process_time()
    admitted_at = [math.inf] * len(arrivals)
    # First polls come from the sorted arrivals, retries (time, shopper) from a heap.
    retries: list[tuple[float, int]] = []
    next_arrival = 0
    polls = 0
    low, high = cfg.jitter_low * cfg.tick, cfg.jitter_high * cfg.tick
    instances = cfg.instances
    while next_arrival < len(arrivals) or retries:
        if retries and (next_arrival >= len(arrivals) or retries[0][0] < arrivals[next_arrival]):
            now, shopper = heapq.heappop(retries)
            first = False
        else:
            shopper = next_arrival
            now = arrivals[shopper]
            next_arrival += 1
            first = True
        if now > cfg.horizon_seconds:
            break
        polls += 1
        instance = rng.randrange(instances) if instances > 1 else 0
        # The ticket carries the first attempt: the arrival time.
        ok = policy.first(instance, now) if first else policy.poll(instance, arrivals[shopper], now)
        if ok:
            admitted_at[shopper] = now
        else:
            draw = rng.random()
            delay = policy.retry(instance, arrivals[shopper], now, draw)
            heapq.heappush(
                retries, (now + (low + (high - low) * draw if delay is None else delay), shopper)
            )
    return Run(
        admitted_at=admitted_at,
        polls=polls,
        cpu_seconds=time.process_time() - started,
        heartbeat_reads=getattr(policy, "heartbeat_reads", 0),
    )


def ideal_fifo(arrivals: Sequence[float], cfg: Config) -> Run:
    """Exact arrival order at the total bucket's pace, no polling delay (a bound, not a design)."""
    started = time.process_time()
    capacity = max(1.0, cfg.rate * cfg.tick)
    level, at = 0.0, 0.0
    admitted_at: list[float] = []
    for arrival in arrivals:
        now = max(arrival, at)
        level = max(0.0, level - (now - at) * cfg.rate)
        if level + 1 > capacity:
            now += (level + 1 - capacity) / cfg.rate
            level = capacity - 1
        at = now
        level += 1
        admitted_at.append(now)
    return Run(admitted_at=admitted_at, polls=0, cpu_seconds=time.process_time() - started)


def percentile(values: Iterable[float], p: int) -> float:
    """The p-th percentile (0-100); NaN when there are no values."""
    return percentiles(values, (p,)).get(p, math.nan)


def ratio(p95: float, p50: float) -> float:
    return p95 / p50 if p50 > 0 else math.inf


@dataclass(frozen=True, slots=True)
class Metrics:
    policy: str
    admitted: int
    never_admitted: int
    queue_p50_s: float
    queue_p95_s: float
    queue_max_s: float
    p95_over_p50: float
    tick_ratio_median: float
    tick_ratio_worst: float
    tick_windows: int
    rate_mean: float
    rate_min: float
    rate_max: float
    rate_max_deviation: float  # fraction of the target
    rate_windows: int
    rate_windows_within: int  # of rate_windows, those within RATE_TOLERANCE of the target
    order_violations: int
    order_worst_lag_s: float
    total_seconds: float
    polls: int
    polls_per_shopper: float
    polls_per_second: float
    heartbeat_reads_per_second: float  # heartbeat documents all instances read, per second
    cpu_seconds: float


def measure(name: str, run: Run, arrivals: Sequence[float], cfg: Config) -> Metrics:
    done = [i for i, t in enumerate(run.admitted_at) if math.isfinite(t)]
    waits = sorted(run.admitted_at[i] - arrivals[i] for i in done)
    times = sorted(run.admitted_at[i] for i in done)
    start, end = (times[0], times[-1]) if times else (0.0, 0.0)
    margin = (end - start) * (1 - SETTLED_FRACTION) / 2
    lo, hi = start + margin, end - margin

    # Admitted rate in whole 1-second windows inside the settled period.
    counts: list[int] = []
    w = lo
    while w + 1.0 <= hi + 1e-9:
        counts.append(bisect.bisect_left(times, w + 1.0) - bisect.bisect_left(times, w))
        w += 1.0
    deviation = max((abs(c - cfg.rate) / cfg.rate for c in counts), default=math.nan)

    # Shopify's chart: the spread of time in queue among those admitted in the same tick.
    by_window: dict[int, list[float]] = {}
    for i in done:
        t = run.admitted_at[i]
        if lo <= t < hi:
            by_window.setdefault(math.floor((t - lo) / cfg.tick), []).append(t - arrivals[i])
    ratios = sorted(
        ratio(percentile(v, 95), percentile(v, 50))
        for v in by_window.values()
        if len(v) >= MIN_WINDOW_ADMISSIONS
    )

    # Ordering: compare each shopper with the earliest admission among later arrivals.
    violations, worst_lag = 0, -math.inf
    earliest_later = math.inf
    for i in range(len(arrivals) - 1, -1, -1):
        own = run.admitted_at[i]
        if math.isfinite(earliest_later):
            lag = own - earliest_later  # inf when never admitted: a violation too
            worst_lag = max(worst_lag, lag)
            if lag > cfg.tick + 1e-9:
                violations += 1
        earliest_later = min(earliest_later, own)

    total = end - arrivals[0] if times else math.nan
    return Metrics(
        policy=name,
        admitted=len(done),
        never_admitted=len(arrivals) - len(done),
        queue_p50_s=percentile(waits, 50),
        queue_p95_s=percentile(waits, 95),
        queue_max_s=waits[-1] if waits else math.nan,
        p95_over_p50=ratio(percentile(waits, 95), percentile(waits, 50)),
        tick_ratio_median=percentile(ratios, 50),
        tick_ratio_worst=ratios[-1] if ratios else math.nan,
        tick_windows=len(ratios),
        rate_mean=sum(counts) / len(counts) if counts else math.nan,
        rate_min=float(min(counts, default=0)),
        rate_max=float(max(counts, default=0)),
        rate_max_deviation=deviation,
        rate_windows=len(counts),
        rate_windows_within=sum(abs(c - cfg.rate) <= RATE_TOLERANCE * cfg.rate for c in counts),
        order_violations=violations,
        order_worst_lag_s=max(worst_lag, 0.0),
        total_seconds=total,
        polls=run.polls,
        polls_per_shopper=run.polls / len(arrivals) if run.polls else 0.0,
        polls_per_second=run.polls / total if run.polls and total > 0 else 0.0,
        heartbeat_reads_per_second=run.heartbeat_reads / total if total > 0 else 0.0,
        cpu_seconds=run.cpu_seconds,
    )


def targets(m: Metrics, cfg: Config) -> dict[str, bool]:
    return {
        "per-tick p95/p50 <= 1.5 (worst settled tick)": m.tick_ratio_worst <= RATIO_TARGET,
        "settled rate: mean within 10% of target": (
            abs(m.rate_mean - cfg.rate) <= RATE_TOLERANCE * cfg.rate
        ),
        "settled rate: every 1 s window within 10% of target": (
            m.rate_max_deviation <= RATE_TOLERANCE
        ),
        "no shopper admitted > 1 tick after a later arrival": m.order_violations == 0,
        "everyone admitted": m.never_admitted == 0,
    }


def _fixed(key: str, digits: int = 2) -> Any:
    return lambda m: fmt(m[key], digits)


ROWS: list[Row | str] = [
    ("admitted / never", lambda m: f"{m['admitted']} / {m['never_admitted']}"),
    ("queue p50 (s)", _fixed("queue_p50_s", 1)),
    ("queue p95 (s)", _fixed("queue_p95_s", 1)),
    ("queue max (s)", _fixed("queue_max_s", 1)),
    ("p95/p50, whole sale", _fixed("p95_over_p50")),
    ("p95/p50 per tick: median", _fixed("tick_ratio_median", 3)),
    ("p95/p50 per tick: worst", _fixed("tick_ratio_worst", 3)),
    ("settled rate mean (/s)", _fixed("rate_mean", 1)),
    ("settled rate min..max", lambda m: f"{m['rate_min']:.0f}..{m['rate_max']:.0f}"),
    ("settled rate max dev", lambda m: f"{fmt(100 * m['rate_max_deviation'], 1)}%"),
    ("settled windows within 10%", lambda m: f"{m['rate_windows_within']}/{m['rate_windows']}"),
    ("order violations (>1 tick)", lambda m: str(m["order_violations"])),
    ("order worst lag (s)", _fixed("order_worst_lag_s")),
    ("time to admit all (s)", _fixed("total_seconds", 1)),
    ("polls per shopper", _fixed("polls_per_shopper", 1)),
    ("polls per second", _fixed("polls_per_second", 0)),
    ("heartbeat documents read / s", _fixed("heartbeat_reads_per_second", 0)),
    ("sim CPU (s)", _fixed("cpu_seconds", 1)),
]


def render(results: Sequence[Metrics], cfg: Config) -> str:
    lines = [
        f"{cfg.shoppers} shoppers, {cfg.arrivals} arrivals over {cfg.arrival_seconds:g} s, "
        f"target {cfg.rate:g}/s over {cfg.instances} instance(s), tick {cfg.tick:g} s, "
        f"kp {cfg.kp:g}, retry {cfg.jitter_low:g}-{cfg.jitter_high:g} tick, seed {cfg.seed}",
        "",
        harness.compare({m.policy: asdict(m) for m in results}, ROWS),
    ]
    fair = next((m for m in results if m.policy == "fair"), None)
    if fair is not None:
        lines.append("")
        lines.append("fair queue targets:")
        for what, ok in targets(fair, cfg).items():
            lines.append(f"  [{'ok' if ok else 'MISS'}] {what}")
        ideal = next((m for m in results if m.policy == "ideal-fifo"), None)
        floor = f"; ideal FIFO {fmt(ideal.p95_over_p50, 2)}" if ideal is not None else ""
        lines.append(
            f"  [n/a] whole-sale p95/p50 <= 1.5: {fmt(fair.p95_over_p50, 2)}{floor} "
            "(time in queue grows with rank in any order-keeping queue; see --help)"
        )
    return "\n".join(lines)


OPTIONS: list[harness.Option] = [
    ("--shoppers", int, 20_000, "shoppers in the sale"),
    ("--arrival-seconds", float, 10.0, "they all arrive within this window"),
    ("--rate", float, 200.0, "target admissions per second"),
    ("--tick", float, TICK, "controller tick (s)"),
    ("--kp", float, KP, "proportional gain"),
    ("--jitter-low", float, JITTER_LOW, "Retry-After low, in ticks"),
    ("--jitter-high", float, JITTER_HIGH, "Retry-After high, in ticks"),
    ("--instances", str, "1", "instances sharing the room; several: comma-separated (1,2,10,100)"),
    (
        "--heartbeat-lag",
        float,
        HEARTBEAT_LAG,
        "a heartbeat is seen this long after it is written (s)",
    ),
    ("--exchange-seconds", float, 0.0, "an exchange's read completes this long after it began"),
    ("--seed", int, 7, "arrivals and polls"),
    ("--horizon-seconds", float, 0.0, "stop the clock here (0: 5x the ideal drain time)"),
    ("--policies", str, "random,fair,ideal-fifo", "comma-separated"),
    ("--check", None, False, "exit 1 if the fair queue misses a target"),
]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = harness.parser(__doc__, prog="waiting_room", options=OPTIONS)
    p.add_argument("--arrivals", choices=["uniform", "burst"], default="uniform")
    args = p.parse_args(argv)
    try:
        args.instance_counts = [int(n) for n in args.instances.split(",") if n.strip()]
    except ValueError:
        p.error("--instances: whole numbers, comma-separated")
    if args.shoppers < 2 or args.rate <= 0 or args.tick <= 0:
        p.error("need --shoppers >= 2, --rate > 0, --tick > 0")
    if not args.instance_counts or min(args.instance_counts) < 1:
        p.error("need --instances >= 1")
    if not 0 < args.jitter_low <= args.jitter_high:
        p.error("need 0 < --jitter-low <= --jitter-high")
    return args


def run_policies(cfg: Config, policies: Sequence[str]) -> list[Metrics]:
    arrivals = make_arrivals(cfg)
    results: list[Metrics] = []
    for name in policies:
        if name == "random":
            run = simulate(RandomPolicy(cfg), arrivals, cfg, seed=cfg.seed + 1)
        elif name == "fair":
            run = simulate(FairPolicy(cfg), arrivals, cfg, seed=cfg.seed + 1)
        elif name == "ideal-fifo":
            run = ideal_fifo(arrivals, cfg)
        else:
            raise ValueError(f"unknown policy {name!r}")
        results.append(measure(name, run, arrivals, cfg))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    horizon = args.horizon_seconds or 5 * (args.arrival_seconds + args.shoppers / args.rate) + 60
    given = {
        f.name: getattr(args, f.name)
        for f in fields(Config)
        if f.name not in {"horizon_seconds", "instances"}
    }
    policies = [n.strip() for n in args.policies.split(",") if n.strip()]
    missed, figures = False, []
    for instances in args.instance_counts:
        cfg = Config(**given, instances=instances, horizon_seconds=horizon)
        try:
            results = run_policies(cfg, policies)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
        print(render(results, cfg), end="\n\n")
        figures.append({"config": asdict(cfg), "results": [asdict(m) for m in results]})
        fair = next((m for m in results if m.policy == "fair"), None)
        missed = missed or (fair is not None and not all(targets(fair, cfg).values()))
    harness.write_json(args.json, {"runs": figures})
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
