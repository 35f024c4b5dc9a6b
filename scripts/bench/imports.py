"""Import benchmark: the real CSV import path against plain batch writes, on its own emulators.

    .venv/bin/python -m scripts.bench.imports [--rows 1000000] [--small-rows 100000]
        [--skip-small] [--parallel N] [--batch-size N] [--skip-ceiling] [--ceiling-hot-doc]
        [--with-bulkwriter] [--bulk-docs 10000] [--warmup-docs 20000] [--reset restart|delete]
        [--json PATH] [-v]

Starts a Firestore and a Cloud Storage emulator on free ports (project demo-codedrop-bench,
bucket codedrop-imports), each in its own process group, and stops them at the end. For
`--small-rows` and for `--rows` codes (`BENCH-000000001`, ...) it streams a CSV to a temporary
file, uploads it to `imports/{campaign}/bench.csv`, creates the campaign and runs the real import
path, `IntakeService.handle_object_finalized`, in a child process of its own, so that the child's
peak RSS is the importer's alone. The child reports the wall time of the import, its CPU time,
its peak RSS (its own high-water mark, VmHWM), its RSS growth (the highest RSS sampled every
50 ms during the import minus the RSS just before it, clients created and connected
beforehand) and the documents its client wrote (counted at its RPCs,
devkit/firestore_rpcs.py).

Every phase starts from an empty database on a warmed-up emulator: by default a new emulator on
the same port (see `phases.ChildBench.prepare` for why), `--warmup-docs` documents written to
warm its JIT, then the DELETE reset. `--reset delete` keeps one emulator and only resets it.

The ceiling, in the same run: the same number of ready-made coupon documents (`coupon_fields`,
ids from `coupon_id_for`, all built before timing starts) written with plain atomic batches of
500 creates, by as many parallel committers as the importer uses and by one. `--ceiling-hot-doc`
adds a ceiling that, like the importer, also bumps the campaign's counters in every batch
(499 creates + 1 update). `--with-bulkwriter` also times google-cloud-firestore's BulkWriter on
`--bulk-docs` documents with its default options (a 500 ops/s ramp) and with the ramp lifted.

Prints a table to stdout (logs go to stderr) and, with `--json`, writes every figure to PATH.
Besides wall time, the table gives CPU microseconds per document of the child and of the
emulator, and the machine's load average around each phase: on a shared machine, wall times of
phases run minutes apart are not comparable when the load changed, CPU per document mostly is.
Targets: importer peak RSS flat (1M within 10% of 100k), importer >= 0.8 of the same-parallelism
ceiling, importer >= 10,000 codes/s. A missed target is reported, not an error. Exit code 1: a
phase failed or did not write exactly the expected codes; 2: the benchmark itself failed; 130:
interrupted (the phases that finished are still reported).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from scripts.bench import harness, phases
from scripts.bench.harness import positive
from scripts.bench.phases import ChildResult, Verdict, at_least, count, measured

log = logging.getLogger("bench.imports")

CEILING_BATCH = 500  # Firestore's limit for one atomic batch
CODE_FORMAT = "BENCH-{:09d}"
TARGET_RSS_RATIO = 1.10
TARGET_CEILING_RATIO = 0.8
TARGET_CODES_PER_SECOND = 10_000.0
LIFTED_RAMP_OPS = 1_000_000


# --- what a child is told and what it answers ----------------------------------------------------

IMPORT, CEILING, BULKWRITER = "import", "ceiling", "bulkwriter"


@dataclass(frozen=True)
class ChildSpec(phases.ChildSpec):
    """IMPORT: the uploaded CSV (object_name, generation); CEILING: `committers` writing plain
    batches; BULKWRITER: BulkWriter's defaults, or the ramp lifted."""

    with_campaign_update: bool = False  # CEILING: also bump the campaign's counters per batch
    ramp: bool = True  # BULKWRITER: default options, or the ramp lifted


@dataclass
class Phase(phases.Phase):
    documents_written: int = 0  # by the child's client during the timed part, at its RPCs


def codes(count: int) -> Iterator[str]:
    for number in range(1, count + 1):
        yield CODE_FORMAT.format(number)


# --- child process -------------------------------------------------------------------------------


