"""Usage-counter benchmark: count_usage's sharded counters against one-document designs.

    .venv/bin/python -m scripts.bench.counters [--events 5000] [--duplicates 500]
        [--concurrency 32] [--baseline-cap-seconds 60] [--stock 0] [--seed 7]
        [--designs function,direct,transaction,increment] [--function-log PATH]
        [--json PATH] [-v]

One campaign, `--events` distinct coupon.claimed events plus `--duplicates` redeliveries of
some of them (same Pub/Sub message id), shuffled and delivered by `--concurrency` threads. Each
design starts from a reset emulator with the campaign freshly created; all designs get the same
deliveries in the same order.

  function     the real path: functions_framework.create_app("count_usage", functions/main.py,
               "cloudevent"), the messagePublished CloudEvent POSTed as structured JSON through
               one Flask test client per thread; UsageCounter.handle, i.e. ShardedCounters.apply
               (marker + random shard, growing on contention) and check_stock.
  direct       the same ShardedCounters.apply called in-process (decode + apply, no Flask, no
               check_stock): the sharded design's own cost.
  transaction  the naive design: one counter document, a transaction per event that reads the
               marker and the counter and writes marker + counter+1 (default db.transaction(),
               whose client retries aborted commits); capped at --baseline-cap-seconds.
  increment    one counter document, no sharding: marker create + Increment(1) in one batch.

The two one-document designs decode the envelope exactly as `direct` does. Reported per
design: wall time (first delivery started to last answered), events absorbed per second,
latency per delivery, failures, the count read back and whether it is exact, shards and
growths, Firestore documents read and written per delivery (counted at the client's RPCs,
devkit/firestore_rpcs.py), and the CPU time of this process and of the emulator during
the phase. The function's own JSON logs go to --function-log (a temporary file unless given),
not to stdout.

Pub/Sub: count_usage builds the EventBus, whose PublisherClient is created eagerly and needs
PUBSUB_EMULATOR_HOST without credentials. It points at a canary socket of ours that counts
connections; nothing should connect (no announcement can be due: low_stock_threshold is None
and the stock is either 0 or larger than --events).

Starts its own Firestore emulator (own process group, stopped on exit) on a free port, project
demo-codedrop-bench. Exit code 1 if count_usage failed a delivery or its count is not exactly N,
if any design lost an acknowledged event or counted differently from its markers, or if
anything published.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import random
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from devkit.claims import add_claims, claim_record
from devkit.firestore_rpcs import RpcCounter, RpcCounts
from devkit.measure import per, percentiles
from scripts.bench import harness
from scripts.bench.harness import Row, fmt
from shared.claims.models import ClaimRecord, coupon_claimed
from shared.clock import utcnow
from shared.container import instance_services
from shared.events import models as events
from shared.gcp.firestore import (
    ANNOUNCEMENTS,
    PROCESSED_EVENTS,
    campaign_ref,
    counter_config_ref,
    outbox_collection,
    processed_event_ref,
)
from shared.logs import JsonFormatter
from shared.settings import get_settings
from shared.usage.counters import ShardedCounters

log = logging.getLogger("bench.counters")

CAMPAIGN = "bench-counters"
WARMUP_CAMPAIGN = "bench-warmup"
WARMUP_EVENTS = 16
MAIN = Path(__file__).resolve().parents[2] / "functions" / "main.py"
TOPIC = "coupon-events"
SUBSCRIPTION = "count-usage-push"
SINGLE_COUNTER = "single"  # the one-document designs' counter, in the campaign's counters
DESIGNS = ("function", "direct", "transaction", "increment")
TITLES = {
    "function": "sharded count_usage",
    "direct": "sharded direct",
    "transaction": "1 doc transaction",
    "increment": "1 doc Increment",
}
USAGE_LOGGER = ShardedCounters.__module__
FUNCTION = "count_usage"


# --- logging -------------------------------------------------------------------------------------


class _StderrFilter(logging.Filter):
    """The benchmark's own records; of everyone else's, the first few warnings and errors."""

    OWN = ("bench", "emulator")

    def __init__(self, limit: int = 5) -> None:
        super().__init__()
        self.limit = limit
        self.suppressed = 0
        self._others = 0
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".")[0] in self.OWN:
            return True
        if record.levelno < logging.WARNING:
            return False
        with self._lock:
            self._others += 1
            if self._others <= self.limit:
                return True
            self.suppressed += 1
            return False


class _UsageLogCounter(logging.Handler):
    """Counts the sharded counters' contention and growth records (the function's own log)."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.counts: Counter[str] = Counter()
        self.grown_to: set[int] = set()
        self._count_lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._count_lock:
            self.counts[record.getMessage()] += 1
            shards = getattr(record, "shards", None)
            if record.getMessage() == "counter shards grown" and isinstance(shards, int):
                self.grown_to.add(shards)

    def take(self) -> tuple[Counter[str], set[int]]:
        with self._count_lock:
            counts, self.counts = self.counts, Counter()
            grown_to, self.grown_to = self.grown_to, set()
        return counts, grown_to


