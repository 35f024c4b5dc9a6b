"""Holds benchmark: how many codes end redeemed with holds against without, and how fast the
sweep releases abandoned holds.

    .venv/bin/python -m scripts.bench.holds [--codes 5000] [--shoppers 10000] [--hold-seconds 3]
        [--abandon 0.3] [--arrival-seconds 20] [--checkout-seconds 1.0] [--patience-seconds 3]
        [--sweep-every 0.5] [--concurrency 64] [--instances 2] [--burst 2000] [--seed 1]
        [--cancel 0.1] [--no-counters] [--firestore HOST:PORT] [--json PATH] [-v]

A flash sale, run twice on one Firestore emulator (reset in between): once on a campaign whose
claims are final, once with holds of `--hold-seconds`. `--shoppers` shoppers arrive evenly over
`--arrival-seconds`; one who hears SOLD_OUT tries again every 0.5 s for `--patience-seconds` (a
landing page polling the campaign). A shopper who gets a code abandons the checkout with
probability `--abandon` (the same shoppers in both runs), otherwise redeems it after a checkout
time drawn from [0.1, `--checkout-seconds`] s. The sweep runs every `--sweep-every` s in its
own thread, exactly as the scheduled sweep does (HoldReleaser.release_expired), with expiry
buckets of 1 s. `--instances` claim engines (function instances, each with its candidate pool)
share the shoppers; checkouts run on threads of their own (admin_api scales apart from
claim_api); everything runs in this process, calling the services directly.

A share `--cancel` of the redeemed orders is cancelled right after its redemption; both
campaigns give a cancelled order's code back to the pool (on_cancel "return_to_pool"), where
shoppers still retrying claim it again.

Then the release throughput on its own: `--burst` holds expire at once and one sweep pass
releases them. Events go to an in-memory publisher and are applied to the sharded counters
afterwards, so the stats (held, redeemed, released, remaining) are compared with the documents.

Reported per run: shoppers served, claims, SOLD_OUT answers, codes redeemed, holds released,
the cancellations' funnel (orders cancelled, codes returned, of those claimed again),
holds redeemed after a release gave their code back, Firestore RPCs by method (counted where the
client sends them), and the invariants read back from the database (devkit/audit.py,
plus: no (coupon, shopper) hold both released and redeemed, no code redeemed by two orders).
Exit status 1 on any violation. Starts its own Firestore emulator on a free port unless
`--firestore` names one.
"""

from __future__ import annotations

import argparse
import heapq
import json
import logging
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from scripts.bench import harness

log = logging.getLogger("bench_holds")

PROJECT = harness.PROJECT
RETRY_EVERY = 0.5


@dataclass(frozen=True)
class Config:
    codes: int
    shoppers: int
    hold_seconds: int
    abandon: float
    arrival_seconds: float
    checkout_seconds: float
    patience_seconds: float
    sweep_every: float
    concurrency: int
    instances: int
    burst: int
    seed: int
    cancel: float


