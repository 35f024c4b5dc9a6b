"""Guessing benchmark: a caller sending code look-ups at a steady rate through several admin_api
instances gets no more through than the per-caller limit (shared/ratelimit).

    .venv/bin/python -m scripts.bench.guessing [--instances 4] [--per-minute 1000]
        [--seconds 120] [--limit 60] [--firestore HOST:PORT]

`--instances` engine instances (each its own service container: its own buckets and heartbeat)
share one Firestore emulator in this process, as function instances share the database. They
first serve a look-up each and exchange heartbeats until every one counts them all (a guesser
meets a service already running). Then one caller (one token uid, one address) sends
`--per-minute` look-ups a minute for `--seconds`, round-robin over the instances as a load
balancer spreads them, each through admin_api's router (auth, limit, format, read). Prints one
JSON object: requests sent, passed (answered as look-ups), refused (429), the limit for the
duration, the ratio passed / limit, and the bound the design guarantees, max(burst, instances)
+ limit * seconds / 60. Exit status 1 when more than the limit + 10% got through. Starts its
own Firestore emulator on a free port unless `--firestore` names one, and an Auth emulator where
the caller signs in (admin_api checks every caller's account).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from typing import Any

from devkit.emulators.auth import AuthEmulatorClient
from scripts.bench import harness

PROJECT = harness.PROJECT
CAMPAIGN = "guessing"
SLACK = 1.1


def instance_client(limit: int) -> Any:
    """One function instance: its own container behind admin_api's router."""
    import flask

    from shared.container import Services
    from shared.http.admin import router
    from shared.settings import Settings

    # Look-ups publish nothing; the publisher only completes the container without Pub/Sub.
    services = Services(
        Settings(project_id=PROJECT, code_lookups_per_minute=limit),
        publisher=harness.MemoryPublisher(),
    )
    app = flask.Flask("bench-guessing")

    @app.route("/<path:path>", methods=["GET", "POST"])
    def entry(path: str) -> Any:
        return router.dispatch(flask.request, services)

    return app.test_client(), services


def seed_campaign() -> None:
    from shared.container import Services
    from shared.settings import Settings

    db = Services(Settings(project_id=PROJECT)).db
    codes = [f"REAL-{n:04d}" for n in range(100)]
    harness.create_campaign(db, campaign_id=CAMPAIGN, title="Guessing", codes=codes)


def _admin_token(accounts: AuthEmulatorClient, name: str) -> str:
    """An ID token of an admin account `name`, signed up on the Auth emulator."""
    return accounts.ensure_user(
        f"{name}@bench.example", "bench-password", claims={"admin": True}
    ).id_token


def run(args: argparse.Namespace, accounts: AuthEmulatorClient) -> dict[str, Any]:
    seed_campaign()
    instances = [instance_client(args.limit) for _ in range(args.instances)]
    warm = {"Authorization": f"Bearer {_admin_token(accounts, 'warm-up')}"}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for client, _ in instances:
            client.get(f"/v1/campaigns/{CAMPAIGN}/codes/REAL-0000", headers=warm)
        if all(s.guess_limiter.instances() == args.instances for _, s in instances):
            break
        time.sleep(0.1)
    else:
        raise RuntimeError("the instances never counted each other")

    token = _admin_token(accounts, "guesser")
    headers = {"Authorization": f"Bearer {token}", "X-Forwarded-For": "203.0.113.50"}
    sent = int(args.per_minute * args.seconds / 60)
    interval = 60 / args.per_minute
    statuses: Counter[int] = Counter()
    started = time.monotonic()
    for n in range(sent):
        delay = started + n * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        client, _ = instances[n % len(instances)]
        # Guesses: mostly unknown codes, as a prober's are (a 404 passed the limit all the same).
        code = f"REAL-{n % 100:04d}" if n % 10 == 0 else f"GUESS-{n:06d}"
        statuses[
            client.get(f"/v1/campaigns/{CAMPAIGN}/codes/{code}", headers=headers).status_code
        ] += 1
    elapsed = time.monotonic() - started
    passed = sum(count for status, count in statuses.items() if status != 429)
    limit = args.limit * args.seconds / 60
    burst = max(1.0, args.limit * 0.1)
    return {
        "instances": args.instances,
        "sent_per_minute": args.per_minute,
        "seconds": args.seconds,
        "elapsed_seconds": round(elapsed, 1),
        "limit_per_minute": args.limit,
        "sent": sent,
        "passed": passed,
        "refused": statuses.get(429, 0),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "limit_for_the_duration": limit,
        "passed_over_limit": round(passed / limit, 3),
        "design_bound": max(burst, args.instances) + limit,
        "within_limit_plus_10_percent": passed <= limit * SLACK,
    }


OPTIONS: list[harness.Option] = [
    ("--instances", harness.positive, 4, "admin_api instances"),
    ("--per-minute", harness.positive, 1000, "look-ups the caller sends a minute"),
    ("--seconds", float, 120.0, "how long the caller sends them"),
    ("--limit", harness.positive, 60, "the per-caller limit a minute"),
    harness.FIRESTORE_OPTION,
]


def bench(args: argparse.Namespace, emulators: harness.Emulators) -> int:
    emulators.reset()
    if emulators.auth is None:
        raise RuntimeError("the Auth emulator is not started")
    figures = run(args, AuthEmulatorClient(emulators.auth.host_port, project=PROJECT))
    print(json.dumps(figures))
    harness.write_json(args.json, figures)
    return 0 if figures["within_limit_plus_10_percent"] else 1


def main(argv: list[str] | None = None) -> int:
    args = harness.parser(__doc__, prog="guessing", options=OPTIONS).parse_args(argv)
    return harness.run_with_emulators(args, bench, auth=True)


if __name__ == "__main__":
    sys.exit(main())