class _ExceptionCounter(logging.Handler):
    """Counts the exceptions Flask logs for failed invocations (`app.logger`, named after the
    target), so that an HTTP 500 can be told by its cause."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.kinds: Counter[str] = Counter()
        self._count_lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            with self._count_lock:
                self.kinds[failure_kind(record.exc_info[1])] += 1

    def take(self) -> Counter[str]:
        with self._count_lock:
            kinds, self.kinds = self.kinds, Counter()
        return kinds


@dataclass
class Logs:
    stderr_filter: _StderrFilter
    usage: _UsageLogCounter
    exceptions: _ExceptionCounter


def setup_logging(*, verbose: bool, function_log: Path) -> Logs:
    """stderr: our progress; the function's JSON lines (as on Cloud Functions) to a file.

    The JSON handler is installed before functions/main.py runs configure_logging(), which
    then keeps it instead of writing JSON to stdout, where the table goes.
    """
    harness.setup_logging(harness.level(verbose), role="counters")
    root = logging.getLogger()
    stderr_filter = _StderrFilter()
    for handler in root.handlers:
        handler.addFilter(stderr_filter)
    function_log.parent.mkdir(parents=True, exist_ok=True)
    json_lines = logging.FileHandler(function_log, mode="w")
    json_lines.setFormatter(JsonFormatter())
    root.addHandler(json_lines)
    logs = Logs(stderr_filter, _UsageLogCounter(), _ExceptionCounter())
    logging.getLogger(USAGE_LOGGER).addHandler(logs.usage)
    logging.getLogger(FUNCTION).addHandler(logs.exceptions)
    return logs


# --- the Pub/Sub canary --------------------------------------------------------------------------


class Canary:
    """A listening socket standing in for Pub/Sub: counts (and drops) every connection."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="pubsub-canary", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            log.warning("something connected to the Pub/Sub canary (publishing?)")
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()


# --- the load ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    event_id: str
    message_id: str
    body: bytes  # the messagePublished CloudEvent, structured JSON
    redelivery: bool


def published_event(payload: bytes, *, message_id: str, now: datetime) -> dict[str, Any]:
    """A Pub/Sub push delivery as count_usage receives it."""
    published = now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    attributes = json.loads(payload)
    return {
        "specversion": "1.0",
        "id": message_id,
        "source": f"//pubsub.googleapis.com/projects/{harness.PROJECT}/topics/{TOPIC}",
        "type": "google.cloud.pubsub.topic.v1.messagePublished",
        "time": published,
        "datacontenttype": "application/json",
        "data": {
            "message": {
                "data": base64.b64encode(payload).decode(),
                "attributes": {
                    "event_id": attributes.get("event_id", ""),
                    "type": attributes.get("type", ""),
                },
                "messageId": message_id,
                "message_id": message_id,
                "publishTime": published,
                "publish_time": published,
            },
            "subscription": f"projects/{harness.PROJECT}/subscriptions/{SUBSCRIPTION}",
        },
    }


