"""Export benchmark: a claims export of N claims and the exporter's memory, on emulators of its own.

    .venv/bin/python -m scripts.bench.exports [--rows 100000,1000000] [--page-size N]
        [--json docs/bench/exports.json] [-v]

Starts a Firestore and a Cloud Storage emulator on free ports (project demo-codedrop-bench,
bucket codedrop-imports), each in its own process group, and stops them at the end. For each
size it empties the database, writes a campaign and that many claim documents as the claim
engine stores them (devkit.claims, atomic batches of 500 on a few threads, a batch's documents
made by the thread that writes them: the seeder's memory is bounded too; not timed), and runs the
real export path, `ExportService.run` of a claims export, in a child process of its own, so that
the child's peak RSS is the exporter's alone. The child reports the export's wall time, its CPU
time, its peak RSS (VmHWM), its RSS growth (the highest RSS sampled every 50 ms during the export
minus the RSS just before it, clients created and connected beforehand), the Firestore documents
it read (counted on the wire by devkit.firestore_rpcs, as Firestore bills them) and the rows the
CSV holds, read back.

`--page-size` is the exporter's page (ExportService's own, 10,000, by default). The emulator
charges a page's query more the further into the collection its cursor starts, which production
Firestore does not, so a run at a million rows takes hours at the default; larger pages (e.g.
`--page-size 100000`) keep it to minutes and the export still pages. Every size of one run uses
the same page size, so their memory compares.

Prints one JSON object to stdout (logs go to stderr), also written with --json (for
docs/benchmarks.md): a result per size and, with two sizes or more, `memory_ratio`, the largest
size's RSS growth over the smallest's, and `peak_rss_ratio` (flat memory: both close to 1 while
the rows grow tenfold). Exit code 1: an export did not write exactly the claims there are; 2:
the benchmark failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from google.cloud import firestore

from devkit.claims import MAX_BATCH_WRITES, add_claims, claim_record
from devkit.firestore_rpcs import RpcCounter
from devkit.measure import cpu_seconds, peak_rss_bytes, rss_bytes
from scripts.bench.harness import (
    BUCKET,
    Emulators,
    create_campaign,
    level,
    setup_logging,
    stop_on_sigterm,
    write_json,
)
from shared.clock import utcnow

log = logging.getLogger("bench.exports")

REPO = Path(__file__).resolve().parents[2]
CAMPAIGN = "export-bench"
SEED_THREADS = 4
SAMPLE_SECONDS = 0.05


def seed(db: firestore.Client, *, rows: int) -> None:
    """The campaign and `rows` claim documents as claims write them (one user each)."""
    create_campaign(db, campaign_id=CAMPAIGN, title="Export bench")
    now = utcnow()

    def write(start: int) -> None:
        add_claims(
            db,
            (
                claim_record(CAMPAIGN, n, claimed_at=now)
                for n in range(start, min(start + MAX_BATCH_WRITES, rows))
            ),
        )

    started = time.perf_counter()
    with ThreadPoolExecutor(SEED_THREADS) as pool:
        for done, _ in enumerate(pool.map(write, range(0, rows, MAX_BATCH_WRITES)), 1):
            if done % 200 == 0:
                log.info("%d claims written", done * MAX_BATCH_WRITES)
    log.info("%d claims written in %.1f s", rows, time.perf_counter() - started)


def child_main(page_size: int) -> dict[str, Any]:
    """In the child: export the campaign's claims and say what it cost."""
    from shared.audit.models import Actor, AuditContext
    from shared.container import instance_services
    from shared.control.exports import ExportKind

    services = instance_services()
    exports = dataclasses.replace(services.exports, page_size=page_size)
    audit = AuditContext(actor=Actor(uid="bench"), at=utcnow())
    job = exports.request(campaign_id=CAMPAIGN, kind=ExportKind.CLAIMS, audit=audit)
    baseline = rss_bytes()
    highest = baseline
    done = threading.Event()

    def sample() -> None:
        nonlocal highest
        while not done.wait(SAMPLE_SECONDS):
            highest = max(highest, rss_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    # The export streams its reads through the streaming client, and finishes its job with the
    # other one: both are counted.
    clients = {id(c): c for c in (services.streams_db, services.db)}
    counters = [RpcCounter(c) for c in clients.values()]
    reads_before = sum(c.snapshot().documents_read for c in counters)
    sampler.start()
    cpu_before = cpu_seconds(tree=False) or 0.0
    started = time.perf_counter()
    finished = exports.run(job, ExportKind.CLAIMS)
    wall = time.perf_counter() - started
    cpu = (cpu_seconds(tree=False) or 0.0) - cpu_before
    done.set()
    sampler.join()
    reads = sum(c.snapshot().documents_read for c in counters) - reads_before
    lines = sum(chunk.count(b"\n") for chunk in exports.download(job))
    return {
        "exported": finished.exported if finished is not None else None,
        "csv_rows": lines - 1,  # less the header
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "rows_per_second": round(lines / wall) if wall else None,
        "documents_read": reads,
        "reads_per_row": round(reads / max(lines - 1, 1), 4),
        "peak_rss_mb": round(peak_rss_bytes() / 2**20, 1),
        "rss_growth_mb": round((highest - baseline) / 2**20, 1),
        "page_size": page_size,
    }


def run_child(page_size: int) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [
            sys.executable,
            "-m",
            "scripts.bench.exports",
            "--child",
            out.name,
            "--page-size",
            str(page_size),
        ]
        subprocess.run(command, cwd=REPO, check=True, stdin=subprocess.DEVNULL)
        result: dict[str, Any] = json.loads(Path(out.name).read_text())
        return result


def summary(results: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """The figures so far; with two sizes or more, the largest's memory over the smallest's."""
    report: dict[str, Any] = {"bucket": BUCKET, "sizes_asked": sizes, "results": results}
    if len(results) > 1 and results[0]["rss_growth_mb"]:
        report["memory_ratio"] = round(
            results[-1]["rss_growth_mb"] / results[0]["rss_growth_mb"], 2
        )
        report["peak_rss_ratio"] = round(results[-1]["peak_rss_mb"] / results[0]["peak_rss_mb"], 2)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="100000,1000000", help="sizes, comma-separated")
    parser.add_argument("--page-size", type=int, default=10_000)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    setup_logging(level(args.verbose), role="exports")
    if args.child is not None:
        args.child.write_text(json.dumps(child_main(args.page_size)))
        return 0
    stop_on_sigterm()  # a stopped run still stops its emulators
    sizes = [int(n) for n in args.rows.split(",") if n.strip()]
    results: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    with Emulators(storage=True) as emulators:
        from shared.container import instance_services

        db = instance_services().db
        for rows in sizes:
            emulators.reset()
            seed(db, rows=rows)
            result = {"rows": rows, **run_child(args.page_size)}
            log.info("export of %d claims: %s", rows, result)
            results.append(result)
            # After each size: a run stopped during a larger one keeps the sizes it finished.
            report = summary(results, sizes)
            write_json(args.json, report)
    print(json.dumps(report, indent=2))
    exact = all(r["exported"] == r["rows"] == r["csv_rows"] for r in results)
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
