"""Rehearse a flash sale through the HTTP API, audit it against the database, and report it.

    ./scripts/loadtest [--shoppers 10000] [--codes 5000] [--pattern ramp|burst]
        [--ramp-seconds 30] [--double-click-share 0.1] [--max-per-user 1]
        [--threads 64]
        [--claim-workers W] [--claim-threads T] [--free-ports | --claim-port P ...]
        [--target-claim URL --target-admin URL [--storage-host URL] [--firestore-host H:P]]
        [--report-dir DIR] [--settle-seconds 30] [--require-targets] [--prepare-only]
        [--floor [--floor-runs N] [--floor-json PATH]]

1. Starts the local stack (`python -m scripts.localstack`, on the ports of its CODEDROP_*_PORT
   variables, the --<name>-port flags, or free ones with --free-ports) and waits for its ready
   line, unless --target-claim and --target-admin name a running one.
2. Creates a campaign through admin_api and loads its pool through the real intake path: a CSV
   of --codes codes dropped at imports/{campaign}/loadtest.csv in the imports bucket and the
   import job followed through admin_api, as ./scripts/upload_codes does.
3. Runs the shoppers: --shoppers of them arriving all at once (burst) or evenly over
   --ramp-seconds (ramp). Each opens the campaign, claims once with an ID token of its own
   (made before the clock starts; 503/429 retried after Retry-After), reads its code back;
   --double-click-share of them send a second claim while the first is in flight. The client
   (scripts/load_test/shoppers.py) is --threads threads over keep-alive connections, each
   taking the next shopper due, as a fixed pool of callers would. Every response is recorded
   in responses.jsonl.
4. Audits the sale from the database (devkit/audit.py plus the claim documents) and
   the API: codes held by two shoppers, over-issue, shoppers over their limit, SOLD_OUT
   answered while codes remained, answers that disagree with the database, shoppers without an
   answer, and the usage counters (GET /v1/campaigns/{id} stats, polled until they settle)
   against the documents.
5. Writes reports/loadtest-<stamp>/ (report.html, summary.json, responses.jsonl, the client's
   log, the stack's logs) and prints the figures.

With --floor, the same sale runs --floor-runs times against codedrop and as many times against
the floor (scripts/load_test/floor.py: the least any claim service must do), alternating, on one
stack; the comparison, codedrop / floor by process, goes to floor.json
(scripts/load_test/paired.py).

Exit status: 0 no violation; 1 a violation; 2 the run could not be made (setup failed);
3 no violation but a target missed, with --require-targets.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from devkit.emulators.tokens import emulator_id_token
from scripts.load_test import SetupError, operations, say
from scripts.load_test.audit import (
    Truth,
    audit_sale,
    read_truth,
    settle_counters,
    targets,
    wait_counted,
)
from scripts.load_test.cpu import CLIENT, EVENT_FUNCTIONS, SALE, CpuSampler
from scripts.load_test.options import Options, parse_options
from scripts.load_test.report import CLAIM_KINDS, analyse, load_records, write_report
from scripts.load_test.sale import (
    ClientRun,
    create_campaign,
    load_pool,
    run_shoppers,
    threads_command,
    wait_until_claimable,
)
from scripts.load_test.stack import StartedStack, Target, running_target

ADMIN_USER = "loadtest-operator"
EXIT_OK, EXIT_VIOLATIONS, EXIT_SETUP, EXIT_TARGETS = 0, 1, 2, 3


@contextlib.contextmanager
def _stack(options: Options, log_dir: Path) -> Iterator[tuple[Target, StartedStack | None]]:
    if options.target_claim:
        yield running_target(options), None
        return
    stack = StartedStack(options, log_dir)
    try:
        yield stack.start(), stack
    finally:
        stack.stop()


def print_summary(summary: Mapping[str, Any], out: IO[str]) -> None:
    figures = summary.get("figures") or {}
    shoppers = summary.get("shoppers") or {}
    latency = figures.get("latency_ms") or {}
    claim = latency.get("claim") or {}
    answer = latency.get("time_to_answer") or {}
    lines = [
        "",
        f"shoppers {shoppers.get('expected', 0):,}: code {shoppers.get('got_a_code', 0):,}, "
        f"SOLD_OUT {shoppers.get('told_sold_out', 0):,}, error {shoppers.get('error_answer', 0):,},"
        f" no answer {shoppers.get('no_answer', 0):,}",
        f"requests {figures.get('requests', 0):,} (claim answers {figures.get('claim_status')}), "
        f"mean {figures.get('mean_rps')}/s, peak {figures.get('peak_rps')}/s",
        f"claim latency ms: p50 {claim.get('p50')} p95 {claim.get('p95')} p99 {claim.get('p99')} "
        f"max {claim.get('max')}; time to answer p95 {answer.get('p95')} ms",
        f"sale answered in {figures.get('sale_seconds')} s; last new code at "
        f"+{figures.get('last_new_code_seconds')} s",
    ]
    cpu = summary.get("cpu") or {}
    if cpu.get("components"):
        parts = [
            f"{name} {c['mean_percent']:.0f}%"
            for name, c in cpu["components"].items()
            if c["mean_percent"] >= 1
        ]
        lines.append(
            f"CPU (100% = one core, {cpu.get('cores')} cores, machine busy "
            f"{cpu.get('machine_busy_percent')}%): " + ", ".join(parts)
        )
    lines.append("audit:")
    for check in summary.get("audit") or []:
        mark = "ok  " if not check["count"] else "FAIL"
        lines.append(f"  {mark} {check['title']}: {check['count']:,}")
        for example in check["examples"][:3]:
            lines.append(f"         {example}")
    lines.append("targets:")
    for target in summary.get("targets") or []:
        mark = "met " if target["met"] else "MISS"
        lines.append(f"  {mark} {target['name']}: {target['value']} (goal {target['goal']})")
    out.write("\n".join(lines) + "\n")
    out.flush()


@dataclass
class Sold:
    """A sale that ran: where, what the client recorded, and the database afterwards."""

    target: Target
    campaign_id: str
    intake: dict[str, Any]
    run: ClientRun
    cpu: dict[str, Any]
    records: list[dict[str, Any]]
    truth: Truth
    counters: dict[str, Any]
    operations: dict[str, dict[str, Any]]  # by function, counted where they happened


def _sell(options: Options, directory: Path) -> Sold | None:
    """Stage and run the sale, read it back; None with --prepare-only. SetupError when the run
    could not be made."""
    with _stack(options, directory / "logs") as (target, stack):
        return sell_on(options, target, stack, directory)


def sell_on(
    options: Options,
    target: Target,
    stack: StartedStack | None,
    directory: Path,
    *,
    also_sampled: Sequence[int] = (),
) -> Sold | None:
    """The sale on a stack that runs; `also_sampled`: more processes whose CPU is the stack's."""
    token = emulator_id_token(ADMIN_USER, project=target.project, admin=True)
    campaign_id = create_campaign(options, target, token)
    say(f"campaign {campaign_id} created through admin_api")
    intake = load_pool(options, target, campaign_id, token, directory)
    wait_until_claimable(target, campaign_id, options.codes)
    counted_before = operations.reading(target.operations)
    if options.prepare_only:
        say("run the shoppers with:")
        say("  " + " ".join(threads_command(options, target, campaign_id, None)))
        return None
    sampler = CpuSampler(
        stack_pid=target.stack_pid,
        stack_ports=target.ports(),
        cores=os.cpu_count() or 1,
        also=also_sampled,
    )
    sampler.start()
    try:
        run = run_shoppers(options, target, campaign_id, directory, sampler)
        sampler.mark(SALE)
        # What the sale left to the event functions is its cost too: sampled until the
        # counters hold every code sold (a push Pub/Sub is backing off leaves count_usage
        # idle meanwhile), then until they rest.
        # Claim answers only: a journey line repeats its shopper's final status.
        sold = sum(
            1
            for r in load_records(run.records_path)
            if r.get("kind") in CLAIM_KINDS and r.get("status") == 201
        )
        wait_counted(target, campaign_id, token, sold, options.settle_seconds)
        sampler.wait_quiet(EVENT_FUNCTIONS, timeout=options.settle_seconds)
    finally:
        sampler.stop()
    counted = operations.difference(operations.reading(target.operations), counted_before)
    if stack is not None and (reason := stack.died()) is not None:
        raise SetupError(f"the local stack stopped during the sale ({reason})")
    records = load_records(run.records_path)
    if not records:
        raise SetupError(
            f"the {CLIENT} client recorded nothing (exit {run.exit_code}); "
            f"see {directory / (CLIENT + '.log')}"
        )
    say("auditing: reading the campaign back from Firestore …")
    truth = read_truth(target, campaign_id)
    counters = settle_counters(target, campaign_id, token, truth, options.settle_seconds)
    cpu = {
        **sampler.summary(options.shoppers, upto=SALE),
        "client_cpu_seconds_rusage": run.cpu_seconds,
        "with_counting": sampler.summary(options.shoppers),
    }
    return Sold(target, campaign_id, intake, run, cpu, records, truth, counters, counted)