def claim_records(campaign_id: str, count: int, *, now: datetime) -> list[ClaimRecord]:
    """`count` claims of distinct shoppers. count_usage counts only claims that exist, so each
    phase writes their documents (devkit/claims.py) before it delivers their events."""
    return [claim_record(campaign_id, i, claimed_at=now) for i in range(count)]


def make_deliveries(
    claimed: Sequence[events.CouponClaimed], *, duplicates: int, seed: int, now: datetime
) -> list[Delivery]:
    """Every event once, `duplicates` of them twice (same message id), shuffled."""
    rng = random.Random(seed)
    originals = []
    for event in claimed:
        message_id = str(rng.randrange(10**15, 10**16))
        body = json.dumps(
            published_event(events.encode_event(event), message_id=message_id, now=now),
            separators=(",", ":"),
        ).encode()
        originals.append(Delivery(event.event_id, message_id, body, redelivery=False))
    again = [
        Delivery(d.event_id, d.message_id, d.body, redelivery=True)
        for d in rng.sample(originals, duplicates)
    ]
    deliveries = originals + again
    rng.shuffle(deliveries)
    return deliveries


# --- running a phase -----------------------------------------------------------------------------

Handler = Callable[[Delivery], str]  # returns "applied", "duplicate", "ok" or "failed: …"


@dataclass
class PhaseRun:
    answers: list[harness.Timed[Delivery, str]]
    not_issued: int
    clock: harness.Phase
    rpcs: RpcCounts


def run_phase(
    name: str,
    deliveries: Sequence[Delivery],
    make_handler: Callable[[], Handler],
    *,
    concurrency: int,
    cap_seconds: float | None,
    emulator_pid: int | None,
    rpcs: RpcCounter,
) -> PhaseRun:
    """`concurrency` threads, each with its own handler, take deliveries in order until none
    are left or the cap has passed (then in-flight deliveries finish)."""
    calls = harness.TimedCalls(
        deliveries,
        make_handler,
        concurrency,
        lambda exc: f"failed: {failure_kind(exc)}",
        name=name,
    )
    before = rpcs.snapshot()
    with harness.timed(emulator_pid) as clock:
        calls.go(time.perf_counter() + cap_seconds if cap_seconds else None)
        calls.wait(
            progress=lambda n: log.info("%s: %d/%d deliveries issued", name, n, len(deliveries))
        )
    return PhaseRun(calls.answers, calls.not_issued, clock, rpcs.snapshot() - before)


def failure_kind(exc: BaseException) -> str:
    """The exception's type; for the client's 'exceeded max attempts' ValueError, its cause."""
    cause = exc.__cause__
    if isinstance(exc, ValueError) and isinstance(cause, gexc.GoogleAPIError):
        return f"{type(exc).__name__}({type(cause).__name__})"
    return type(exc).__name__


# --- the designs ---------------------------------------------------------------------------------


def decode(delivery: Delivery) -> events.Event:
    """What the usage trigger does with the CloudEvent's data, without Flask or cloudevents."""
    envelope = json.loads(delivery.body)
    return events.parse_event(base64.b64decode(envelope["data"]["message"]["data"], validate=True))


def function_handlers(app: Any) -> Callable[[], Handler]:
    def make() -> Handler:
        client = app.test_client()  # a Flask test client is not thread-safe: one per thread

        def handle(delivery: Delivery) -> str:
            response = client.post(
                "/", data=delivery.body, content_type="application/cloudevents+json"
            )
            if response.status_code == 200:
                return "ok"
            return f"failed: HTTP {response.status_code}"  # the cause: _ExceptionCounter

        return handle

    return make


