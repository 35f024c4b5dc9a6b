"""Webhook delivery benchmark: events per second delivered to one endpoint and to ten.

    .venv/bin/python -m scripts.bench.webhooks [--events 500] [--events-ten 200]
        [--push-threads 8] [--max-per-second 1000] [--max-in-flight 8] [--throttle 20]
        [--json PATH]

Starts its own Firestore emulator (free port) and, per scenario, receivers in this process
(scripts/support/receiver.py, answering 200 at once). Events are synthetic `coupon.claimed`
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
included), seconds, events/s per endpoint and deliveries/s in total, and the most requests any
endpoint saw start within one second.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

from emulator import free_port, start_firestore
from scripts.support.receiver import Receiver
from shared.campaigns import service as campaign_service
from shared.campaigns.models import CampaignCreate
from shared.clock import utcnow
from shared.container import Services
from shared.events.models import CouponClaimed, EventType, encode_event
from shared.gcp.firestore import webhook_ref
from shared.settings import Settings
from shared.webhooks.models import WebhookCreate
from shared.webhooks.service import WebhookService

PROJECT = "demo-codedrop-bench"


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


def _events(campaign_id: str, count: int) -> list[tuple[CouponClaimed, bytes]]:
    now = utcnow()
    events = [
        CouponClaimed(
            event_id=f"claimed.{campaign_id}.c{n}",
            campaign_id=campaign_id,
            occurred_at=now,
            coupon_id=f"coupon-{n}",
            user_id=f"shopper-{n}",
            claim_id=f"c{n}",
        )
        for n in range(count)
    ]
    return [(e, encode_event(e)) for e in events]


def scenario(
    services: Services,
    *,
    name: str,
    endpoints: int,
    events: int,
    max_per_second: int,
    max_in_flight: int,
    push_threads: int,
) -> Figures:
    webhooks: WebhookService = services.webhooks
    now = utcnow()
    campaign_id = f"bench-{uuid.uuid4().hex[:8]}"
    campaign_service.create_campaign(
        services.db,
        data=CampaignCreate(
            campaign_id=campaign_id,
            title="Webhook benchmark",
            starts_at=now - timedelta(minutes=1),
            ends_at=now + timedelta(hours=1),
        ),
        now=now,
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
        batch = _events(campaign_id, events)
        started = time.monotonic()
        with ThreadPoolExecutor(push_threads) as pool:
            list(pool.map(lambda pair: webhooks.handle(*pair), batch))
        while any(len(r.unique_event_ids()) < events for r in receivers):
            webhooks.drain_due()
            time.sleep(0.05)
        seconds = max(r.starts()[-1] for r in receivers) - started
    finally:
        for receiver in receivers:
            receiver.stop()
        for record in webhooks.list_webhooks(campaign_id=campaign_id).webhooks:
            services.db.recursive_delete(webhook_ref(services.db, record.webhook_id))
    deliveries = sum(len(r.unique_event_ids()) for r in receivers)
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
    )


def _print(rows: list[Figures]) -> None:
    header = (
        f"{'scenario':<14} {'endpoints':>9} {'events':>6} {'limit/s':>7} {'deliveries':>10} "
        f"{'requests':>8} {'seconds':>7} {'events/s/endpoint':>17} {'deliveries/s':>12} "
        f"{'max in 1 s':>10}"
    )
    print(header)
    for f in rows:
        print(
            f"{f.scenario:<14} {f.endpoints:>9} {f.events:>6} {f.max_per_second:>7} "
            f"{f.deliveries:>10} {f.requests:>8} {f.seconds:>7.2f} "
            f"{f.events_per_second_per_endpoint:>17.1f} {f.deliveries_per_second:>12.1f} "
            f"{f.most_started_in_a_second:>10}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.bench.webhooks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--events-ten", type=int, default=200)
    parser.add_argument("--push-threads", type=int, default=8)
    parser.add_argument("--max-per-second", type=int, default=1000)
    parser.add_argument("--max-in-flight", type=int, default=8)
    parser.add_argument("--throttle", type=int, default=20)
    parser.add_argument("--json", type=Path, metavar="PATH")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    with tempfile.TemporaryDirectory(prefix="codedrop-bench-webhooks-") as logs:
        firestore = start_firestore(port=free_port(), project=PROJECT, log_dir=Path(logs))
        try:
            os.environ["FIRESTORE_EMULATOR_HOST"] = firestore.host_port
            services = Services(Settings(project_id=PROJECT))
            limits = {"max_per_second": args.max_per_second, "max_in_flight": args.max_in_flight}
            runs = [
                ("one endpoint", 1, args.events, limits),
                ("ten endpoints", 10, args.events_ten, limits),
                ("throttled", 1, 100, {"max_per_second": args.throttle, "max_in_flight": 4}),
            ]
            # The emulator's first requests are slow (a JVM warming up): not measured.
            scenario(services, name="warm-up", endpoints=1, events=50, push_threads=8, **limits)
            rows = [
                scenario(
                    services,
                    name=name,
                    endpoints=endpoints,
                    events=events,
                    push_threads=args.push_threads,
                    max_per_second=int(lim["max_per_second"]),
                    max_in_flight=int(lim["max_in_flight"]),
                )
                for name, endpoints, events, lim in runs
            ]
        finally:
            firestore.stop()
    _print(rows)
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
