"""Webhook delivery benchmark: events per second delivered to one endpoint and to ten.

    .venv/bin/python -m scripts.bench.webhooks [--events 500] [--events-ten 200]
        [--push-threads 8] [--max-per-second 1000] [--max-in-flight 8] [--throttle 20]
        [--json PATH] [-v]

Starts its own Firestore emulator (free port) and, per scenario, receivers in this process
(devkit/receiver.py, answering 200 at once). Events are synthetic `coupon.claimed`
events of one campaign, handed to the webhook service as deliver_webhooks gets them from Pub/Sub
push: `--push-threads` at a time (one function instance serving that many requests). The clock
runs from the first push until every endpoint has every event (the scheduled drain finishes what
the push-started drains left). After an unmeasured warm-up of 50 events, the scenarios:

  one endpoint   `--events` events, limits --max-per-second / --max-in-flight (high: the figure
                 is the machinery's, not a throttle's)
  ten endpoints  `--events-ten` events to each of ten endpoints, same limits
  throttled      100 events to one endpoint limited to `--throttle` per second (4 in flight):
                 the rate the receiver sees should be that limit

Reported: deliveries (unique events received, summed over endpoints), requests (duplicates
included), seconds, events/s per endpoint and deliveries/s in total, the most requests any
endpoint saw start within one second, and the CPU seconds of this process and of the emulator
per 100 deliveries (both share the machine's cores), with the load average before and after.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from google.cloud import firestore

from devkit.claims import add_claims, claim_record
from devkit.cleanup import delete_tree
from devkit.receiver import Receiver
from scripts.bench import harness
from shared.clock import utcnow
from shared.container import Services
from shared.events.models import Event, EventType, encode_event
from shared.gcp.firestore import webhook_ref
from shared.settings import get_settings
from shared.webhooks.models import WebhookCreate

log = logging.getLogger("bench.webhooks")

OPTIONS: list[harness.Option] = [
    ("--events", harness.positive, 500, "events to one endpoint"),
    ("--events-ten", harness.positive, 200, "events to each of ten endpoints"),
    ("--push-threads", harness.positive, 8, "pushes handled at once"),
    ("--max-per-second", harness.positive, 1000, "the endpoints' rate limit"),
    ("--max-in-flight", harness.positive, 8, "the endpoints' concurrency limit"),
    ("--throttle", harness.positive, 20, "the throttled endpoint's rate limit"),
]


@dataclass(frozen=True)
class Figures:
    scenario: str
    endpoints: int
    events: int
    max_per_second: int
    deliveries: int
    requests: int
    seconds: float
    events_per_second_per_endpoint: float
    deliveries_per_second: float
    most_started_in_a_second: int
    cpu_seconds_per_100: float
    emulator_cpu_seconds_per_100: float | None
    load: tuple[float, float]


def _events(db: firestore.Client, campaign_id: str, count: int) -> list[tuple[Event, bytes]]:
    """Events of claims that exist: deliver_webhooks sends only events their records back."""
    now = utcnow()
    claimed = add_claims(db, [claim_record(campaign_id, n, claimed_at=now) for n in range(count)])
    return [(e, encode_event(e)) for e in claimed]


def scenario(
    services: Services,
    emulators: harness.Emulators,
    *,
    name: str,
    endpoints: int,
    events: int,
    max_per_second: int,
    max_in_flight: int,
    push_threads: int,
) -> Figures:
    webhooks = services.webhooks
    campaign_id = harness.create_campaign(
        services.db, campaign_id=f"bench-{uuid.uuid4().hex[:8]}", title="Webhook benchmark"
    )
    receivers = [Receiver().start() for _ in range(endpoints)]
    try:
        for receiver in receivers:
            webhooks.subscribe(
                campaign_id=campaign_id,
                data=WebhookCreate(
                    url=receiver.url(),
                    events=[EventType.COUPON_CLAIMED],
                    max_per_second=max_per_second,
                    max_in_flight=max_in_flight,
                ),
            )
        batch = _events(services.db, campaign_id, events)
        with harness.timed(emulators.firestore_pid) as phase:
            started = time.monotonic()
            with ThreadPoolExecutor(push_threads) as pool:
                list(pool.map(lambda pair: webhooks.handle(*pair), batch))
            while any(len(r.unique_event_ids()) < events for r in receivers):
                webhooks.drain_due()  # what the sweep does every minute
                time.sleep(0.05)
        seconds = max(r.starts()[-1] for r in receivers) - started
    finally:
        for receiver in receivers:
            receiver.stop()
        for record in webhooks.list_webhooks(campaign_id=campaign_id).webhooks:
            delete_tree(services.db, webhook_ref(services.db, record.webhook_id))
    deliveries = sum(len(r.unique_event_ids()) for r in receivers)
    emulator_cpu = phase.emulator_cpu_seconds
    log.info("%s: %d deliveries in %.2f s", name, deliveries, seconds)
    return Figures(
        scenario=name,
        endpoints=endpoints,
        events=events,
        max_per_second=max_per_second,
        deliveries=deliveries,
        requests=sum(len(r.received) for r in receivers),
        seconds=round(seconds, 2),
        events_per_second_per_endpoint=round(events / seconds, 1),
        deliveries_per_second=round(deliveries / seconds, 1),
        most_started_in_a_second=max(r.max_in_window(1.0) for r in receivers),
        cpu_seconds_per_100=round(phase.cpu_seconds * 100 / deliveries, 2),
        emulator_cpu_seconds_per_100=(
            round(emulator_cpu * 100 / deliveries, 2) if emulator_cpu is not None else None
        ),
        load=phase.load,
    )


def _table(rows: Sequence[Figures]) -> str:
    header = [
        "scenario",
        "endpoints",
        "events",
        "limit/s",
        "deliveries",
        "requests",
        "seconds",
        "events/s/endpoint",
        "deliveries/s",
        "max in 1 s",
        "CPU s/100",
        "emulator CPU s/100",
        "load",
    ]
    return harness.table(
        header,
        [
            [
                f.scenario,
                str(f.endpoints),
                str(f.events),
                str(f.max_per_second),
                str(f.deliveries),
                str(f.requests),
                f"{f.seconds:.2f}",
                f"{f.events_per_second_per_endpoint:.1f}",
                f"{f.deliveries_per_second:.1f}",
                str(f.most_started_in_a_second),
                f"{f.cpu_seconds_per_100:.2f}",
                harness.fmt(f.emulator_cpu_seconds_per_100, 2),
                harness.shown_load(f.load),
            ]
            for f in rows
        ],
    )


def bench(args: argparse.Namespace, emulators: harness.Emulators) -> int:
    for chatty in ("shared", "httpx"):  # a log line per event or request otherwise
        logging.getLogger(chatty).setLevel(logging.WARNING)
    limits = {"max_per_second": args.max_per_second, "max_in_flight": args.max_in_flight}
    runs = [
        ("one endpoint", 1, args.events, limits),
        ("ten endpoints", 10, args.events_ten, limits),
        ("throttled", 1, 100, {"max_per_second": args.throttle, "max_in_flight": 4}),
    ]
    # Nothing is published here; the container wants a publisher all the same.
    services = Services(get_settings(), publisher=harness.MemoryPublisher())
    # The emulator's first requests are slow (a JVM warming up): not measured.
    scenario(
        services,
        emulators,
        name="warm-up",
        endpoints=1,
        events=50,
        push_threads=args.push_threads,
        **limits,
    )
    rows = [
        scenario(
            services,
            emulators,
            name=name,
            endpoints=endpoints,
            events=events,
            push_threads=args.push_threads,
            **lim,
        )
        for name, endpoints, events, lim in runs
    ]
    print(_table(rows))
    harness.write_json(args.json, {"runs": [asdict(r) for r in rows]})
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = harness.parser(__doc__, prog="webhooks", options=OPTIONS).parse_args(argv)
    return harness.run_with_emulators(args, bench)


if __name__ == "__main__":
    sys.exit(main())
