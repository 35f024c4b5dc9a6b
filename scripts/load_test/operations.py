"""What a sale costs in production's terms, counted where it happens: in each function process
of the load test's stack, the Firestore RPCs and documents its clients read and write
(devkit/firestore_rpcs.py), the Pub/Sub messages it publishes (by type, the events they carry,
their billed bytes, and how many are marked for deliver_webhooks) and the requests it serves
(its invocations: a Pub/Sub push is one).

The load test puts scripts/load_test/counting/ on the stack's PYTHONPATH with FOLDER_ENV naming
a folder: the `sitecustomize` there calls `install()` in every process started with
`--target NAME` (functions-framework), which then writes its totals to FOLDER/NAME-PID.json
every second. `totals()` sums those files by function; the difference of two readings is what
happened in between.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from scripts.bench import cost

FOLDER_ENV = "CODEDROP_COUNT_OPERATIONS"
SITE_DIR = Path(__file__).with_name("counting")
WRITE_EVERY = 1.0
# The functions Pub/Sub pushes to: each of their invocations is a message pushed.
PUSHED = ("count_usage", "deliver_webhooks")
# What an instance reads on its own schedule, whatever its requests: the campaign, the counters'
# totals (stock), the campaign's webhooks (routes).
INSTANCE_READS = ("campaigns", "counters", "counter_shards", "campaign_webhooks")
# Pub/Sub bills each publish and push as at least 1,000 bytes, at $40 a TiB (list, Nov 2026).
PUBSUB_BYTES = 1000
PUBSUB_PER_TIB = 40.0


class _Process:
    """This process's counts, written to its file every WRITE_EVERY seconds."""

    def __init__(self, folder: Path, function: str) -> None:
        self.folder, self.function = folder, function
        self.lock = threading.Lock()
        self.invocations = 0
        self.published: Counter[str] = Counter()
        self.rpc_counters: list[Any] = []
        self.pid = 0
        self._stop = threading.Event()

    def ensure_writer(self) -> None:
        """A writer thread for this process (a forked worker starts its own)."""
        if self.pid == os.getpid():
            return
        with self.lock:
            if self.pid == os.getpid():
                return
            self.pid = os.getpid()
            self._stop = threading.Event()
            threading.Thread(target=self._write_loop, name="count-operations", daemon=True).start()
            atexit.register(self.write)

    def _write_loop(self) -> None:
        while not self._stop.wait(WRITE_EVERY):
            self.write()

    def write(self) -> None:
        from devkit.firestore_rpcs import RpcCounts

        with self.lock:
            counters = list(self.rpc_counters)
            data: dict[str, Any] = {
                "function": self.function,
                "pid": os.getpid(),
                "invocations": self.invocations,
                "published": dict(self.published),
            }
        total = RpcCounts()
        for counter in counters:
            total = total + counter.snapshot()
        data["firestore"] = total.as_dict()
        path = self.folder / f"{self.function}-{os.getpid()}.json"
        temporary = path.with_suffix(".tmp")
        with contextlib.suppress(OSError):
            temporary.write_text(json.dumps(data))
            temporary.replace(path)


