"""The load test's command line: what sale to run, on which stack, and what to report."""

from __future__ import annotations

import argparse
import os
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from scripts.localstack.config import DEFAULT_BUCKET, DEFAULT_PROJECT, PORTS

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Options:
    shoppers: int
    codes: int
    pattern: str
    ramp_seconds: float
    double_click_share: float
    max_per_user: int
    threads: int
    claim_workers: int | None
    claim_threads: int | None
    ports: dict[str, int]  # by local_stack PORTS key, only those given
    free_ports: bool
    target_claim: str | None
    target_admin: str | None
    storage_host: str | None
    firestore_host: str | None
    bucket: str
    project: str
    report_dir: Path
    settle_seconds: float
    claim_attempts: int
    give_up_after: float
    waiting_room: bool
    admissions_per_second: float | None
    p95_target_ms: float
    sale_target_seconds: float
    require_targets: bool
    prepare_only: bool
    floor: bool
    floor_runs: int
    floor_json: Path | None

    @property
    def spawn_rate(self) -> float:
        if self.pattern == "burst":
            return float(self.shoppers)
        return self.shoppers / self.ramp_seconds

    @property
    def arrival_seconds(self) -> float:
        return 0.0 if self.pattern == "burst" else self.ramp_seconds


def _parser(description: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/loadtest",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sale = parser.add_argument_group("the sale")
    sale.add_argument("--shoppers", type=int, default=10_000, help="default %(default)s")
    sale.add_argument("--codes", type=int, default=5_000, help="default %(default)s")
    sale.add_argument(
        "--pattern",
        choices=("ramp", "burst"),
        default="ramp",
        help="ramp: shoppers arrive evenly over --ramp-seconds; burst: all at once",
    )
    sale.add_argument("--ramp-seconds", type=float, default=30.0, help="default %(default)s")
    sale.add_argument("--double-click-share", type=float, default=0.1, help="default %(default)s")
    sale.add_argument("--max-per-user", type=int, default=1, help="default %(default)s")
    sale.add_argument(
        "--waiting-room",
        action="store_true",
        help="create the campaign with its waiting room enabled",
    )
    sale.add_argument(
        "--admissions-per-second", type=float, help="the waiting room's admission rate"
    )
    sale.add_argument(
        "--claim-attempts",
        type=int,
        default=40,
        help="claim requests per click at most, retries included (default %(default)s)",
    )
    sale.add_argument(
        "--give-up-after",
        type=float,
        default=120.0,
        help="a shopper stops retrying after this many seconds (default %(default)s)",
    )

    load = parser.add_argument_group(
        "the shoppers' client (scripts/load_test/shoppers.py): --threads threads over keep-alive "
        "connections, each taking the next shopper due, as a fixed pool of callers would"
    )
    load.add_argument("--threads", type=int, default=64, help="default %(default)s")

    stack = parser.add_argument_group(
        "the stack it starts (ports: flag, else $CODEDROP_<NAME>_PORT, else the default)"
    )
    stack.add_argument("--claim-workers", type=int, help="claim_api gunicorn processes")
    stack.add_argument("--claim-threads", type=int, help="claim_api threads per process")
    stack.add_argument("--free-ports", action="store_true", help="use free ports for everything")
    for port in PORTS:
        names = [f"--{port.key}-port"]
        if port.key in ("claim-api", "admin-api"):
            names.append(f"--{port.key.split('-')[0]}-port")
        stack.add_argument(
            *names,
            dest=f"port_{port.key.replace('-', '_')}",
            type=int,
            metavar="PORT",
            help=f"{port.what} (default ${port.env} or {port.default})",
        )
    stack.add_argument("--project", default=DEFAULT_PROJECT, help="default %(default)s")
    stack.add_argument(
        "--bucket",
        default=os.environ.get("CODEDROP_IMPORTS_BUCKET") or DEFAULT_BUCKET,
        help="imports bucket (default $CODEDROP_IMPORTS_BUCKET or %(default)s)",
    )

    running = parser.add_argument_group("a stack that is already running")
    running.add_argument("--target-claim", metavar="URL", help="claim_api base URL")
    running.add_argument("--target-admin", metavar="URL", help="admin_api base URL")
    running.add_argument(
        "--storage-host",
        metavar="URL",
        help="Storage emulator (default $STORAGE_EMULATOR_HOST or the storage port)",
    )
    running.add_argument(
        "--firestore-host",
        metavar="HOST:PORT",
        help="Firestore emulator (default $FIRESTORE_EMULATOR_HOST or the firestore port)",
    )
    running.add_argument(
        "--prepare-only",
        action="store_true",
        help="create the campaign and its codes, print the shoppers' command for them, exit",
    )

    out = parser.add_argument_group("audit and report")
    out.add_argument("--report-dir", type=Path, help="default reports/loadtest-<stamp>")
    out.add_argument(
        "--settle-seconds",
        type=float,
        default=30.0,
        help="how long the usage counters get to match the documents (default %(default)s)",
    )
    out.add_argument("--p95-target-ms", type=float, default=1000.0, help="default %(default)s")
    out.add_argument(
        "--sale-target-seconds",
        type=float,
        default=30.0,
        help="burst: the whole sale answered within (default %(default)s)",
    )
    out.add_argument(
        "--require-targets", action="store_true", help="exit 3 when a target is missed"
    )

    floor = parser.add_argument_group(
        "the floor: the same shoppers against the least a claim service must do "
        "(scripts/load_test/floor.py), on the same stack and emulators"
    )
    floor.add_argument(
        "--floor",
        action="store_true",
        help="run codedrop and the floor alternately and report codedrop / floor",
    )
    floor.add_argument(
        "--floor-runs", type=int, default=1, help="runs of each (default %(default)s)"
    )
    floor.add_argument(
        "--floor-json", type=Path, help="also write the comparison here (e.g. docs/bench/...)"
    )
    return parser


def parse_options(argv: Sequence[str] | None, description: str | None = None) -> Options:
    parser = _parser(description)
    args = parser.parse_args(argv)
    if args.shoppers < 1 or args.codes < 1:
        parser.error("--shoppers and --codes must be positive")
    if args.pattern == "ramp" and args.ramp_seconds <= 0:
        parser.error("--ramp-seconds must be positive")
    if not 0 <= args.double_click_share <= 1:
        parser.error("--double-click-share must be between 0 and 1")
    if not args.project.startswith("demo-"):
        parser.error("--project must start with demo- (emulator ID tokens only work there)")
    if bool(args.target_claim) != bool(args.target_admin):
        parser.error("--target-claim and --target-admin go together")
    if args.target_claim and urllib.parse.urlsplit(args.target_claim).scheme != "http":
        parser.error("--target-claim must be http:// (the shoppers' client speaks plain HTTP)")
    if args.prepare_only and not args.target_claim:
        parser.error("--prepare-only needs a running stack (--target-claim, --target-admin)")
    if args.threads < 1:
        parser.error("--threads must be positive")
    if args.floor and (args.target_claim or args.prepare_only):
        parser.error("--floor starts a stack of its own (no --target-claim, --prepare-only)")
    if args.floor_runs < 1:
        parser.error("--floor-runs must be positive")
    ports = {
        port.key: value
        for port in PORTS
        if (value := getattr(args, f"port_{port.key.replace('-', '_')}")) is not None
    }
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    report_dir: Path = args.report_dir or REPO / "reports" / f"loadtest-{stamp}"
    computed: dict[str, Any] = {
        "ports": ports,
        "report_dir": report_dir.resolve(),
        "target_claim": args.target_claim.rstrip("/") if args.target_claim else None,
        "target_admin": args.target_admin.rstrip("/") if args.target_admin else None,
    }
    given: dict[str, Any] = {
        f.name: getattr(args, f.name) for f in fields(Options) if f.name not in computed
    }
    return Options(**given, **computed)