def _child_import(spec: ChildSpec) -> ChildResult:
    # Imported here: the parent has put the emulators into the environment, and settings and
    # clients are built once per process.
    from shared.campaigns import store as campaign_store
    from shared.clock import utcnow
    from shared.container import instance_services
    from shared.intake.service import IntakeService, StoredObject
    from shared.settings import get_settings

    settings = get_settings()
    db, storage = instance_services().db, instance_services().storage
    # Connect both clients outside the measurement (gRPC channel, HTTP session).
    campaign_store.get_campaign(db, campaign_id=spec.campaign_id)
    storage.bucket(settings.imports_bucket).get_blob(spec.object_name)
    service = IntakeService(db=db, storage_client=storage, settings=settings, clock=utcnow)
    obj = StoredObject(settings.imports_bucket, spec.object_name, spec.generation)
    log.info(
        "importing %s (batch %d, %d parallel commits, ramp %s)",
        obj.uri,
        settings.import_batch_size,
        settings.import_parallel_commits,
        "on" if settings.import_ramp_enabled else "off",
    )
    with measured(spec) as result:
        job = service.handle_object_finalized(obj)
    if job is None:
        raise RuntimeError("handle_object_finalized returned no job")
    result.written = job.imported
    result.detail = {
        "job_id": job.job_id,
        "state": job.state.value,
        "failure_reason": job.failure_reason,
        "rows_read": job.rows_read,
        "imported": job.imported,
        "duplicates_in_file": job.duplicates_in_file,
        "duplicates_in_campaign": job.duplicates_in_campaign,
        "invalid": job.invalid,
        "batch_size": settings.import_batch_size,
        "parallel_commits": settings.import_parallel_commits,
        "ramp": settings.import_ramp_enabled,
    }
    return result


def _ready_made(spec: ChildSpec) -> list[tuple[str, dict[str, object]]]:
    """Every coupon document of the phase, built before timing starts; the client connected."""
    from shared.campaigns import store as campaign_store
    from shared.clock import utcnow
    from shared.container import instance_services
    from shared.coupons.store import coupon_fields, coupon_id_for

    now = utcnow()
    job_id = f"bench-{spec.label}"
    started = time.perf_counter()
    docs = [
        (coupon_id_for(code), coupon_fields(code=code, now=now, job_id=job_id, line=line))
        for line, code in enumerate(codes(spec.rows), start=2)
    ]
    log.info("%d documents built in %.1f s", len(docs), time.perf_counter() - started)
    campaign_store.get_campaign(instance_services().db, campaign_id=spec.campaign_id)
    return docs


def _child_ceiling(spec: ChildSpec) -> ChildResult:
    from shared.campaigns import store as campaign_store
    from shared.clock import utcnow
    from shared.container import instance_services
    from shared.gcp.firestore import coupons_collection

    db = instance_services().db
    collection = coupons_collection(db, spec.campaign_id)
    per_batch = CEILING_BATCH - 1 if spec.with_campaign_update else CEILING_BATCH

    def commit(chunk: Sequence[tuple[str, dict[str, object]]]) -> None:
        batch = db.batch()
        for doc_id, fields in chunk:
            batch.create(collection.document(doc_id), fields)
        if spec.with_campaign_update:
            campaign_store.record_pool_growth(
                batch, db, campaign_id=spec.campaign_id, added=len(chunk), now=utcnow()
            )
        batch.commit()

    result = phases.committed(spec, _ready_made(spec), per_batch, commit)
    result.detail = {"batch_writes": per_batch, "campaign_update": spec.with_campaign_update}
    return result


def _child_bulkwriter(spec: ChildSpec) -> ChildResult:
    from google.cloud.firestore_v1.bulk_writer import BulkWriterOptions

    from shared.container import instance_services
    from shared.gcp.firestore import coupons_collection

    db = instance_services().db
    collection = coupons_collection(db, spec.campaign_id)
    docs = _ready_made(spec)
    options = (
        BulkWriterOptions()
        if spec.ramp
        else BulkWriterOptions(
            initial_ops_per_second=LIFTED_RAMP_OPS, max_ops_per_second=LIFTED_RAMP_OPS
        )
    )
    written = 0
    failures = 0
    lock = threading.Lock()

    def on_success(reference: object, result: object, writer: object) -> None:
        nonlocal written
        with lock:
            written += 1

    def on_error(failure: object, writer: object) -> bool:
        nonlocal failures
        with lock:
            failures += 1
        return False  # no retry: every document is new

    log.info(
        "BulkWriter: %d creates, initial %d ops/s, max %d ops/s",
        len(docs),
        options.initial_ops_per_second,
        options.max_ops_per_second,
    )
    with measured(spec, progress=lambda: f"{written} written") as result:
        writer = db.bulk_writer(options=options)
        writer.on_write_result(on_success)
        writer.on_write_error(on_error)
        for doc_id, fields in docs:
            writer.create(collection.document(doc_id), fields)
        writer.close()  # type: ignore[no-untyped-call]  # flushes, waits for every write
    result.written = written
    result.detail = {
        "initial_ops_per_second": options.initial_ops_per_second,
        "max_ops_per_second": options.max_ops_per_second,
        "failures": failures,
    }
    return result


