"""Export benchmark: a claims export of N claims and the exporter's memory, on emulators of its own.

    .venv/bin/python -m scripts.bench.exports [--rows 100000,1000000] [--page-size N] [-v]

Starts a Firestore and a Cloud Storage emulator on free ports (project demo-codedrop-bench,
bucket codedrop-imports), each in its own process group, and stops them at the end. For each
size it empties the database, writes a campaign and that many claim documents (batches of 500
on a few threads, not timed), and runs the real export path, `ExportService.run` of a claims
export, in a child process of its own, so that the child's peak RSS is the exporter's alone. The
child reports the export's wall time, its CPU time, its peak RSS (VmHWM), its RSS growth (the
highest RSS sampled every 50 ms during the export minus the RSS just before it, clients created
and connected beforehand) and the rows the CSV holds, read back.

Prints one JSON object to stdout (logs go to stderr): a result per size and, with two sizes or
more, `memory_ratio`, the largest size's peak RSS growth over the smallest's (flat: close to 1).
Exit code 1: an export did not write exactly the claims there are; 2: the benchmark failed.
"""

from __future__ import annotations

import argparse
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

from scripts.bench.harness import BUCKET, Emulators, level, setup_logging, stop_on_sigterm
from scripts.support.measure import cpu_seconds, peak_rss_bytes, rss_bytes
from shared.campaigns import service as campaign_service
from shared.campaigns.models import CampaignCreate
from shared.clock import utcnow

log = logging.getLogger("bench.exports")

REPO = Path(__file__).resolve().parents[2]
CAMPAIGN = "export-bench"
SEED_BATCH = 500
SEED_THREADS = 4
SAMPLE_SECONDS = 0.05


def seed(db: firestore.Client, *, rows: int) -> None:
    """The campaign and `rows` claim documents as claims write them (one user each)."""
    now = utcnow()
    data = CampaignCreate(
        title="Export bench", starts_at=now, ends_at=now.replace(year=now.year + 1)
    )
    campaign_service.create_campaign(
        db, data=data.model_copy(update={"campaign_id": CAMPAIGN}), now=now
    )
    claims = db.collection("campaigns").document(CAMPAIGN).collection("claims")

    def write(start: int) -> None:
        batch = db.batch()
        for n in range(start, min(start + SEED_BATCH, rows)):
            batch.create(
                claims.document(f"u{n:09d}-0"),
                {
                    "campaign_id": CAMPAIGN,
                    "user_id": f"shopper-{n:09d}",
                    "coupon_id": f"c{n:09d}",
                    "code": f"BENCH-{n:09d}",
                    "slot": 0,
                    "state": "claimed",
                    "claimed_at": now,
                },
            )
        batch.commit()

    started = time.perf_counter()
    with ThreadPoolExecutor(SEED_THREADS) as pool:
        list(pool.map(write, range(0, rows, SEED_BATCH)))
    log.info("%d claims written in %.1f s", rows, time.perf_counter() - started)


def child_main(page_size: int) -> dict[str, Any]:
    """In the child: export the campaign's claims and say what it cost."""
    from shared.audit.models import Actor, AuditContext
    from shared.container import instance_services
    from shared.control.exports import ExportKind, ExportService

    services = instance_services()
    exports = ExportService(
        db=services.db,
        streams=services.streams_db,
        storage_client=services.storage,
        settings=services.settings,
        clock=utcnow,
        page_size=page_size,
    )
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
    sampler.start()
    cpu_before = cpu_seconds(tree=False) or 0.0
    started = time.perf_counter()
    finished = exports.run(job, ExportKind.CLAIMS)
    wall = time.perf_counter() - started
    cpu = (cpu_seconds(tree=False) or 0.0) - cpu_before
    done.set()
    sampler.join()
    lines = sum(chunk.count(b"\n") for chunk in exports.download(job))
    return {
        "exported": finished.exported if finished is not None else None,
        "csv_rows": lines - 1,  # less the header
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "rows_per_second": round(lines / wall) if wall else None,
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="100000,1000000", help="sizes, comma-separated")
    parser.add_argument("--page-size", type=int, default=10_000)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    setup_logging(level(args.verbose), role="exports")
    if args.child is not None:
        args.child.write_text(json.dumps(child_main(args.page_size)))
        return 0
    stop_on_sigterm()  # a stopped run still stops its emulators
    sizes = [int(n) for n in args.rows.split(",") if n.strip()]
    results: list[dict[str, Any]] = []
    with Emulators(storage=True) as emulators:
        from shared.container import instance_services

        db = instance_services().db
        for rows in sizes:
            emulators.reset()
            seed(db, rows=rows)
            result = {"rows": rows, **run_child(args.page_size)}
            log.info("export of %d claims: %s", rows, result)
            results.append(result)
    report: dict[str, Any] = {"bucket": BUCKET, "results": results}
    if len(results) > 1 and results[0]["rss_growth_mb"]:
        report["memory_ratio"] = round(
            results[-1]["rss_growth_mb"] / results[0]["rss_growth_mb"], 2
        )
        report["peak_rss_ratio"] = round(results[-1]["peak_rss_mb"] / results[0]["peak_rss_mb"], 2)
    print(json.dumps(report, indent=2))
    exact = all(r["exported"] == r["rows"] == r["csv_rows"] for r in results)
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