def direct_handlers(counters: ShardedCounters) -> Callable[[], Handler]:
    def handle(delivery: Delivery) -> str:
        return "applied" if counters.apply(decode(delivery)) else "duplicate"

    return lambda: handle


def counter_ref(db: firestore.Client, campaign_id: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = counter_config_ref(db, campaign_id).parent.document(
        SINGLE_COUNTER
    )
    return ref


def transaction_handlers(db: firestore.Client) -> Callable[[], Handler]:
    """The naive design: read marker and counter in a transaction, write marker + counter+1."""

    def handle(delivery: Delivery) -> str:
        event = decode(delivery)
        marker = processed_event_ref(db, event.campaign_id, event.event_id)
        counter = counter_ref(db, event.campaign_id)

        @firestore.transactional
        def apply(transaction: firestore.Transaction) -> bool:
            snapshots = {
                s.reference.path: s for s in db.get_all([marker, counter], transaction=transaction)
            }
            if snapshots[marker.path].exists:
                return False
            claimed = int((snapshots[counter.path].to_dict() or {}).get("claimed", 0))
            transaction.create(marker, {"type": event.type.value, "applied_at": utcnow()})
            transaction.set(counter, {"claimed": claimed + 1}, merge=True)
            return True

        applied: bool = apply(db.transaction())
        return "applied" if applied else "duplicate"

    return lambda: handle


def increment_handlers(db: firestore.Client) -> Callable[[], Handler]:
    """One document, no sharding: marker create + Increment(1) in one atomic batch."""

    def handle(delivery: Delivery) -> str:
        event = decode(delivery)
        batch = db.batch()
        batch.create(
            processed_event_ref(db, event.campaign_id, event.event_id),
            {"type": event.type.value, "applied_at": utcnow()},
        )
        batch.set(
            counter_ref(db, event.campaign_id), {"claimed": firestore.Increment(1)}, merge=True
        )
        try:
            batch.commit()
        except gexc.AlreadyExists:
            return "duplicate"
        return "applied"

    return lambda: handle


# --- set-up and read-back ------------------------------------------------------------------------


def create_campaign(db: firestore.Client, campaign_id: str, *, stock: int) -> None:
    harness.create_campaign(
        db,
        campaign_id=campaign_id,
        title="Counter benchmark",
        codes=(f"BENCH-{i:07d}" for i in range(stock)),
        low_stock_threshold=None,
    )


def count_documents(collection: firestore.CollectionReference) -> int:
    result = collection.count().get()  # type: ignore[no-untyped-call]
    return int(result[0][0].value)


def publications(db: firestore.Client, canary: Canary) -> dict[str, int]:
    return {
        "canary_connections": canary.connections,
        "outbox_docs": count_documents(outbox_collection(db)),
        "announcement_docs": count_documents(campaign_ref(db, CAMPAIGN).collection(ANNOUNCEMENTS)),
    }


def phase_figures(run: PhaseRun, *, total: int, distinct: int) -> dict[str, Any]:
    answers = run.answers
    outcomes = Counter(a.result for a in answers)
    failed = {k: v for k, v in outcomes.items() if k.startswith("failed")}
    succeeded = {a.item.event_id for a in answers if not a.result.startswith("failed")}
    latencies = [a.ms for a in answers]
    wall = harness.wall_seconds(answers)
    cuts = percentiles(latencies)
    return {
        "deliveries_total": total,
        "deliveries_answered": len(answers),
        "deliveries_not_issued": run.not_issued,
        "distinct_events": distinct,
        "events_absorbed": len(succeeded),
        "wall_seconds": wall,
        "events_per_second": per(len(succeeded), wall),
        "deliveries_per_second": per(len(answers), wall),
        "latency_ms": {f"p{p}": cuts.get(p) for p in (50, 95, 99)}
        | {"max": max(latencies, default=None)},
        "outcomes": dict(outcomes),
        "failures": sum(failed.values()),
        "failure_kinds": failed,
        "cpu_seconds": run.clock.cpu_seconds,
        "emulator_cpu_seconds": run.clock.emulator_cpu_seconds,
        # Per delivery answered: what the load of other processes on the machine changes least.
        "cpu_ms_per_delivery": per(run.clock.cpu_seconds * 1000, len(answers)),
        "emulator_cpu_ms_per_delivery": per(
            None
            if run.clock.emulator_cpu_seconds is None
            else run.clock.emulator_cpu_seconds * 1000,
            len(answers),
        ),
        "reads_per_delivery": per(run.rpcs.documents_read, len(answers)),
        "writes_per_delivery": per(run.rpcs.writes, len(answers)),
        "rpcs": run.rpcs.as_dict(),
        "load_after": run.clock.load[1],
        "_absorbed_ids": succeeded,
    }


def exactness(db: firestore.Client, figures: dict[str, Any], final: int) -> None:
    """The count against N and against the markers (written in the same atomic batch or
    transaction): nothing acknowledged may be missing; an event counted although every delivery
    of it failed (a failure after the commit) is fine, its redelivery would find the marker."""
    acknowledged: set[str] = figures.pop("_absorbed_ids")
    marked = {
        s.id
        for s in campaign_ref(db, CAMPAIGN).collection(PROCESSED_EVENTS).select(["type"]).stream()
    }
    figures["final_count"] = final
    figures["markers"] = len(marked)
    figures["exact"] = final == figures["distinct_events"]
    figures["count_equals_markers"] = final == len(marked)
    figures["acknowledged_not_counted"] = len(acknowledged - marked)
    figures["counted_not_acknowledged"] = len(marked - acknowledged)


def sharded_readback(
    db: firestore.Client, counters: ShardedCounters, figures: dict[str, Any]
) -> None:
    totals = counters.totals(CAMPAIGN)
    figures["shard_docs"] = totals.shards
    figures["config_shards"] = (counter_config_ref(db, CAMPAIGN).get().to_dict() or {}).get(
        "shards"
    )
    exactness(db, figures, totals.claimed)


def single_doc_readback(db: firestore.Client, figures: dict[str, Any]) -> None:
    final = int((counter_ref(db, CAMPAIGN).get().to_dict() or {}).get("claimed", 0))
    exactness(db, figures, final)


# --- the table -----------------------------------------------------------------------------------


def _check(value: bool) -> str:
    """A property that must hold: its failure stands out."""
    return "yes" if value else "NO"


def _rate(value: float | None) -> str:
    """Small rates keep two significant digits: 0.031/s is not 0.0/s."""
    if value is None or value >= 10:
        return fmt(value)
    return f"{value:.2g}"


def _failures(f: Any) -> str:
    if not f["failures"]:
        return "0"
    # For count_usage, the exceptions behind its HTTP 500s.
    kinds = sorted(
        (f.get("function_exceptions") or f["failure_kinds"]).items(), key=lambda kv: -kv[1]
    )
    shown = ", ".join(f"{kind.removeprefix('failed: ')} {n}" for kind, n in kinds[:2])
    return f"{f['failures']:,} ({shown})"


def _shards(f: Any) -> str:
    if "shard_docs" not in f:
        return "1 (unsharded)"
    return f"{fmt(f.get('shard_docs'))}/{fmt(f.get('config_shards'))}"


def _doublings(f: Any) -> str:
    if "doublings" not in f:
        return "-"
    return f"{f['doublings']} ({','.join(map(str, f['grown_to'])) or '-'})"


ROWS: list[Row | str] = [
    ("deliveries answered", lambda f: f"{f['deliveries_answered']:,}/{f['deliveries_total']:,}"),
    ("wall time (s)", lambda f: fmt(f["wall_seconds"], 2)),
    ("events absorbed/s", lambda f: _rate(f["events_per_second"])),
    ("deliveries/s", lambda f: _rate(f["deliveries_per_second"])),
    (
        "latency p50/p95/p99 (ms)",
        lambda f: "/".join(fmt(f["latency_ms"][p], 0) for p in ("p50", "p95", "p99")),
    ),
    ("latency max (ms)", lambda f: fmt(f["latency_ms"]["max"], 0)),
    ("failed deliveries", _failures),
    ("final count (of N)", lambda f: f"{f['final_count']:,} of {f['distinct_events']:,}"),
    ("exact (= N)", lambda f: _check(f["exact"])),
    ("count = markers", lambda f: _check(f["count_equals_markers"])),
    ("acknowledged, not counted", lambda f: fmt(f["acknowledged_not_counted"])),
    ("counted, delivery failed", lambda f: fmt(f["counted_not_acknowledged"])),
    ("shards at end (docs/config)", _shards),
    ("doublings (grown to)", _doublings),
    ("ShardedCounters.growths", lambda f: fmt(f.get("growths_reported"))),
    ("contended commits", lambda f: fmt(f.get("contended_commits"))),
    (
        "reads/writes per delivery",
        lambda f: "/".join(fmt(f[k], 2) for k in ("reads_per_delivery", "writes_per_delivery")),
    ),
    ("bench CPU (s)", lambda f: fmt(f["cpu_seconds"])),
    ("emulator CPU (s)", lambda f: fmt(f["emulator_cpu_seconds"])),
    (
        "CPU ms/delivery (bench+emu)",
        lambda f: f"{fmt(f['cpu_ms_per_delivery'], 2)}+{fmt(f['emulator_cpu_ms_per_delivery'], 2)}",
    ),
    ("load avg after (1 min)", lambda f: fmt(f["load_after"], 2)),
]


RATIOS = {
    ("function", "transaction"): "sharded count_usage vs 1-doc transaction",
    ("direct", "transaction"): "sharded direct vs 1-doc transaction",
    ("direct", "increment"): "sharded direct vs 1-doc Increment (no sharding)",
    ("function", "direct"): "sharded count_usage vs sharded direct (the function path's cost)",
}


def ratio(results: dict[str, dict[str, Any]], a: str, b: str) -> float | None:
    if a not in results or b not in results:
        return None
    return per(results[a]["events_per_second"], results[b]["events_per_second"])


# --- the benchmark -------------------------------------------------------------------------------


OPTIONS: list[harness.Option] = [
    ("--events", harness.positive, 5000, "distinct events (N)"),
    ("--duplicates", int, 500, "redeliveries of some of them"),
    ("--concurrency", harness.positive, 32, "concurrent deliveries"),
    ("--baseline-cap-seconds", float, 60.0, "the transaction design gets no delivery after this"),
    ("--stock", int, 0, "codes in the campaign: 0, or more than --events (else it sells out)"),
    ("--designs", str, ",".join(DESIGNS), "comma-separated subset of the designs"),
    ("--seed", int, 7, "shuffle and duplicate choice"),
    ("--function-log", Path, None, "where the function's JSON log lines go (default: temp)"),
]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__, prog="counters", options=OPTIONS)
    args = parser.parse_args(argv)
    designs = harness.chosen(parser, "--designs", args.designs, DESIGNS)
    args.designs = [d for d in DESIGNS if d in designs]
    if args.baseline_cap_seconds <= 0:
        parser.error("--baseline-cap-seconds must be positive")
    if not 0 <= args.duplicates <= args.events:
        parser.error("--duplicates must be between 0 and --events")
    if args.stock and args.stock <= args.events:
        parser.error("--stock must be 0 or more than --events (else the campaign sells out)")
    return args


