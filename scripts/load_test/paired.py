"""`./scripts/loadtest --floor`: codedrop against its floor, side by side.

One local stack; beside it the floor (scripts/load_test/floor.py) served by functions-framework
with claim_api's workers and threads, on the same emulators. Then --floor-runs pairs, alternating
codedrop and the floor, each on an emptied Firestore emulator, the same shoppers through the same
client: codedrop's run is the load test's own (campaign, codes through the bucket, the audit);
the floor's is a campaign id and its pool size. Every run's CPU is sampled by process from the
first shopper until the event functions rest (codedrop's counting is part of its sale), and the
sale's window alone. The comparison (medians and codedrop / floor, by process) goes to
floor.json in the report directory, and to --floor-json.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.cloud import firestore

from devkit.emulators import free_port
from scripts.bench import cost
from scripts.load_test import SetupError, operations, say
from scripts.load_test.cli import Sold, _ms_per_shopper, _stack, _summary, sell_on
from scripts.load_test.cpu import CLIENT, EVENT_FUNCTIONS, REST, SALE, CpuSampler
from scripts.load_test.options import REPO, Options
from scripts.load_test.report import analyse, load_records, write_report
from scripts.load_test.sale import run_shoppers
from scripts.load_test.stack import Target
from scripts.localstack.config import Function
from scripts.localstack.errors import StackError
from scripts.localstack.functions import FunctionProcess, function_env, start_function
from shared.http.entry_points import entry_points

FLOOR_SOURCE = Path(__file__).with_name("floor.py")
FLOOR = Function(
    "floor_claim", workers=2, threads=8, kind=entry_points(FLOOR_SOURCE)["floor_claim"]
)
FLOOR_READY_TIMEOUT = 60.0
SIDES = ("codedrop", "floor")
# Processes that are not the service: the load test and whatever else the machine runs.
NOT_THE_STACK = {"loadtest (this script)", REST}
# The claim function on each side: compared as one row.
CLAIM_FUNCTION = "claim function (claim_api / floor_claim)"


def _reset_firestore(target: Target) -> None:
    """Empty the emulator's database: every run starts from the same state."""
    url = (
        f"http://{target.firestore_host}/emulator/v1/projects/{target.project}"
        "/databases/(default)/documents"
    )
    with urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=60):
        pass


def _start_floor(
    options: Options, target: Target, exports: Mapping[str, str], log_dir: Path
) -> tuple[FunctionProcess, Path]:
    floor = replace(
        FLOOR,
        workers=int(target.settings["claim_api_workers"]),
        threads=int(target.settings["claim_api_threads"]),
    )
    env = function_env(
        {
            **exports,
            "GOOGLE_CLOUD_PROJECT": target.project,
            "CODEDROP_FLOOR_CODES": str(options.codes),
        }
    )
    if target.operations is not None:
        env = operations.environment(target.operations, env)
    run_dir = Path(tempfile.mkdtemp(prefix="codedrop-floor-"))
    running = start_function(
        floor, port=free_port(), env=env, log_dir=log_dir, run_dir=run_dir, source=FLOOR_SOURCE
    )
    try:
        running.wait_answering(FLOOR_READY_TIMEOUT)
    except StackError as exc:
        running.stop(10)
        raise SetupError(f"the floor did not start: {exc}") from exc
    say(f"the floor answers at {running.url} ({floor.workers} workers x {floor.threads} threads)")
    return running, run_dir


def _floor_audit(
    db: firestore.Client, records: Sequence[dict[str, Any]], codes: int
) -> dict[str, Any]:
    """The floor's sale read back: its claims (the emulator holds only this run's) against what
    the shoppers were told."""
    held = {s.id: (s.to_dict() or {}).get("code") for s in db.collection("floor_claims").stream()}
    journeys = [r for r in records if r.get("kind") == "journey"]
    outcomes = Counter(str(j.get("outcome")) for j in journeys)
    told = {j["shopper"]: j.get("code") for j in journeys if j.get("code")}
    by_code = Counter(held.values())
    disagree = sum(1 for code in told.values() if code not in by_code)
    checks = {
        "codes held twice": sum(n - 1 for n in by_code.values() if n > 1),
        "codes over the pool": max(len(held) - codes, 0),
        "codes never given (pool not emptied)": max(min(codes, len(journeys)) - len(held), 0),
        "answers not in the database": disagree,
        "shoppers without an answer": len(journeys) - outcomes["code"] - outcomes["sold_out"],
    }
    return {"claims": len(held), "outcomes": dict(outcomes), "checks": checks}