def install(folder: Path, function: str) -> None:
    """Count this process's operations (see the module)."""
    import flask
    from google.cloud.firestore_v1.client import Client
    from google.cloud.pubsub_v1 import PublisherClient

    from devkit.firestore_rpcs import RpcCounter
    from shared.events.models import CLAIMED_BATCH
    from shared.gcp.pubsub import Publisher

    process = _Process(folder, function)
    made = Client.__init__
    publish = PublisherClient.publish
    publish_now = Publisher.publish_now
    serve = flask.Flask.wsgi_app

    def counted_client(self: Client, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        counter = RpcCounter(self)
        with process.lock:
            process.rpc_counters.append(counter)

    def count_message(data: bytes, attributes: dict[str, Any]) -> None:
        process.ensure_writer()
        # A batch of claims' events is one message carrying many.
        carried = len(json.loads(data)["claims"]) if attributes.get("type") == CLAIMED_BATCH else 1
        size = len(data) + sum(len(k) + len(v) for k, v in attributes.items())
        with process.lock:
            process.published["messages"] += 1
            process.published["events"] += carried
            process.published["bytes billed"] += max(size, PUBSUB_BYTES)
            process.published[f"type {attributes.get('type')}"] += 1
            if attributes.get("webhooks"):
                process.published["marked for deliver_webhooks"] += 1

    def counted_publish(self: Any, topic: str, data: bytes, **attributes: Any) -> Any:
        count_message(data, attributes)
        return publish(self, topic, data, **attributes)

    def counted_publish_now(self: Any, topic: str, data: bytes, **kwargs: Any) -> None:
        count_message(data, {k: v for k, v in kwargs.items() if k != "timeout"})
        publish_now(self, topic, data, **kwargs)

    def counted_request(self: flask.Flask, environ: Any, start_response: Any) -> Any:
        process.ensure_writer()
        with process.lock:
            process.invocations += 1
        return serve(self, environ, start_response)

    Client.__init__ = counted_client  # type: ignore[method-assign]
    PublisherClient.publish = counted_publish
    Publisher.publish_now = counted_publish_now  # type: ignore[method-assign]
    flask.Flask.wsgi_app = counted_request  # type: ignore[method-assign]


def install_from_environment(argv: list[str]) -> None:
    """install() in a function process of a stack that counts (the sitecustomize's hook)."""
    folder = os.environ.get(FOLDER_ENV)
    if folder and "--target" in argv and argv.index("--target") + 1 < len(argv):
        install(Path(folder), argv[argv.index("--target") + 1])


def environment(folder: Path, base: Mapping[str, str]) -> dict[str, str]:
    """`base` with counting switched on for the functions started with it."""
    path = os.pathsep.join(p for p in (str(SITE_DIR), base.get("PYTHONPATH")) if p)
    return {**base, FOLDER_ENV: str(folder), "PYTHONPATH": path}


def _files(folder: Path) -> Iterator[dict[str, Any]]:
    for path in sorted(folder.glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            yield json.loads(path.read_text())


def totals(folder: Path) -> dict[str, dict[str, Any]]:
    """Every function's counts so far, its processes summed."""
    found: dict[str, dict[str, Any]] = {}
    for data in _files(folder):
        entry = found.setdefault(
            data["function"], {"invocations": 0, "published": Counter(), "firestore": Counter()}
        )
        entry["invocations"] += data["invocations"]
        entry["published"].update(data["published"])
        firestore = data["firestore"]
        entry["firestore"].update(
            {
                "calls": sum(firestore["calls"].values()),
                "documents read": firestore["documents_read"],
                "documents written": firestore["documents_written"],
                "writes rejected": firestore["writes_rejected"],
                **{f"read {c}": n for c, n in firestore["reads_by_collection"].items()},
                **{f"written {c}": n for c, n in firestore["writes_by_collection"].items()},
            }
        )
    return found


def difference(
    after: Mapping[str, Mapping[str, Any]], before: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """What each function did between two readings of totals()."""
    changed: dict[str, dict[str, Any]] = {}
    for function, now in after.items():
        then = before.get(function) or {}
        changed[function] = {
            "invocations": now["invocations"] - then.get("invocations", 0),
            "published": dict(Counter(now["published"]) - Counter(then.get("published") or {})),
            "firestore": dict(Counter(now["firestore"]) - Counter(then.get("firestore") or {})),
        }
    return changed


def reading(target_folder: Path | None) -> dict[str, dict[str, Any]]:
    """totals() once every process has written what it did (none without a folder)."""
    if target_folder is None:
        return {}
    time.sleep(WRITE_EVERY * 1.5)
    return totals(target_folder)


def per_claim(
    changed: Mapping[str, Mapping[str, Any]],
    cpu_ms_per_shopper: Mapping[str, float],
    *,
    claims: int,
    shoppers: int,
) -> dict[str, Any]:
    """The sale in production's terms: per code sold, Firestore documents read and written,
    Pub/Sub messages published and pushed (and the events the published ones carried: a batch
    of claims is one message), invocations by function; and dollars per cost.PER_CLAIMS codes
    sold at list prices (scripts/bench/cost.py), the functions' CPU as sampled (their
    vCPU-seconds and memory), requests, Firestore, and Pub/Sub's throughput (each message's
    bytes, at least PUBSUB_BYTES).

    Counted on this stack, where claim_api's 2 processes stand for 2 instances. More instances
    add only the reads each makes on its own schedule (its caches: INSTANCE_READS); the total at
    64 instances multiplies those by 32, an estimate (the rest is per request)."""
    claims = max(claims, 1)

    def each(value: float) -> float:
        return round(value / claims, 3)

    reads = sum(f["firestore"].get("documents read", 0) for f in changed.values())
    writes = sum(f["firestore"].get("documents written", 0) for f in changed.values())
    invocations = {name: f["invocations"] for name, f in changed.items() if f["invocations"]}
    pushes = sum(n for name, n in invocations.items() if name in PUSHED)
    published = sum(f["published"].get("messages", 0) for f in changed.values())
    # Claims' events ride many to a message (shared/claims/events.py): messages are what Pub/Sub
    # bills and pushes, events what they carry.
    carried = sum(f["published"].get("events", 0) for f in changed.values())
    published_bytes = sum(
        f["published"].get("bytes billed", f["published"].get("messages", 0) * PUBSUB_BYTES)
        for f in changed.values()
    )
    # A push delivers one of the messages published: billed at their mean size.
    pushed_bytes = pushes * published_bytes / published if published else 0.0
    cpu_seconds = sum(cpu_ms_per_shopper.get(name, 0.0) for name in changed) * shoppers / 1000
    scale = cost.PER_CLAIMS / claims
    own_schedule = sum(
        f["firestore"].get(f"read {collection}", 0)
        for f in changed.values()
        for collection in INSTANCE_READS
    )
    dollars = {
        "firestore_reads": reads * scale * cost.READ_PER_100K / 100_000,
        "firestore_writes": writes * scale * cost.WRITE_PER_100K / 100_000,
        "function_cpu_and_memory": cpu_seconds
        * scale
        * (cost.VCPU_SECOND + cost.CLAIM_API_GIB * cost.GIB_SECOND),
        "function_requests": sum(invocations.values()) * scale * cost.REQUEST_PER_MILLION / 1e6,
        "pubsub_throughput": (published_bytes + pushed_bytes) * scale * PUBSUB_PER_TIB / 2**40,
    }
    return {
        "claims": claims,
        "per_claim": {
            "firestore_documents_read": each(reads),
            "of_which_on_instances_own_schedule": each(own_schedule),
            "firestore_documents_written": each(writes),
            "pubsub_messages_published": each(published),
            "pubsub_events_published": each(carried),
            "pubsub_messages_pushed": each(pushes),
            "invocations": {name: each(n) for name, n in sorted(invocations.items())},
            "function_cpu_ms": each(cpu_seconds * 1000),
        },
        f"dollars_per_{cost.PER_CLAIMS}_claims": {
            **{k: round(v, 5) for k, v in dollars.items()},
            "total": round(sum(dollars.values()), 5),
            "total_at_64_instances": round(
                sum(dollars.values())
                + own_schedule * (64 / 2 - 1) * scale * cost.READ_PER_100K / 100_000,
                5,
            ),
        },
        "by_function": {name: dict(f) for name, f in sorted(changed.items())},
    }