def warm_up(app: Any, db: firestore.Client) -> None:
    """Build count_usage's services and open its channel, on a campaign of its own."""
    create_campaign(db, WARMUP_CAMPAIGN, stock=0)
    now = utcnow()
    client = app.test_client()
    warm_up_events = add_claims(db, claim_records(WARMUP_CAMPAIGN, WARMUP_EVENTS, now=now))
    for delivery in make_deliveries(warm_up_events, duplicates=0, seed=0, now=now):
        response = client.post("/", data=delivery.body, content_type="application/cloudevents+json")
        if response.status_code != 200:
            raise RuntimeError(
                f"warm-up delivery answered {response.status_code}: "
                f"{response.get_data(as_text=True)[:500]}"
            )


@dataclass
class Run:
    """What every design of one benchmark run shares."""

    args: argparse.Namespace
    emulators: harness.Emulators
    canary: Canary
    logs: Logs
    app: Any
    db: firestore.Client
    rpcs: RpcCounter
    claims: list[ClaimRecord]
    deliveries: list[Delivery]

    def design(self, design: str) -> dict[str, Any]:
        self.emulators.reset()
        create_campaign(self.db, CAMPAIGN, stock=self.args.stock)
        add_claims(self.db, self.claims)
        self.logs.usage.take()
        self.logs.exceptions.take()
        counters = ShardedCounters(db=self.db, settings=get_settings(), clock=utcnow)
        growths_before = instance_services().counters.growths
        handlers = {
            "function": lambda: function_handlers(self.app),
            "direct": lambda: direct_handlers(counters),
            "transaction": lambda: transaction_handlers(self.db),
            "increment": lambda: increment_handlers(self.db),
        }
        cap = self.args.baseline_cap_seconds if design == "transaction" else None
        log.info("%s: running%s", TITLES[design], f" (cap {cap:.0f} s)" if cap else "")
        run = run_phase(
            design,
            self.deliveries,
            handlers[design](),
            concurrency=self.args.concurrency,
            cap_seconds=cap,
            emulator_pid=self.emulators.firestore_pid,
            rpcs=self.rpcs,
        )
        figures = phase_figures(run, total=len(self.deliveries), distinct=self.args.events)
        logged, grown_to = self.logs.usage.take()
        if design == "function":
            figures["function_exceptions"] = dict(self.logs.exceptions.take())
        if design in ("function", "direct"):
            # Doublings: the distinct sizes the shards were grown to. ShardedCounters.growths and
            # the "counter shards grown" log count every writer that saw a growth.
            figures["doublings"] = len(grown_to)
            figures["grown_to"] = sorted(grown_to)
            figures["growths_reported"] = (
                instance_services().counters.growths - growths_before
                if design == "function"
                else counters.growths
            )
            figures["grown_log_records"] = logged["counter shards grown"]
            figures["contended_commits"] = logged["counter write contended"]
            sharded_readback(self.db, counters, figures)
        else:
            single_doc_readback(self.db, figures)
        figures["pubsub"] = publications(self.db, self.canary)
        log.info(
            "%s: %.3g events/s, %d failures, count %d of %d",
            TITLES[design],
            figures["events_per_second"] or 0.0,
            figures["failures"],
            figures["final_count"],
            self.args.events,
        )
        return figures