# --- the pieces a sale needs ------------------------------------------------------------------
class Scheduler:
    """Runs callables at given monotonic times on a thread pool (arrivals, checkouts, retries)
    without a sleeping thread per shopper."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cond = threading.Condition()
        self._seq = 0
        self._pending = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)
        self._thread.start()

    def at(self, when: float, task: Callable[[], None]) -> None:
        with self._cond:
            self._seq += 1
            self._pending += 1
            heapq.heappush(self._heap, (when, self._seq, task))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                if self._closed:
                    return
                _, _, task = heapq.heappop(self._heap)
            self._pool.submit(self._call, task)

    def _call(self, task: Callable[[], None]) -> None:
        try:
            task()
        finally:
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()

    def drain(self) -> None:
        """Wait until every task scheduled so far, and those they scheduled, has run."""
        with self._cond:
            while self._pending:
                self._cond.wait(0.5)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()


@contextmanager
def counting_rpcs() -> Iterator[Counter[str]]:
    """Firestore RPCs by method, counted where the client sends them."""
    from google.cloud.firestore_v1.services.firestore.client import FirestoreClient

    counts: Counter[str] = Counter()
    lock = threading.Lock()
    names = ("commit", "run_query", "batch_get_documents", "get_document", "run_aggregation_query")
    originals = {name: getattr(FirestoreClient, name) for name in names}

    def wrap(name: str) -> Callable[..., Any]:
        original = originals[name]

        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            with lock:
                counts[name] += 1
            return original(self, *args, **kwargs)

        return counted

    for name in names:
        setattr(FirestoreClient, name, wrap(name))
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(FirestoreClient, name, original)


# --- one sale ---------------------------------------------------------------------------------
@dataclass
class SaleResult:
    holds: bool
    seconds: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    claims: int = 0
    sold_out_answers: int = 0
    redeemed: int = 0
    released: int = 0
    release_passes: int = 0
    release_seconds: float = 0.0
    redeemed_after_release: int = 0  # redeemed codes whose earlier hold had been released
    reversed: int = 0  # orders cancelled after their redemption
    funnel: dict[str, int] = field(default_factory=dict)
    rpcs: dict[str, int] = field(default_factory=dict)
    lags: dict[str, dict[str, float]] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    audit: dict[str, int] = field(default_factory=dict)
    violations: dict[str, int] = field(default_factory=dict)


@dataclass
class Shopper:
    index: int
    user_id: str
    abandons: bool
    checkout: float
    deadline: float = 0.0
    cancels: bool = False  # the order is cancelled after its redemption
    outcome: str = "waiting"
    code: str | None = None
    # How late this process got to the shopper's first claim and to their checkout: on a busy
    # machine a checkout can come after the hold's expiry, which the figures must show.
    claim_lag: float | None = None
    checkout_lag: float | None = None


class Sale:
    def __init__(self, services: Any, cfg: Config, campaign_id: str, holds: bool) -> None:
        from shared.container import Services

        self.services = services
        self.cfg = cfg
        self.campaign_id = campaign_id
        self.result = SaleResult(holds=holds)
        # A container per function instance, sharing the clients: each claim service has its own
        # engine and candidate pool; the claim API's path: the engine's commit, then
        # coupon.claimed.
        self.instances = [
            Services(services.settings, db=services.db, publisher=services.publisher).claims
            for _ in range(cfg.instances)
        ]
        rng = random.Random(cfg.seed)
        self.shoppers = [
            Shopper(
                index=i,
                user_id=f"shopper-{i:05d}",
                abandons=rng.random() < cfg.abandon,
                checkout=rng.uniform(0.1, cfg.checkout_seconds),
            )
            for i in range(cfg.shoppers)
        ]
        # Drawn apart, so the same shoppers abandon with or without cancellations.
        cancels = random.Random(cfg.seed + 7)
        for shopper in self.shoppers:
            shopper.cancels = cancels.random() < cfg.cancel
        self._lock = threading.Lock()
        # Claims and checkouts reach different functions (claim_api, admin_api), each scaled on
        # its own: a checkout never queues behind the claims of the sale.
        self.pool = ThreadPoolExecutor(cfg.concurrency, thread_name_prefix="shopper")
        self.checkout_pool = ThreadPoolExecutor(cfg.concurrency, thread_name_prefix="checkout")
        self.scheduler = Scheduler(self.pool)
        self.checkouts = Scheduler(self.checkout_pool)

    def count(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self.result, name, getattr(self.result, name) + delta)

    def claim(self, shopper: Shopper, due: float | None = None) -> None:
        from shared.claims.policy import Shopper as Caller
        from shared.errors import CodedropError, SoldOut

        if due is not None:
            shopper.claim_lag = time.monotonic() - due
        instance = self.instances[shopper.index % len(self.instances)]
        try:
            claimed = instance.claim(
                campaign_id=self.campaign_id, shopper=Caller(user_id=shopper.user_id)
            )
        except SoldOut:
            self.count(sold_out_answers=1)
            if time.monotonic() + RETRY_EVERY <= shopper.deadline:
                self.scheduler.at(time.monotonic() + RETRY_EVERY, lambda: self.claim(shopper))
            else:
                shopper.outcome = "sold_out"
            return
        except CodedropError as exc:
            shopper.outcome = f"error:{exc.error_code}"
            return
        self.count(claims=1)
        shopper.code = claimed.claim.code
        if shopper.abandons:
            shopper.outcome = "abandoned"
            return
        due = time.monotonic() + shopper.checkout
        self.checkouts.at(due, lambda: self.redeem(shopper, due))

    def redeem(self, shopper: Shopper, due: float) -> None:
        from shared.errors import CodedropError

        shopper.checkout_lag = time.monotonic() - due
        assert shopper.code is not None
        try:
            self.services.redemptions.redeem(
                campaign_id=self.campaign_id, code=shopper.code, order_id=f"order-{shopper.index}"
            )
        except CodedropError as exc:
            shopper.outcome = f"refused:{exc.error_code}"
            return
        shopper.outcome = "redeemed"
        self.count(redeemed=1)
        if shopper.cancels:
            self.services.reversals.reverse_order(
                campaign_id=self.campaign_id, order_id=f"order-{shopper.index}"
            )
            shopper.outcome = "cancelled"
            self.count(reversed=1)

    def sweep_until(self, stop: threading.Event) -> None:
        while not stop.wait(self.cfg.sweep_every):
            self.sweep_once()

    def sweep_once(self) -> None:
        report = self.services.holds.release_expired()
        self.count(
            released=report.by_campaign.get(self.campaign_id, 0),
            release_passes=1,
        )
        with self._lock:
            self.result.release_seconds += report.seconds

    def run(self) -> SaleResult:
        started = time.monotonic()
        gap = self.cfg.arrival_seconds / max(self.cfg.shoppers, 1)
        for shopper in self.shoppers:
            arrives = started + shopper.index * gap
            shopper.deadline = arrives + self.cfg.patience_seconds
            self.scheduler.at(arrives, lambda s=shopper, a=arrives: self.claim(s, a))  # type: ignore[misc]
        stop = threading.Event()
        sweeper = threading.Thread(target=self.sweep_until, args=(stop,), name="sweep")
        if self.result.holds:
            sweeper.start()
        try:
            self.scheduler.drain()
            self.checkouts.drain()
            if self.result.holds:
                # The last holds expire and the sweep takes them back.
                time.sleep(self.cfg.hold_seconds + 1.5 + self.cfg.sweep_every)
        finally:
            stop.set()
            if sweeper.is_alive():
                sweeper.join()
            for scheduler, pool in (
                (self.scheduler, self.pool),
                (self.checkouts, self.checkout_pool),
            ):
                scheduler.close()
                pool.shutdown(wait=True)
        if self.result.holds:
            self.sweep_once()
        self.result.seconds = time.monotonic() - started
        self.result.outcomes = dict(Counter(s.outcome for s in self.shoppers))
        self.result.lags = {
            "claim": _percentiles([s.claim_lag for s in self.shoppers]),
            "checkout": _percentiles([s.checkout_lag for s in self.shoppers]),
        }
        return self.result


def _percentiles(values: list[float | None]) -> dict[str, float]:
    known = sorted(v for v in values if v is not None)
    if not known:
        return {}
    return {
        f"p{p}": round(known[min(len(known) - 1, int(len(known) * p / 100))], 3) for p in (50, 95)
    }


def make_campaign(services: Any, cfg: Config, *, hold_seconds: int | None) -> str:
    from shared.gcp.firestore import campaign_ref
    from shared.types import OnCancel

    campaign_id = harness.create_campaign(
        services.db,
        campaign_id=f"holds-{'on' if hold_seconds else 'off'}-{cfg.seed}",
        title="Holds benchmark",
        codes=[f"H{cfg.seed}-{i:06d}" for i in range(cfg.codes)],
        hold_seconds=60 if hold_seconds else None,
        on_cancel=OnCancel.RETURN_TO_POOL,
    )
    if hold_seconds:
        # Holds of a few seconds, below the API's minimum of 60, written straight in.
        campaign_ref(services.db, campaign_id).update({"hold_seconds": hold_seconds})
    return campaign_id


def check(
    services: Any, campaign_id: str, result: SaleResult, events: list[dict[str, Any]]
) -> None:
    """The invariants, from the database and from the events the run published."""
    from devkit.audit import audit_campaign

    mine = [e for e in events if e["campaign_id"] == campaign_id]
    report = audit_campaign(services.db, campaign_id=campaign_id)
    released = {(e["coupon_id"], e["user_id"]) for e in mine if e["type"] == "coupon.released"}
    redeemed = [(e["coupon_id"], e["user_id"]) for e in mine if e["type"] == "coupon.redeemed"]
    released_coupons = {coupon for coupon, _ in released}
    result.redeemed_after_release = sum(1 for c, _ in redeemed if c in released_coupons)
    returned = [
        (e["coupon_id"], e["occurred_at"])
        for e in mine
        if e["type"] == "coupon.reversed" and e["on_cancel"] == "return_to_pool"
    ]
    claimed_at: dict[str, list[str]] = {}
    for e in mine:
        if e["type"] == "coupon.claimed":
            claimed_at.setdefault(e["coupon_id"], []).append(e["occurred_at"])
    # RFC 3339 UTC strings of one format sort as the times they name.
    claimed_again = sum(1 for c, at in returned if any(t > at for t in claimed_at.get(c, [])))
    result.funnel = {
        "claims": result.claims,
        "redeemed": result.redeemed,
        "cancelled": result.reversed,
        "returned_to_pool": len(returned),
        "claimed_again": claimed_again,
    }
    unreversed = Counter(c for c, _ in redeemed)
    unreversed.subtract(c for c, _ in returned)
    result.audit = {
        "codes_total": report.codes_total,
        "assigned": report.assigned,
        "held": report.held,
        "redeemed": report.redeemed,
        "unassigned": report.unassigned,
    }
    result.violations = {
        **report.violations,
        "hold_both_released_and_redeemed": len(released & set(redeemed)),
        # Two orders at once: a code is redeemed again only after a cancellation gave it back.
        "code_redeemed_by_two_orders": sum(1 for n in unreversed.values() if n > 1),
        "redemptions_answered_vs_stored": abs(result.redeemed - result.reversed - report.redeemed),
        "returned_codes_not_claimed_again": len(returned) - claimed_again,
        "releases_counted_vs_events": abs(result.released - len(released)),
    }


def check_counters(
    services: Any, campaign_id: str, result: SaleResult, events: list[dict[str, Any]]
) -> None:
    """The counters, fed every event of the sale (a tenth of them twice: delivery is at least
    once), against the documents: stats must say what the audit counted."""
    from shared.campaigns import store as campaign_store
    from shared.clock import utcnow
    from shared.events.models import event_from_dict

    counters = services.counters
    parsed = [event_from_dict(e) for e in events if e["campaign_id"] == campaign_id]
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(counters.apply, parsed + parsed[: len(parsed) // 10]))
    campaign = campaign_store.get_campaign(services.db, campaign_id=campaign_id)
    stats = services.usage.stats(campaign, now=utcnow())
    result.stats = stats.model_dump(
        include={"claimed", "held", "redeemed", "released", "reversed", "remaining"}
    )
    audit = result.audit
    result.violations["stats_remaining_vs_free_coupons"] = abs(
        stats.remaining - audit["unassigned"]
    )
    result.violations["stats_redeemed_vs_stored"] = abs(
        stats.redeemed - stats.reversed - audit["redeemed"]
    )
    result.violations["stats_held_vs_stored"] = abs(stats.held - audit["held"])


def run_sale(
    services: Any, publisher: harness.MemoryPublisher, cfg: Config, *, holds: bool, counters: bool
) -> SaleResult:
    campaign_id = make_campaign(services, cfg, hold_seconds=cfg.hold_seconds if holds else None)
    log.info("sale %s: %d codes, %d shoppers", campaign_id, cfg.codes, cfg.shoppers)
    with counting_rpcs() as rpcs:
        result = Sale(services, cfg, campaign_id, holds).run()
    result.rpcs = dict(rpcs)
    check(services, campaign_id, result, publisher.events)
    if counters:
        check_counters(services, campaign_id, result, publisher.events)
    return result


# --- release throughput on its own -------------------------------------------------------------
@dataclass
class BurstResult:
    holds: int
    released: int
    seconds: float
    per_second: float
    rpcs: dict[str, int]
    violations: dict[str, int]


def release_burst(services: Any, cfg: Config) -> BurstResult:
    from devkit.audit import audit_campaign

    burst = Config(**{**asdict(cfg), "codes": cfg.burst, "seed": cfg.seed + 1000})
    campaign_id = make_campaign(services, burst, hold_seconds=1)

    from shared.claims.policy import Shopper as Caller

    def hold(i: int) -> None:
        services.claims.claim(campaign_id=campaign_id, shopper=Caller(user_id=f"burst-{i}"))

    with ThreadPoolExecutor(cfg.concurrency) as pool:
        list(pool.map(hold, range(cfg.burst)))
    time.sleep(2.5)  # every hold has expired, and its 1 s bucket has started
    with counting_rpcs() as rpcs:
        started = time.monotonic()
        report = services.holds.release_expired()
        seconds = time.monotonic() - started
    audit = audit_campaign(services.db, campaign_id=campaign_id)
    released = report.by_campaign.get(campaign_id, 0)
    violations = {**audit.violations, "holds_left": audit.held + audit.assigned}
    return BurstResult(
        holds=cfg.burst,
        released=released,
        seconds=round(seconds, 3),
        per_second=round(released / seconds, 1) if seconds else 0.0,
        rpcs=dict(rpcs),
        violations=violations,
    )


# --- running it -------------------------------------------------------------------------------
def build_services(publisher: harness.MemoryPublisher) -> Any:
    from shared.container import Services
    from shared.settings import Settings

    settings = Settings(
        project_id=PROJECT,
        hold_bucket_seconds=1,  # holds of a few seconds want buckets finer than a minute
    )
    return Services(settings, publisher=publisher)


OPTIONS: list[harness.Option] = [
    ("--codes", harness.positive, 5000, "codes in the sale"),
    ("--shoppers", harness.positive, 10_000, "shoppers arriving"),
    ("--hold-seconds", harness.positive, 3, "the holding campaign's hold"),
    ("--abandon", float, 0.3, "share of shoppers who abandon the checkout"),
    ("--arrival-seconds", float, 20.0, "the shoppers arrive evenly over this window"),
    ("--checkout-seconds", float, 1.0, "longest checkout (s)"),
    ("--patience-seconds", float, 3.0, "how long a shopper told SOLD_OUT keeps trying (s)"),
    ("--sweep-every", float, 0.5, "seconds between sweeps"),
    ("--concurrency", harness.positive, 64, "threads"),
    ("--instances", harness.positive, 2, "claim engines"),
    ("--burst", harness.positive, 2000, "holds expiring at once for the release measure"),
    ("--seed", int, 1, "random seed"),
    ("--cancel", float, 0.1, "share of orders cancelled"),
    harness.FIRESTORE_OPTION,
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__, prog="holds", options=OPTIONS)
    parser.add_argument(
        "--no-counters",
        dest="counters",
        action="store_false",
        help="skip feeding the events to the sharded counters and checking the stats",
    )
    return parser.parse_args(argv)


def config_of(args: argparse.Namespace) -> Config:
    return Config(**{f.name: getattr(args, f.name) for f in fields(Config)})


def print_figures(cfg: Config, sales: list[SaleResult], burst: BurstResult) -> None:
    print(f"settings: {json.dumps(asdict(cfg))}")
    print("| | without holds | with holds |")
    print("|---|---|---|")
    rows: list[tuple[str, Callable[[SaleResult], object]]] = [
        ("claims (codes handed out, holds included)", lambda r: r.claims),
        ("codes redeemed", lambda r: r.redeemed),
        ("redeemed share of the codes", lambda r: f"{r.redeemed / cfg.codes:.1%}"),
        ("holds released", lambda r: r.released),
        (
            "orders cancelled / codes back in the pool / claimed again",
            lambda r: " / ".join(
                str(r.funnel.get(k, 0)) for k in ("cancelled", "returned_to_pool", "claimed_again")
            ),
        ),
        ("redeemed after an earlier hold was released", lambda r: r.redeemed_after_release),
        ("shoppers left with SOLD_OUT", lambda r: r.outcomes.get("sold_out", 0)),
        (
            "checkouts refused: the hold was released first",
            lambda r: sum(v for k, v in r.outcomes.items() if k.startswith("refused:")),
        ),
        ("claims answered CONTENDED", lambda r: r.outcomes.get("error:CONTENDED", 0)),
        ("lag behind schedule, p50/p95 (s): claim", lambda r: _lag(r, "claim")),
        ("lag behind schedule, p50/p95 (s): checkout", lambda r: _lag(r, "checkout")),
        ("SOLD_OUT answers (retries included)", lambda r: r.sold_out_answers),
        ("codes unused at the end", lambda r: r.audit["unassigned"]),
        ("sale wall time (s)", lambda r: f"{r.seconds:.1f}"),
        (
            "sweep passes / time in them (s)",
            lambda r: f"{r.release_passes} / {r.release_seconds:.2f}",
        ),
        ("Firestore RPCs", lambda r: ", ".join(f"{k} {v}" for k, v in sorted(r.rpcs.items()))),
        ("stats after the counters", lambda r: ", ".join(f"{k} {v}" for k, v in r.stats.items())),
        ("invariant violations", lambda r: sum(r.violations.values())),
    ]
    for label, value in rows:
        print(f"| {label} | {value(sales[0])} | {value(sales[1])} |")
    print(
        f"release burst: {burst.released} of {burst.holds} expired holds released in one sweep "
        f"pass, {burst.seconds} s, {burst.per_second} releases/s; RPCs {burst.rpcs}; "
        f"violations {sum(burst.violations.values())}"
    )


def _lag(result: SaleResult, name: str) -> str:
    lag = result.lags.get(name, {})
    return f"{lag.get('p50', '-')} / {lag.get('p95', '-')}"


def bench(args: argparse.Namespace, emulators: harness.Emulators) -> int:
    cfg = config_of(args)
    emulators.reset()
    publisher = harness.MemoryPublisher()
    services = build_services(publisher)
    sales = []
    for holds in (False, True):
        sales.append(run_sale(services, publisher, cfg, holds=holds, counters=args.counters))
        # The emulator scans a collection group whole: a run must not pay for the last one.
        emulators.reset()
    burst = release_burst(services, cfg)
    print_figures(cfg, sales, burst)
    harness.write_json(
        args.json,
        {
            "settings": asdict(cfg),
            "sales": [asdict(s) for s in sales],
            "release_burst": asdict(burst),
        },
    )
    failed = [s.violations for s in sales if any(s.violations.values())]
    if failed or any(burst.violations.values()):
        print(f"INVARIANT VIOLATIONS: {failed} {burst.violations}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    return harness.run_with_emulators(parse_args(argv), bench)


if __name__ == "__main__":
    sys.exit(main())