def _sell_floor(
    options: Options, target: Target, floor: FunctionProcess, directory: Path
) -> dict[str, Any]:
    campaign_id = f"floor-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    at_floor = replace(target, claim_url=floor.url)
    counted_before = operations.reading(target.operations)
    sampler = CpuSampler(
        stack_pid=target.stack_pid,
        stack_ports=target.ports(),
        cores=os.cpu_count() or 1,
        also=[floor.process.pid],
    )
    sampler.start()
    try:
        run = run_shoppers(options, at_floor, campaign_id, directory, sampler)
        sampler.mark(SALE)
        sampler.wait_quiet(EVENT_FUNCTIONS, timeout=options.settle_seconds)
    finally:
        sampler.stop()
    counted = operations.difference(operations.reading(target.operations), counted_before)
    records = load_records(run.records_path)
    if not records:
        raise SetupError(f"the floor's client recorded nothing (exit {run.exit_code})")
    os.environ["FIRESTORE_EMULATOR_HOST"] = target.firestore_host
    db = firestore.Client(project=target.project)
    audit = _floor_audit(db, records, options.codes)
    figures = analyse(records, claimed_at=[], codes_total=options.codes)
    summary = {
        "side": "floor",
        "campaign_id": campaign_id,
        "figures": figures,
        "floor_audit": audit,
        "violations": sum(audit["checks"].values()),
        "cpu": sampler.summary(options.shoppers, upto=SALE),
        "cpu_with_counting": sampler.summary(options.shoppers),
    }
    summary["operations"] = operations.per_claim(
        counted,
        _ms_per_shopper(summary["cpu_with_counting"]),
        claims=audit["claims"],
        shoppers=options.shoppers,
    )
    (directory / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def _codedrop_summary(
    options: Options, sold: Sold, directory: Path, started_at: datetime
) -> dict[str, Any]:
    summary = _summary(options, sold, started_at)
    write_report(summary, directory)
    return {
        "side": "codedrop",
        "campaign_id": sold.campaign_id,
        "figures": summary["figures"],
        "violations": summary["violations"],
        "cpu": sold.cpu,
        "cpu_with_counting": sold.cpu["with_counting"],
        "counters_settled": sold.counters.get("settled"),
        "operations": summary["operations"],
    }


def _per_shopper(cpu: Mapping[str, Any]) -> dict[str, float]:
    """ms of CPU per shopper by process, the claim function under one name."""
    found: dict[str, float] = {}
    for name, component in (cpu.get("components") or {}).items():
        key = CLAIM_FUNCTION if name in ("claim_api", FLOOR.name) else name
        found[key] = found.get(key, 0.0) + float(component["ms_per_shopper"])
    stack = sum(v for k, v in found.items() if k not in NOT_THE_STACK and k != CLIENT)
    found["stack (every process of the service)"] = stack
    found["stack and client"] = stack + found.get(CLIENT, 0.0)
    return found


def _run_line(run: Mapping[str, Any]) -> dict[str, Any]:
    figures = run["figures"]
    claim = (figures.get("latency_ms") or {}).get("claim") or {}
    return {
        "side": run["side"],
        "campaign_id": run["campaign_id"],
        "sale_seconds": figures.get("sale_seconds"),
        "claim_p50_ms": claim.get("p50"),
        "claim_p95_ms": claim.get("p95"),
        "claim_status": figures.get("claim_status"),
        "violations": run["violations"],
        "machine_busy_percent": run["cpu_with_counting"].get("machine_busy_percent"),
        "rest_of_machine_ms_per_shopper": _per_shopper(run["cpu_with_counting"]).get(REST),
        "cpu_ms_per_shopper_with_counting": _per_shopper(run["cpu_with_counting"]),
        "cpu_ms_per_shopper_sale": _per_shopper(run["cpu"]),
        "per_claim": run["operations"]["per_claim"],
        "dollars_per_10000_claims": run["operations"][f"dollars_per_{cost.PER_CLAIMS}_claims"],
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def compare(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Medians of each side and codedrop / floor: wall time, and CPU per shopper by process."""
    lines = [_run_line(r) for r in runs]
    median: dict[str, dict[str, Any]] = {}
    for side in SIDES:
        mine = [line for line in lines if line["side"] == side]
        seconds = [line["sale_seconds"] for line in mine if line["sale_seconds"] is not None]
        entry: dict[str, Any] = {"runs": len(mine), "sale_seconds": _median(seconds)}
        for window in ("cpu_ms_per_shopper_with_counting", "cpu_ms_per_shopper_sale"):
            names = {n for line in mine for n in line[window]}
            entry[window] = {
                n: _median([line[window].get(n, 0.0) for line in mine]) for n in sorted(names)
            }
        median[side] = entry
    ours, floor = median["codedrop"], median["floor"]
    by_process = {}
    for window in ("cpu_ms_per_shopper_with_counting", "cpu_ms_per_shopper_sale"):
        ordered = sorted(
            set(ours[window]) | set(floor[window]), key=lambda n: -ours[window].get(n, 0)
        )
        by_process[window] = {
            n: {
                "codedrop": ours[window].get(n, 0.0),
                "floor": floor[window].get(n, 0.0),
                "codedrop / floor": _ratio(ours[window].get(n), floor[window].get(n)),
            }
            for n in ordered
            if n not in NOT_THE_STACK
        }
    stack = "stack (every process of the service)"
    return {
        "runs": lines,
        "medians": median,
        "codedrop / floor": {
            "wall time (sale answered in)": _ratio(ours["sale_seconds"], floor["sale_seconds"]),
            "CPU per shopper, the service's processes, counting included": _ratio(
                ours["cpu_ms_per_shopper_with_counting"][stack],
                floor["cpu_ms_per_shopper_with_counting"][stack],
            ),
            "CPU per shopper, the service's processes and the client, counting included": _ratio(
                ours["cpu_ms_per_shopper_with_counting"]["stack and client"],
                floor["cpu_ms_per_shopper_with_counting"]["stack and client"],
            ),
            "CPU per shopper, the service's processes, the sale's window": _ratio(
                ours["cpu_ms_per_shopper_sale"][stack], floor["cpu_ms_per_shopper_sale"][stack]
            ),
        },
        "by_process_ms_per_shopper": by_process,
    }


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def _print(comparison: Mapping[str, Any]) -> None:
    out = [""]
    for line in comparison["runs"]:
        cpu = line["cpu_ms_per_shopper_with_counting"]
        out.append(
            f"{line['side']:<8} sale {line['sale_seconds']} s, claim p95 {line['claim_p95_ms']} "
            f"ms, violations {line['violations']}, service CPU "
            f"{cpu['stack (every process of the service)']:.2f} ms/shopper"
        )
    out.append("codedrop / floor (medians):")
    for name, ratio in comparison["codedrop / floor"].items():
        out.append(f"  {name}: {ratio}")
    out.append("by process, ms of CPU per shopper, counting included (codedrop, floor):")
    for name, row in comparison["by_process_ms_per_shopper"][
        "cpu_ms_per_shopper_with_counting"
    ].items():
        out.append(f"  {name:<48} {row['codedrop']:6.2f} {row['floor']:6.2f}")
    sys.stdout.write("\n".join(out) + "\n")


def run_paired(options: Options, argv: Sequence[str]) -> int:
    directory = options.report_dir
    directory.mkdir(parents=True, exist_ok=True)
    started_at = datetime.now(UTC)
    load = os.getloadavg()
    commit = _commit()
    runs: list[dict[str, Any]] = []
    try:
        with _stack(options, directory / "logs") as (target, stack):
            assert stack is not None
            floor, run_dir = _start_floor(options, target, stack.exports, directory / "logs")
            try:
                for number in range(1, options.floor_runs + 1):
                    for side in SIDES:
                        here = directory / f"{number}-{side}"
                        here.mkdir(parents=True, exist_ok=True)
                        say(f"run {number} of {options.floor_runs}: {side}")
                        _reset_firestore(target)
                        if side == "floor":
                            runs.append(_sell_floor(options, target, floor, here))
                            continue
                        sold = sell_on(
                            options, target, stack, here, also_sampled=[floor.process.pid]
                        )
                        assert sold is not None
                        runs.append(_codedrop_summary(options, sold, here, datetime.now(UTC)))
            finally:
                floor.stop(10)
                shutil.rmtree(run_dir, ignore_errors=True)
    except SetupError as exc:
        sys.stderr.write(f"loadtest: {exc}\n")
        return 2
    comparison = {
        "schema": 1,
        "started_at": started_at.isoformat(timespec="seconds"),
        "commit": commit,
        "machine": {
            "host": os.uname().nodename,
            "nproc": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in load],
        },
        "command": ["./scripts/loadtest", *argv],
        "scenario": {
            "shoppers": options.shoppers,
            "codes": options.codes,
            "pattern": options.pattern,
            "client": CLIENT,
            "threads": options.threads,
            "double_click_share": options.double_click_share,
            "claim_workers_x_threads": [
                target.settings["claim_api_workers"],
                target.settings["claim_api_threads"],
            ],
        },
        **compare(runs),
    }
    text = json.dumps(comparison, indent=2, default=str)
    (directory / "floor.json").write_text(text)
    if options.floor_json is not None:
        options.floor_json.parent.mkdir(parents=True, exist_ok=True)
        options.floor_json.write_text(text + "\n")
    _print(comparison)
    say(f"comparison: {directory / 'floor.json'}")
    return 1 if any(r["violations"] for r in runs) else 0


# --- docs/benchmarks.md, generated from the comparison ----------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def render_markdown(comparison: Mapping[str, Any], source: str) -> str:
    """The comparison as docs/benchmarks.md shows it: ratios, each run, each process."""
    scenario = comparison["scenario"]
    machine = comparison["machine"]
    lines = [
        "## codedrop / floor: the load test beside the least a claim service must do",
        "",
        f"Generated from `{source}` by `python -m scripts.load_test.paired {source}`; "
        f"the runs: `{' '.join(comparison['command'])}` (started "
        f"{comparison['started_at']}, commit {comparison['commit']}, {machine['nproc']} cores, "
        f"load average {' / '.join(str(x) for x in machine['load_average_at_start'])} at the "
        "start).",
        "",
        f"{scenario['shoppers']:,} shoppers ({scenario['pattern']}, the {scenario['client']} "
        f"client, {scenario['threads']} threads, {scenario['double_click_share']:.0%} double "
        f"clicks) for {scenario['codes']:,} codes; claim_api and the floor "
        f"{scenario['claim_workers_x_threads'][0]} workers x "
        f"{scenario['claim_workers_x_threads'][1]} threads; the runs alternate on one stack, "
        "Firestore emptied before each. CPU is sampled by process from the first shopper until "
        "the event functions rest (codedrop's counting is part of its sale).",
        "",
        "| codedrop / floor (medians) | ratio |",
        "|---|---|",
    ]
    lines += [f"| {name} | {_cell(r)} |" for name, r in comparison["codedrop / floor"].items()]
    lines += [
        "",
        "| run | side | sale answered in (s) | claim p50 / p95 (ms) | violations | "
        "service CPU ms / shopper | reads / writes per claim | messages per claim | "
        "invocations per claim | $ per 10,000 claims |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for number, run in enumerate(comparison["runs"], start=1):
        per = run["per_claim"]
        invocations = ", ".join(f"{k} {v:g}" for k, v in per["invocations"].items())
        cpu = run["cpu_ms_per_shopper_with_counting"]["stack (every process of the service)"]
        # The events those messages carried (claims share messages), where the run counted them.
        events = per.get("pubsub_events_published")
        carried = f" ({events:g} events)" if events is not None else ""
        lines.append(
            f"| {(number + 1) // 2} | {run['side']} | {_cell(run['sale_seconds'])} | "
            f"{_cell(run['claim_p50_ms'])} / {_cell(run['claim_p95_ms'])} | "
            f"{run['violations']} | {cpu:.2f} | {per['firestore_documents_read']:g} / "
            f"{per['firestore_documents_written']:g} | {per['pubsub_messages_published']:g} "
            f"published{carried}, {per['pubsub_messages_pushed']:g} pushed | {invocations} | "
            f"{run['dollars_per_10000_claims']['total']:.4f} (64 instances "
            f"{run['dollars_per_10000_claims']['total_at_64_instances']:.4f}) |"
        )
    lines += [
        "",
        "CPU per shopper by process (ms, medians, counting included):",
        "",
        "| process | codedrop | floor | codedrop / floor |",
        "|---|---|---|---|",
    ]
    rows = comparison["by_process_ms_per_shopper"]["cpu_ms_per_shopper_with_counting"]
    for name, row in rows.items():
        if row["codedrop"] or row["floor"]:
            lines.append(
                f"| {name} | {row['codedrop']:.2f} | {row['floor']:.2f} | "
                f"{_cell(row['codedrop / floor'])} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Print docs/benchmarks.md's comparison section from a floor.json."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: python -m scripts.load_test.paired FLOOR_JSON\n")
        return 2
    comparison = json.loads(Path(args[0]).read_text())
    sys.stdout.write(render_markdown(comparison, args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