# --- parent --------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Bench(phases.ChildBench[Phase]):
    module = "scripts.bench.imports"
    shortfall = "{name}: wrote {written} of {rows}"

    def new_row(self, rpcs: dict[str, Any], **fields: Any) -> Phase:
        return Phase(**fields, documents_written=int(rpcs.get("documents_written", 0)))

    def new_campaign(self, label: str, *, codes: Iterator[str] | None = None) -> str:
        from shared.container import instance_services

        return harness.create_campaign(
            instance_services().db,
            campaign_id=f"bench-{label}-{secrets.token_hex(3)}",
            title=f"Import benchmark {label}",
            codes=codes or (),
        )

    # --- phases --------------------------------------------------------------------------------

    def warm_up(self, docs: int) -> None:
        self.new_campaign("warmup", codes=(f"WARMUP-{n:09d}" for n in range(docs)))

    def import_phase(self, label: str, rows: int) -> Phase:
        from shared.campaigns.store import get_campaign_snapshot
        from shared.container import instance_services
        from shared.settings import get_settings

        self.prepare()
        campaign_id = self.new_campaign(label)
        blob = self.upload_csv(f"imports/{campaign_id}/bench.csv", "code", codes(rows))
        spec = ChildSpec(
            kind=IMPORT,
            label=label,
            campaign_id=campaign_id,
            rows=rows,
            object_name=blob.name,
            generation=str(blob.generation),
            committers=get_settings().import_parallel_commits,
        )
        phase = self.run(f"import {count(rows)}", spec)
        if phase.error is None:
            # What the database says, not only what the job says.
            snapshot = get_campaign_snapshot(instance_services().db, campaign_id=campaign_id)
            codes_total = (snapshot.to_dict() or {}).get("codes_total") if snapshot else None
            phase.detail["campaign_codes_total"] = codes_total
            if phase.detail["state"] != "done" or codes_total != rows:
                self.problems.append(
                    f"{phase.name}: job {phase.detail['state']}, imported {phase.written}, "
                    f"campaign codes_total {codes_total}, expected {rows} "
                    f"({phase.detail.get('failure_reason')})"
                )
        with contextlib.suppress(Exception):
            blob.delete()  # the storage emulator keeps objects in memory
        return phase

    def ceiling_phase(self, rows: int, committers: int, *, with_campaign_update: bool) -> Phase:
        self.prepare()
        spec = ChildSpec(
            kind=CEILING,
            label=f"ceiling-x{committers}{'-hot' if with_campaign_update else ''}",
            campaign_id=self.new_campaign(f"ceiling{committers}"),
            rows=rows,
            committers=committers,
            with_campaign_update=with_campaign_update,
        )
        name = f"ceiling batch x{committers}{' +counter' if with_campaign_update else ''}"
        return self.run(name, spec)

    def bulkwriter_phase(self, docs: int, *, ramp: bool) -> Phase:
        self.prepare()
        spec = ChildSpec(
            kind=BULKWRITER,
            label="bulkwriter" if ramp else "bulkwriter-noramp",
            campaign_id=self.new_campaign("bulk"),
            rows=docs,
            committers=0,
            ramp=ramp,
        )
        return self.run("BulkWriter default" if ramp else "BulkWriter ramp lifted", spec)


def render_table(rows: Sequence[Phase]) -> str:
    writes: phases.Column[Phase] = (
        "writes/doc",
        lambda p: phases.per(p.documents_written, p.written),
    )
    return phases.render_table(rows, unit="doc", columns=[writes])