def _scenario(options: Options, sold: Sold) -> dict[str, Any]:
    target = sold.target
    return {
        "campaign_id": sold.campaign_id,
        "shoppers": options.shoppers,
        "codes": options.codes,
        "pattern": options.pattern,
        "ramp_seconds": options.ramp_seconds if options.pattern == "ramp" else None,
        "spawn_rate": options.spawn_rate,
        "double_click_share": options.double_click_share,
        "max_per_user": options.max_per_user,
        "waiting_room": options.waiting_room,
        "client": CLIENT,
        "client_threads": options.threads,
        "p95_target_ms": options.p95_target_ms,
        "claim_url": target.claim_url,
        "admin_url": target.admin_url,
        "stack": "started by loadtest" if target.started else "already running",
        **target.settings,
    }


def _ms_per_shopper(cpu: Mapping[str, Any]) -> dict[str, float]:
    components = cpu.get("components") or {}
    return {name: float(c["ms_per_shopper"]) for name, c in components.items()}


def _summary(options: Options, sold: Sold, started_at: datetime) -> dict[str, Any]:
    """Everything the run measured and found, as summary.json holds it."""
    truth, audit = sold.truth, sold.truth.audit
    figures = analyse(sold.records, claimed_at=truth.claimed_at, codes_total=audit.codes_total)
    checks, shoppers = audit_sale(
        sold.records,
        truth,
        sold.counters,
        shoppers=options.shoppers,
        max_per_user=options.max_per_user,
    )
    violations = sum(c.count for c in checks)
    return {
        "schema": 1,
        "started_at": started_at.isoformat(timespec="seconds"),
        "host": f"{os.uname().nodename}, {os.cpu_count()} cores",
        "scenario": _scenario(options, sold),
        "intake": sold.intake,
        "violations": violations,
        "ok": violations == 0,
        "audit": [c.as_dict() for c in checks],
        "database": {
            "codes_total": audit.codes_total,
            "assigned": audit.assigned,
            "unassigned": audit.unassigned,
            "claims": audit.claims,
            "shoppers_holding_codes": audit.shoppers,
            "max_per_user": audit.max_per_user,
        },
        "shoppers": shoppers,
        "counters": sold.counters,
        "figures": figures,
        "cpu": sold.cpu,
        "operations": operations.per_claim(
            sold.operations,
            _ms_per_shopper(sold.cpu["with_counting"]),
            claims=audit.claims,
            shoppers=options.shoppers,
        ),
        "client": {
            "name": CLIENT,
            "exit_code": sold.run.exit_code,
            "seconds": sold.run.seconds,
            "command": sold.run.command,
        },
        "files": {
            "responses (JSONL)": "responses.jsonl",
            f"{CLIENT} log": f"{CLIENT}.log",
            **({"stack logs": "logs/"} if sold.target.started else {}),
        },
        "targets": targets(options, figures, shoppers, truth, violations),
    }


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv, __doc__)
    if options.floor:
        # Imported here: the paired runs are built from this module's pieces.
        from scripts.load_test.paired import run_paired

        return run_paired(options, sys.argv[1:] if argv is None else argv)
    directory = options.report_dir
    directory.mkdir(parents=True, exist_ok=True)
    started_at = datetime.now(UTC)
    try:
        sold = _sell(options, directory)
    except SetupError as exc:
        sys.stderr.write(f"loadtest: {exc}\n")
        return EXIT_SETUP
    except KeyboardInterrupt:
        sys.stderr.write("loadtest: interrupted\n")
        return 130
    if sold is None:
        return EXIT_OK
    summary = _summary(options, sold, started_at)
    json_path, html_path = write_report(summary, directory)
    print_summary(summary, sys.stdout)
    say(f"report: {html_path}")
    say(f"summary: {json_path}")
    if summary["violations"]:
        return EXIT_VIOLATIONS
    if options.require_targets and not all(t["met"] for t in summary["targets"]):
        return EXIT_TARGETS
    return EXIT_OK
