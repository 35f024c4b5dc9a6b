"""Usage-counter benchmark: count_usage's sharded counters against one-document designs.

    .venv/bin/python scripts/bench_counters.py [--events 5000] [--duplicates 500]
        [--concurrency 32] [--baseline-cap-seconds 60] [--stock 0] [--seed 7]
        [--designs function,direct,transaction,increment] [--function-log PATH]
        [--json PATH] [-v]

One campaign, `--events` distinct coupon.claimed events plus `--duplicates` redeliveries of
some of them (same Pub/Sub message id), shuffled and delivered by `--concurrency` threads. Each
design starts from a reset emulator with the campaign freshly created; all designs get the same
deliveries in the same order.

  function     the real path: functions_framework.create_app("count_usage", functions/main.py,
               "cloudevent"), the messagePublished CloudEvent POSTed as structured JSON through
               one Flask test client per thread; UsageService.handle, i.e. UsageCounters.apply
               (marker + random shard, growing on contention) and check_stock.
  direct       the same UsageCounters.apply called in-process (decode + apply, no Flask, no
               check_stock): the sharded design's own cost.
  transaction  the naive design: one counter document, a transaction per event that reads the
               marker and the counter and writes marker + counter+1 (default db.transaction(),
               whose client retries aborted commits); capped at --baseline-cap-seconds.
  increment    one counter document, no sharding: marker create + Increment(1) in one batch.

The two one-document designs decode the envelope exactly as `direct` does. Reported per
design: wall time (first delivery started to last answered), events absorbed per second,
latency per delivery, failures, the count read back and whether it is exact, shards and
growths, and the CPU time of this process and of the emulator during the phase. The function's
own JSON logs go to --function-log (a temporary file unless given), not to stdout.

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
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# Importing shared builds nothing: settings, the client and the services are built on first use,
# after main() has put the emulator into the environment (and cleared the caches anyway).
from google.api_core import exceptions as gexc  # noqa: E402
from google.cloud import firestore  # noqa: E402

from emulator import RunningEmulator, free_port, reset_firestore, start_firestore  # noqa: E402
from shared import campaign_service, coupon_store, events, firestore_db, runtime  # noqa: E402
from shared import settings as settings_module  # noqa: E402
from shared.clock import utcnow  # noqa: E402
from shared.event_bus import ANNOUNCEMENTS, OUTBOX, PROCESSED, processed_ref  # noqa: E402
from shared.firestore_db import campaign_ref  # noqa: E402
from shared.models import CampaignCreate  # noqa: E402
from shared.structured_logging import JsonFormatter  # noqa: E402
from shared.usage_counters import UsageCounters  # noqa: E402

log = logging.getLogger("bench_counters")

PROJECT = "demo-codedrop-bench"
CAMPAIGN = "bench-counters"
WARMUP_CAMPAIGN = "bench-warmup"
WARMUP_EVENTS = 16
MAIN = REPO / "functions" / "main.py"
TOPIC = "coupon-events"
SUBSCRIPTION = "count-usage-push"
COUNTER_DOC = ("counters", "single")  # the one-document designs' counter, under the campaign
PROGRESS_SECONDS = 5.0
DESIGNS = ("function", "direct", "transaction", "increment")
TITLES = {
    "function": "sharded count_usage",
    "direct": "sharded direct",
    "transaction": "1 doc transaction",
    "increment": "1 doc Increment",
}
USAGE_LOGGER = "shared.usage_counters"
FUNCTION = "count_usage"


# --- logging --------------------------------------------------------------------------------------


class _StderrFilter(logging.Filter):
    """The benchmark's own records; of everyone else's, the first few warnings and errors."""

    OWN = ("bench_counters", "emulator")

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
    """Counts shared.usage_counters' contention and growth records (the function's own log)."""

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


def setup_logging(
    *, verbose: bool, function_log: Path
) -> tuple[_StderrFilter, _UsageLogCounter, _ExceptionCounter]:
    """stderr: our progress; the function's JSON lines (as on Cloud Functions) to a file.

    The JSON handler is installed before functions/main.py runs configure_logging(), which
    then keeps it instead of writing JSON to stdout, where the table goes.
    """
    root = logging.getLogger()
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    stderr_filter = _StderrFilter()
    stderr.addFilter(stderr_filter)
    function_log.parent.mkdir(parents=True, exist_ok=True)
    json_lines = logging.FileHandler(function_log, mode="w")
    json_lines.setFormatter(JsonFormatter())
    root.handlers = [stderr, json_lines]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("google", "grpc", "urllib3", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.INFO)
    usage_counter = _UsageLogCounter()
    logging.getLogger(USAGE_LOGGER).addHandler(usage_counter)
    exception_counter = _ExceptionCounter()
    logging.getLogger(FUNCTION).addHandler(exception_counter)
    return stderr_filter, usage_counter, exception_counter


# --- the Pub/Sub canary ---------------------------------------------------------------------------


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


# --- the load -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    event_id: str
    message_id: str
    body: bytes  # the messagePublished CloudEvent, structured JSON
    redelivery: bool


def published_event(payload: bytes, *, message_id: str, now: datetime) -> dict[str, Any]:
    """A Pub/Sub push delivery as count_usage receives it (as tests/conftest.published_event)."""
    published = now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    event_id = json.loads(payload).get("event_id", "")
    event_type = json.loads(payload).get("type", "")
    return {
        "specversion": "1.0",
        "id": message_id,
        "source": f"//pubsub.googleapis.com/projects/{PROJECT}/topics/{TOPIC}",
        "type": "google.cloud.pubsub.topic.v1.messagePublished",
        "time": published,
        "datacontenttype": "application/json",
        "data": {
            "message": {
                "data": base64.b64encode(payload).decode(),
                "attributes": {"event_id": event_id, "type": event_type},
                "messageId": message_id,
                "message_id": message_id,
                "publishTime": published,
                "publish_time": published,
            },
            "subscription": f"projects/{PROJECT}/subscriptions/{SUBSCRIPTION}",
        },
    }


def claimed_events(campaign_id: str, count: int, *, now: datetime) -> list[events.CouponClaimed]:
    claimed = []
    for i in range(count):
        claim_id = f"u{i:06d}-0"
        claimed.append(
            events.CouponClaimed(
                event_id=f"claimed.{campaign_id}.{claim_id}",
                campaign_id=campaign_id,
                occurred_at=now,
                coupon_id=f"c{i:06d}",
                user_id=f"user-{i:06d}",
                claim_id=claim_id,
            )
        )
    return claimed


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


# --- running a phase ------------------------------------------------------------------------------

Handler = Callable[[Delivery], str]  # returns "applied", "duplicate", "ok" or "failed: …"


@dataclass
class Answer:
    delivery: Delivery
    started: float
    finished: float
    outcome: str


@dataclass
class Phase:
    answers: list[Answer]
    not_issued: int
    wall_seconds: float
    cpu_seconds: float
    emulator_cpu_seconds: float | None
    load: tuple[float, float, float]
    errors: list[str] = field(default_factory=list)


def process_cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of a process (all threads), from /proc; None if unknown."""
    if pid is None:
        return None
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_phase(
    name: str,
    deliveries: Sequence[Delivery],
    make_handler: Callable[[], Handler],
    *,
    concurrency: int,
    cap_seconds: float | None,
    emulator_pid: int | None,
) -> Phase:
    """`concurrency` threads, each with its own handler, take deliveries in order until none
    are left or the cap has passed (then in-flight deliveries finish)."""
    lock = threading.Lock()
    position = 0
    answers: list[Answer] = []
    errors: list[str] = []
    clock: dict[str, float] = {}

    def start() -> None:  # the barrier's action: runs once, before any worker is released
        clock["start"] = time.monotonic()
        clock["deadline"] = clock["start"] + cap_seconds if cap_seconds else float("inf")

    barrier = threading.Barrier(concurrency, action=start)

    def worker() -> None:
        nonlocal position
        try:
            handler = make_handler()
        except Exception as exc:
            errors.append(f"handler setup: {exc!r}")
            barrier.abort()
            return
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return
        mine: list[Answer] = []
        try:
            while True:
                with lock:
                    if position >= len(deliveries) or time.monotonic() >= clock["deadline"]:
                        break
                    delivery = deliveries[position]
                    position += 1
                began = time.perf_counter()
                try:
                    outcome = handler(delivery)
                except Exception as exc:
                    outcome = f"failed: {failure_kind(exc)}"
                mine.append(Answer(delivery, began, time.perf_counter(), outcome))
        finally:
            with lock:
                answers.extend(mine)

    threads = [
        threading.Thread(target=worker, name=f"{name}-{i}", daemon=True) for i in range(concurrency)
    ]
    cpu_before = time.process_time()
    emulator_before = process_cpu_seconds(emulator_pid)
    for thread in threads:
        thread.start()
    last_report = time.monotonic()
    for thread in threads:
        while thread.is_alive():
            thread.join(timeout=0.5)
            if time.monotonic() - last_report >= PROGRESS_SECONDS:
                last_report = time.monotonic()
                with lock:
                    issued = position
                log.info("%s: %d/%d deliveries issued", name, issued, len(deliveries))
    cpu = time.process_time() - cpu_before
    emulator_after = process_cpu_seconds(emulator_pid)
    if errors:
        raise RuntimeError(f"{name}: {'; '.join(errors)}")
    wall = 0.0
    if answers:
        wall = max(a.finished for a in answers) - min(a.started for a in answers)
    emulator_cpu = (
        emulator_after - emulator_before
        if emulator_after is not None and emulator_before is not None
        else None
    )
    return Phase(
        answers=answers,
        not_issued=len(deliveries) - position,
        wall_seconds=wall,
        cpu_seconds=cpu,
        emulator_cpu_seconds=emulator_cpu,
        load=os.getloadavg(),
    )