def verdicts(bench: Bench, parallel: int) -> list[Verdict]:
    by_name = {p.name: p for p in bench.phases if p.error is None}
    small, large = phases.small_and_large(bench, IMPORT)
    ceiling = by_name.get(f"ceiling batch x{parallel}")
    single = by_name.get("ceiling batch x1")
    out = phases.failed(bench.phases)
    if small is not None and large is not None:
        growth = large.rss_growth_kib / small.rss_growth_kib if small.rss_growth_kib > 0 else None
        out.append(phases.peak_rss(small, large, TARGET_RSS_RATIO))
        out.append((f"RSS growth {count(large.rows)} / {count(small.rows)}", growth, "info", None))
    if large is None:
        return out
    out.append(at_least("importer codes/s", large.per_second, TARGET_CODES_PER_SECOND, digits=0))
    if ceiling is not None:
        ratio = large.per_second / ceiling.per_second
        out.append(at_least(f"importer / ceiling x{parallel}", ratio, TARGET_CEILING_RATIO))
    if single is not None and single is not ceiling:
        out.append(("importer / ceiling x1", large.per_second / single.per_second, "info", None))
    return out


def run_phases(run: Bench, parallel: int) -> None:
    args = run.args
    if not args.skip_small:
        run.import_phase("small", args.small_rows)
    run.import_phase("large", args.rows)
    if not args.skip_ceiling:
        run.ceiling_phase(args.rows, parallel, with_campaign_update=False)
        if parallel != 1:
            run.ceiling_phase(args.rows, 1, with_campaign_update=False)
    if args.ceiling_hot_doc:
        run.ceiling_phase(args.rows, parallel, with_campaign_update=True)
    if args.with_bulkwriter:
        run.bulkwriter_phase(args.bulk_docs, ramp=True)
        run.bulkwriter_phase(args.bulk_docs, ramp=False)


def bench(args: argparse.Namespace, emulators: harness.Emulators) -> int:
    """Run the phases and print what was measured, also when interrupted half-way."""
    return measure(Bench(args=args, emulators=emulators, restart=args.reset == "restart"))


def measure(run: Bench) -> int:
    from shared.settings import get_settings

    args = run.args
    settings = get_settings()
    parallel = settings.import_parallel_commits
    outcome = phases.run_phases(run, lambda: run_phases(run, parallel))
    return phases.report(
        run,
        outcome,
        title=(
            f"codedrop import benchmark: {os.cpu_count()} CPUs, load average "
            f"{outcome.load_before[0]:.1f} -> {outcome.load_after[0]:.1f}; importer batch "
            f"{settings.import_batch_size}, {parallel} parallel commits, ramp "
            f"{'on' if settings.import_ramp_enabled else 'off'}; ceiling batches of "
            f"{CEILING_BATCH}; emulator "
            f"{'restarted' if args.reset == 'restart' else 'emptied'} before each phase"
        ),
        table=render_table(run.phases),
        targets=verdicts(run, parallel),
        figures={
            "import_batch_size": settings.import_batch_size,
            "import_parallel_commits": parallel,
            "import_ramp": settings.import_ramp_enabled,
            "ceiling_batch": CEILING_BATCH,
            "reset": args.reset,
        },
    )


OPTIONS: list[harness.Option] = [
    ("--parallel", positive, None, "the importer's parallel commits, and the ceiling's committers"),
    ("--batch-size", positive, None, "the importer's batch size (CODEDROP_IMPORT_BATCH_SIZE)"),
    ("--skip-ceiling", None, False, "only the import (e.g. for profiling)"),
    ("--ceiling-hot-doc", None, False, "also a ceiling that bumps the campaign in every batch"),
    ("--with-bulkwriter", None, False, "also time BulkWriter (default ramp, and lifted)"),
    ("--bulk-docs", positive, 10_000, "BulkWriter documents"),
]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = phases.parser(__doc__, prog="imports", what="codes", options=OPTIONS)
    # A new emulator, or only the DELETE reset (the emulator keeps ~2 KiB of heap per document).
    reset = "before each phase: a new emulator (restart) or an emptied one (delete)"
    parser.add_argument("--reset", choices=("restart", "delete"), default="restart", help=reset)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return phases.main(
        args,
        spec_type=ChildSpec,
        runners={IMPORT: _child_import, CEILING: _child_ceiling, BULKWRITER: _child_bulkwriter},
        environment={
            "CODEDROP_IMPORT_PARALLEL_COMMITS": args.parallel,
            "CODEDROP_IMPORT_BATCH_SIZE": args.batch_size,
        },
        bench=bench,
    )


if __name__ == "__main__":
    sys.exit(main())