def report(args: argparse.Namespace, results: dict[str, dict[str, Any]], total: int) -> bool:
    """Print the table and the ratios; whether every design kept its count."""
    print(
        f"\nUsage counters: {args.events:,} coupon.claimed events + {args.duplicates:,} "
        f"redeliveries = {total:,} deliveries, {args.concurrency} concurrent, one campaign"
        f" (stock {args.stock:,}), Firestore emulator, {os.cpu_count()} CPUs\n"
    )
    print(harness.compare({TITLES[d]: f for d, f in results.items()}, ROWS))
    print()
    for (a, b), label in RATIOS.items():
        value = ratio(results, a, b)
        if value is not None:
            shown = f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
            print(f"events/s, {label}: {shown}x")
    if "transaction" in results and results["transaction"]["deliveries_not_issued"]:
        print(
            f"(the transactional baseline hit its {args.baseline_cap_seconds:.0f} s cap: its"
            " rate is over the deliveries it answered)"
        )
    published = {d: f["pubsub"] for d, f in results.items() if any(f["pubsub"].values())}
    print(
        "Pub/Sub: nothing published (canary untouched, no outbox or announcement documents)"
        if not published
        else f"Pub/Sub: SOMETHING PUBLISHED OR TRIED TO: {published}"
    )
    ok = not published
    for design, figures in results.items():
        # Every design must keep its count equal to its markers and lose nothing acknowledged;
        # the sharded path must also absorb everything.
        ok = ok and figures["count_equals_markers"] and not figures["acknowledged_not_counted"]
        if design == "function":
            ok = ok and figures["exact"] and not figures["failures"]
    return ok