def failure_kind(exc: BaseException) -> str:
    """The exception's type; for the client's 'exceeded max attempts' ValueError, its cause."""
    cause = exc.__cause__
    if isinstance(exc, ValueError) and isinstance(cause, gexc.GoogleAPIError):
        return f"{type(exc).__name__}({type(cause).__name__})"
    return type(exc).__name__


# --- the designs ----------------------------------------------------------------------------------


def decode(delivery: Delivery) -> events.Event:
    """What usage_trigger.handle does with the CloudEvent's data, without Flask or cloudevents."""
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


def direct_handlers(counters: UsageCounters) -> Callable[[], Handler]:
    def make() -> Handler:
        def handle(delivery: Delivery) -> str:
            return "applied" if counters.apply(decode(delivery)) else "duplicate"

        return handle

    return make


def counter_ref(db: firestore.Client, campaign_id: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = (
        campaign_ref(db, campaign_id).collection(COUNTER_DOC[0]).document(COUNTER_DOC[1])
    )
    return ref


def transaction_handlers(db: firestore.Client) -> Callable[[], Handler]:
    """The naive design: read marker and counter in a transaction, write marker + counter+1."""

    def make() -> Handler:
        def handle(delivery: Delivery) -> str:
            event = decode(delivery)
            marker = processed_ref(db, event.campaign_id, event.event_id)
            counter = counter_ref(db, event.campaign_id)

            @firestore.transactional
            def apply(transaction: firestore.Transaction) -> bool:
                snapshots = {
                    s.reference.path: s
                    for s in db.get_all([marker, counter], transaction=transaction)
                }
                if snapshots[marker.path].exists:
                    return False
                claimed = int((snapshots[counter.path].to_dict() or {}).get("claimed", 0))
                transaction.create(marker, {"type": event.type.value, "applied_at": utcnow()})
                transaction.set(counter, {"claimed": claimed + 1}, merge=True)
                return True

            applied: bool = apply(db.transaction())
            return "applied" if applied else "duplicate"

        return handle

    return make


def increment_handlers(db: firestore.Client) -> Callable[[], Handler]:
    """One document, no sharding: marker create + Increment(1) in one atomic batch."""

    def make() -> Handler:
        def handle(delivery: Delivery) -> str:
            event = decode(delivery)
            batch = db.batch()
            batch.create(
                processed_ref(db, event.campaign_id, event.event_id),
                {"type": event.type.value, "applied_at": utcnow()},
            )
            batch.set(
                counter_ref(db, event.campaign_id),
                {"claimed": firestore.Increment(1)},
                merge=True,
            )
            try:
                batch.commit()
            except gexc.AlreadyExists:
                return "duplicate"
            return "applied"

        return handle

    return make


# --- set-up and read-back -------------------------------------------------------------------------


def create_campaign(db: firestore.Client, campaign_id: str, *, stock: int) -> None:
    now = utcnow()
    campaign_service.create_campaign(
        db,
        data=CampaignCreate(
            campaign_id=campaign_id,
            title="Counter benchmark",
            starts_at=now - timedelta(minutes=5),
            ends_at=now + timedelta(hours=2),
            low_stock_threshold=None,
        ),
        now=now,
    )
    if stock:
        coupon_store.add_codes(
            db,
            campaign_id=campaign_id,
            codes=(f"BENCH-{i:07d}" for i in range(stock)),
            now=now,
        )


def count_documents(collection: firestore.CollectionReference) -> int:
    result = collection.count().get()  # type: ignore[no-untyped-call]
    return int(result[0][0].value)


def publications(db: firestore.Client, canary: Canary) -> dict[str, int]:
    return {
        "canary_connections": canary.connections,
        "outbox_docs": count_documents(db.collection(OUTBOX)),
        "announcement_docs": count_documents(campaign_ref(db, CAMPAIGN).collection(ANNOUNCEMENTS)),
    }


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """Linear interpolation between closest ranks."""
    if not sorted_values:
        return None
    rank = (len(sorted_values) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def per_delivery(seconds: float | None, phase: Phase) -> float | None:
    if seconds is None or not phase.answers:
        return None
    return seconds * 1000 / len(phase.answers)


def phase_figures(phase: Phase, *, total: int, distinct: int) -> dict[str, Any]:
    outcomes = Counter(a.outcome for a in phase.answers)
    failed = {k: v for k, v in outcomes.items() if k.startswith("failed")}
    succeeded = {a.delivery.event_id for a in phase.answers if not a.outcome.startswith("failed")}
    latencies = sorted((a.finished - a.started) * 1000 for a in phase.answers)
    wall = phase.wall_seconds
    return {
        "deliveries_total": total,
        "deliveries_answered": len(phase.answers),
        "deliveries_not_issued": phase.not_issued,
        "distinct_events": distinct,
        "events_absorbed": len(succeeded),
        "wall_seconds": wall,
        "events_per_second": len(succeeded) / wall if wall else None,
        "deliveries_per_second": len(phase.answers) / wall if wall else None,
        "latency_ms": {f"p{p}": percentile(latencies, p) for p in (50, 95, 99)}
        | {"max": latencies[-1] if latencies else None},
        "outcomes": dict(outcomes),
        "failures": sum(failed.values()),
        "failure_kinds": failed,
        "cpu_seconds": phase.cpu_seconds,
        "emulator_cpu_seconds": phase.emulator_cpu_seconds,
        # Per delivery answered: what the load of other processes on the machine changes least.
        "cpu_ms_per_delivery": per_delivery(phase.cpu_seconds, phase),
        "emulator_cpu_ms_per_delivery": per_delivery(phase.emulator_cpu_seconds, phase),
        "load_after": list(phase.load),
        "_absorbed_ids": succeeded,
    }


def exactness(db: firestore.Client, figures: dict[str, Any], final: int) -> None:
    """The count against N and against the markers (written in the same atomic batch or
    transaction): nothing acknowledged may be missing; an event counted although every delivery
    of it failed (a failure after the commit) is fine, its redelivery would find the marker."""
    acknowledged: set[str] = figures.pop("_absorbed_ids")
    marked = {
        s.id for s in campaign_ref(db, CAMPAIGN).collection(PROCESSED).select(["type"]).stream()
    }
    figures["final_count"] = final
    figures["markers"] = len(marked)
    figures["exact"] = final == figures["distinct_events"]
    figures["count_equals_markers"] = final == len(marked)
    figures["acknowledged_not_counted"] = len(acknowledged - marked)
    figures["counted_not_acknowledged"] = len(marked - acknowledged)


def sharded_readback(
    db: firestore.Client, counters: UsageCounters, figures: dict[str, Any]
) -> None:
    totals = counters.totals(CAMPAIGN)
    config = campaign_ref(db, CAMPAIGN).collection("counters").document("config").get()
    figures["shard_docs"] = totals.shards
    figures["config_shards"] = (config.to_dict() or {}).get("shards")
    exactness(db, figures, totals.claimed)


def single_doc_readback(db: firestore.Client, figures: dict[str, Any]) -> None:
    final = int((counter_ref(db, CAMPAIGN).get().to_dict() or {}).get("claimed", 0))
    exactness(db, figures, final)


# --- the table ------------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _rate(value: float | None) -> str:
    """Small rates keep two significant digits: 0.031/s is not 0.0/s."""
    if value is None or value >= 10:
        return _fmt(value)
    return f"{value:.2g}"


def _failures(f: dict[str, Any]) -> str:
    if not f["failures"]:
        return "0"
    # For count_usage, the exceptions behind its HTTP 500s.
    kinds = sorted(
        (f.get("function_exceptions") or f["failure_kinds"]).items(), key=lambda kv: -kv[1]
    )
    shown = ", ".join(f"{kind.removeprefix('failed: ')} {n}" for kind, n in kinds[:2])
    return f"{f['failures']:,} ({shown})"


ROWS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    (
        "deliveries answered",
        lambda f: f"{f['deliveries_answered']:,}/{f['deliveries_total']:,}",
    ),
    ("wall time (s)", lambda f: _fmt(f["wall_seconds"], 2)),
    ("events absorbed/s", lambda f: _rate(f["events_per_second"])),
    ("deliveries/s", lambda f: _rate(f["deliveries_per_second"])),
    (
        "latency p50/p95/p99 (ms)",
        lambda f: "/".join(_fmt(f["latency_ms"][p], 0) for p in ("p50", "p95", "p99")),
    ),
    ("latency max (ms)", lambda f: _fmt(f["latency_ms"]["max"], 0)),
    ("failed deliveries", _failures),
    (
        "final count (of N)",
        lambda f: f"{f['final_count']:,} of {f['distinct_events']:,}",
    ),
    ("exact (= N)", lambda f: _fmt(f["exact"])),
    ("count = markers", lambda f: _fmt(f["count_equals_markers"])),
    ("acknowledged, not counted", lambda f: _fmt(f["acknowledged_not_counted"])),
    ("counted, delivery failed", lambda f: _fmt(f["counted_not_acknowledged"])),
    (
        "shards at end (docs/config)",
        lambda f: (
            f"{_fmt(f.get('shard_docs'))}/{_fmt(f.get('config_shards'))}"
            if "shard_docs" in f
            else "1 (unsharded)"
        ),
    ),
    (
        "doublings (grown to)",
        lambda f: (
            f"{f['doublings']} ({','.join(map(str, f['grown_to'])) or '-'})"
            if "doublings" in f
            else "-"
        ),
    ),
    (
        "UsageCounters.growths",
        lambda f: _fmt(f.get("growths_reported")),
    ),
    ("contended commits", lambda f: _fmt(f.get("contended_commits"))),
    ("bench CPU (s)", lambda f: _fmt(f["cpu_seconds"])),
    ("emulator CPU (s)", lambda f: _fmt(f["emulator_cpu_seconds"])),
    (
        "CPU ms/delivery (bench+emu)",
        lambda f: (
            f"{_fmt(f['cpu_ms_per_delivery'], 2)}+{_fmt(f['emulator_cpu_ms_per_delivery'], 2)}"
        ),
    ),
    ("load avg after (1 min)", lambda f: _fmt(f["load_after"][0], 2)),
]


def render_table(results: dict[str, dict[str, Any]]) -> str:
    names = list(results)
    width = max(len(label) for label, _ in ROWS)
    cells = {name: [get(results[name]) for _, get in ROWS] for name in names}
    widths = {name: max(len(TITLES[name]), *(len(c) for c in cells[name])) for name in names}
    lines = [
        " " * width + " | " + " | ".join(TITLES[n].rjust(widths[n]) for n in names),
        "-" * width + "-+-" + "-+-".join("-" * widths[n] for n in names),
    ]
    for i, (label, _) in enumerate(ROWS):
        lines.append(
            label.ljust(width) + " | " + " | ".join(cells[n][i].rjust(widths[n]) for n in names)
        )
    return "\n".join(lines)


def ratio(results: dict[str, dict[str, Any]], a: str, b: str) -> float | None:
    if a not in results or b not in results:
        return None
    x, y = results[a]["events_per_second"], results[b]["events_per_second"]
    return x / y if x is not None and y else None


# --- the benchmark --------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark count_usage's sharded counters against one-document designs."
    )
    parser.add_argument("--events", type=int, default=5000, help="distinct events (N)")
    parser.add_argument("--duplicates", type=int, default=500, help="redeliveries of some of them")
    parser.add_argument("--concurrency", type=int, default=32, help="concurrent deliveries")
    parser.add_argument(
        "--baseline-cap-seconds",
        type=float,
        default=60.0,
        help="stop issuing deliveries to the transactional baseline after this long",
    )
    parser.add_argument(
        "--stock",
        type=int,
        default=0,
        help="codes imported into the campaign first (0, or more than --events: a smaller pool "
        "would sell out and count_usage would announce it)",
    )
    parser.add_argument(
        "--designs",
        default=",".join(DESIGNS),
        help=f"comma-separated subset of {','.join(DESIGNS)}",
    )
    parser.add_argument("--seed", type=int, default=7, help="shuffle and duplicate choice")
    parser.add_argument(
        "--function-log", type=Path, help="where the functions' JSON log lines go (default: temp)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    args = parser.parse_args(argv)
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    unknown = sorted(set(designs) - set(DESIGNS))
    if unknown or not designs:
        parser.error(f"--designs: unknown {unknown}; choose from {','.join(DESIGNS)}")
    args.designs = [d for d in DESIGNS if d in designs]
    if args.events < 1 or args.concurrency < 1 or args.baseline_cap_seconds <= 0:
        parser.error("--events, --concurrency and --baseline-cap-seconds must be positive")
    if not 0 <= args.duplicates <= args.events:
        parser.error("--duplicates must be between 0 and --events")
    if args.stock and args.stock <= args.events:
        parser.error("--stock must be 0 or more than --events (else the campaign sells out)")
    return args


def _reset_singletons() -> None:
    """Settings, client and services are built once per process: from this environment."""
    settings_module.get_settings.cache_clear()
    firestore_db.get_db.cache_clear()
    runtime.reset()


def warm_up(app: Any, db: firestore.Client) -> None:
    """Build count_usage's singletons and open its channel, on a campaign of its own."""
    create_campaign(db, WARMUP_CAMPAIGN, stock=0)
    now = utcnow()
    client = app.test_client()
    for delivery in make_deliveries(
        claimed_events(WARMUP_CAMPAIGN, WARMUP_EVENTS, now=now), duplicates=0, seed=0, now=now
    ):
        response = client.post("/", data=delivery.body, content_type="application/cloudevents+json")
        if response.status_code != 200:
            raise RuntimeError(
                f"warm-up delivery answered {response.status_code}: "
                f"{response.get_data(as_text=True)[:500]}"
            )


def bench(
    args: argparse.Namespace,
    *,
    host_port: str,
    emulator_pid: int | None,
    canary: Canary,
    usage_log: _UsageLogCounter,
    exception_log: _ExceptionCounter,
) -> int:
    from functions_framework import create_app

    settings = settings_module.get_settings()
    db = firestore_db.get_db()
    log.info(
        "counter settings: initial shards %d, max %d, attempts %d, contention threshold %.1f s",
        settings.counter_initial_shards,
        settings.counter_max_shards,
        settings.counter_max_attempts,
        settings.counter_contention_seconds,
    )
    now = utcnow()
    claimed = claimed_events(CAMPAIGN, args.events, now=now)
    deliveries = make_deliveries(claimed, duplicates=args.duplicates, seed=args.seed, now=now)
    total, distinct = len(deliveries), args.events
    log.info(
        "%d deliveries (%d events + %d redeliveries), concurrency %d, load %s",
        total,
        distinct,
        args.duplicates,
        args.concurrency,
        " ".join(f"{x:.2f}" for x in os.getloadavg()),
    )

    app = create_app(FUNCTION, str(MAIN), "cloudevent")  # type: ignore[no-untyped-call]
    if "function" in args.designs:
        warm_up(app, db)
        log.info("count_usage warmed up")

    results: dict[str, dict[str, Any]] = {}
    pubsub: dict[str, dict[str, int]] = {}
    for design in args.designs:
        reset_firestore(host_port=host_port, project=PROJECT)
        create_campaign(db, CAMPAIGN, stock=args.stock)
        usage_log.take()
        exception_log.take()
        counters = UsageCounters(db=db, settings=settings, clock=utcnow)
        cap: float | None = None
        growths_before = runtime.get_counters().growths
        if design == "function":
            make = function_handlers(app)
        elif design == "direct":
            make = direct_handlers(counters)
        elif design == "transaction":
            make = transaction_handlers(db)
            cap = args.baseline_cap_seconds
        else:
            make = increment_handlers(db)
        log.info("%s: running%s", TITLES[design], f" (cap {cap:.0f} s)" if cap else "")
        phase = run_phase(
            design,
            deliveries,
            make,
            concurrency=args.concurrency,
            cap_seconds=cap,
            emulator_pid=emulator_pid,
        )
        figures = phase_figures(phase, total=total, distinct=distinct)
        logged, grown_to = usage_log.take()
        raised = exception_log.take()
        if design == "function":
            figures["function_exceptions"] = dict(raised)
        if design in ("function", "direct"):
            # Doublings: the distinct sizes the shards were grown to. UsageCounters.growths and
            # the "counter shards grown" log count every writer that saw a growth.
            figures["doublings"] = len(grown_to)
            figures["grown_to"] = sorted(grown_to)
            figures["growths_reported"] = (
                runtime.get_counters().growths - growths_before
                if design == "function"
                else counters.growths
            )
            figures["grown_log_records"] = logged["counter shards grown"]
            figures["contended_commits"] = logged["counter write contended"]
            sharded_readback(db, counters, figures)
        else:
            single_doc_readback(db, figures)
        pubsub[design] = publications(db, canary)
        figures["pubsub"] = pubsub[design]
        results[design] = figures
        log.info(
            "%s: %.3g events/s, %d failures, count %d of %d",
            TITLES[design],
            figures["events_per_second"] or 0.0,
            figures["failures"],
            figures["final_count"],
            distinct,
        )

    print(
        f"\nUsage counters: {distinct:,} coupon.claimed events + {args.duplicates:,} redeliveries"
        f" = {total:,} deliveries, {args.concurrency} concurrent, one campaign"
        f" (stock {args.stock:,}), Firestore emulator, {os.cpu_count()} CPUs\n"
    )
    print(render_table(results))
    print()
    ratios = {
        "function_vs_transaction": ratio(results, "function", "transaction"),
        "direct_vs_transaction": ratio(results, "direct", "transaction"),
        "direct_vs_increment": ratio(results, "direct", "increment"),
        "function_vs_direct": ratio(results, "function", "direct"),
    }
    labels = {
        "function_vs_transaction": "sharded count_usage vs 1-doc transaction",
        "direct_vs_transaction": "sharded direct vs 1-doc transaction",
        "direct_vs_increment": "sharded direct vs 1-doc Increment (no sharding)",
        "function_vs_direct": "sharded count_usage vs sharded direct (the function path's cost)",
    }
    for key, value in ratios.items():
        if value is not None:
            shown = f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
            print(f"events/s, {labels[key]}: {shown}x")
    if "transaction" in results and results["transaction"]["deliveries_not_issued"]:
        print(
            f"(the transactional baseline hit its {args.baseline_cap_seconds:.0f} s cap: its"
            " rate is over the deliveries it answered)"
        )
    published = {k: v for k, v in pubsub.items() if any(v.values())}
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
    if args.json:
        document = {
            "parameters": {
                "events": distinct,
                "duplicates": args.duplicates,
                "deliveries": total,
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
            "ratios": ratios,
            "ok": ok,
            "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        log.info("figures written to %s", args.json)
    return 0 if ok else 1


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    log_dir = Path(tempfile.mkdtemp(prefix="codedrop-bench-counters-"))
    function_log = args.function_log or log_dir / "functions.jsonl"
    stderr_filter, usage_log, exception_log = setup_logging(
        verbose=args.verbose, function_log=function_log
    )
    signal.signal(signal.SIGTERM, _raise_interrupt)
    emulator: RunningEmulator | None = None
    canary: Canary | None = None
    failed = True
    try:
        emulator = start_firestore(port=free_port(), project=PROJECT, log_dir=log_dir)
        canary = Canary()
        # Before any of shared's cached getters runs (and clear them in case one has).
        os.environ["FIRESTORE_EMULATOR_HOST"] = emulator.host_port
        os.environ["GOOGLE_CLOUD_PROJECT"] = PROJECT
        os.environ["PUBSUB_EMULATOR_HOST"] = f"127.0.0.1:{canary.port}"
        for name in ("STORAGE_EMULATOR_HOST", "FIREBASE_AUTH_EMULATOR_HOST", "ENTRY_POINT"):
            os.environ.pop(name, None)
        _reset_singletons()
        code = bench(
            args,
            host_port=emulator.host_port,
            emulator_pid=emulator.process.pid,
            canary=canary,
            usage_log=usage_log,
            exception_log=exception_log,
        )
        failed = False
        return code
    except KeyboardInterrupt:
        log.warning("interrupted")
        return 130
    finally:
        if canary is not None:
            canary.close()
        if emulator is not None:
            emulator.stop()
        if stderr_filter.suppressed:
            log.info(
                "%d further warnings/errors of the functions are only in %s",
                stderr_filter.suppressed,
                function_log,
            )
        if failed or (stderr_filter.suppressed and args.function_log is None):
            log.warning("emulator and function logs kept in %s", log_dir)
        else:
            with contextlib.suppress(OSError):
                shutil.rmtree(log_dir)
        _reset_singletons()


if __name__ == "__main__":
    sys.exit(main())