def bench(
    args: argparse.Namespace, emulators: harness.Emulators, canary: Canary, logs: Logs
) -> int:
    from functions_framework import create_app

    settings = get_settings()
    db = instance_services().db
    log.info(
        "counter settings: initial shards %d, max %d, attempts %d, contention threshold %.1f s",
        settings.counter_initial_shards,
        settings.counter_max_shards,
        settings.counter_max_attempts,
        settings.counter_contention_seconds,
    )
    now = utcnow()
    claims = claim_records(CAMPAIGN, args.events, now=now)
    deliveries = make_deliveries(
        [coupon_claimed(claim) for claim in claims],
        duplicates=args.duplicates,
        seed=args.seed,
        now=now,
    )
    log.info(
        "%d deliveries (%d events + %d redeliveries), concurrency %d, load %s",
        len(deliveries),
        args.events,
        args.duplicates,
        args.concurrency,
        harness.shown_load(),
    )
    app = create_app(FUNCTION, str(MAIN), "cloudevent")  # type: ignore[no-untyped-call]
    if "function" in args.designs:
        warm_up(app, db)
        log.info("count_usage warmed up")
    with RpcCounter(db) as rpcs:
        run = Run(args, emulators, canary, logs, app, db, rpcs, claims, deliveries)
        results = {design: run.design(design) for design in args.designs}
    ok = report(args, results, len(deliveries))
    harness.write_json(
        args.json,
        {
            "parameters": {
                "events": args.events,
                "duplicates": args.duplicates,
                "deliveries": len(deliveries),
                "concurrency": args.concurrency,
                "baseline_cap_seconds": args.baseline_cap_seconds,
                "stock": args.stock,
                "seed": args.seed,
                "cpus": os.cpu_count(),
                "counter_settings": {
                    "initial_shards": settings.counter_initial_shards,
                    "max_shards": settings.counter_max_shards,
                    "max_attempts": settings.counter_max_attempts,
                    "contention_seconds": settings.counter_contention_seconds,
                },
            },
            "designs": results,
            "ratios": {f"{a}_vs_{b}": ratio(results, a, b) for a, b in RATIOS},
            "ok": ok,
        },
    )
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    emulators = harness.Emulators()
    function_log = args.function_log or emulators.log_dir / "functions.jsonl"
    logs = setup_logging(verbose=args.verbose, function_log=function_log)
    harness.stop_on_sigterm()
    canary = Canary()
    try:
        with emulators:
            # count_usage's publisher points at the canary; nothing else of the stack is there.
            os.environ["PUBSUB_EMULATOR_HOST"] = f"127.0.0.1:{canary.port}"
            for name in ("STORAGE_EMULATOR_HOST", "FIREBASE_AUTH_EMULATOR_HOST", "ENTRY_POINT"):
                os.environ.pop(name, None)
            harness.forget_services()
            code = bench(args, emulators, canary, logs)
            if logs.stderr_filter.suppressed:
                log.info(
                    "%d further warnings/errors of the functions are only in %s",
                    logs.stderr_filter.suppressed,
                    function_log,
                )
                emulators.keep_logs = args.function_log is None
            return code
    except KeyboardInterrupt:
        log.warning("interrupted")
        return 130
    finally:
        canary.close()


if __name__ == "__main__":
    sys.exit(main())
