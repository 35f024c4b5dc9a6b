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
the same port (see `Bench.prepare` for why), `--warmup-docs` documents written to warm its JIT,
then the DELETE reset. `--reset delete` keeps one emulator and only resets it.

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
import json
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from devkit.firestore_rpcs import RpcCounter
from devkit.measure import peak_rss_bytes, rss_bytes
from scripts.bench import harness
from scripts.bench.harness import positive

log = logging.getLogger("bench.imports")

REPO = Path(__file__).resolve().parents[2]
CEILING_BATCH = 500  # Firestore's limit for one atomic batch
RSS_SAMPLE_SECONDS = 0.05
PROGRESS_EVERY = 10.0
CODE_FORMAT = "BENCH-{:09d}"
TARGET_RSS_RATIO = 1.10
TARGET_CEILING_RATIO = 0.8
TARGET_CODES_PER_SECOND = 10_000.0
LIFTED_RAMP_OPS = 1_000_000


# --- what a child is told and what it answers ----------------------------------------------------

IMPORT, CEILING, BULKWRITER = "import", "ceiling", "bulkwriter"


@dataclass(frozen=True)
class ChildSpec:
    kind: str  # IMPORT, CEILING or BULKWRITER
    label: str
    campaign_id: str
    rows: int
    log_level: int
    object_name: str = ""  # IMPORT: the uploaded CSV and its generation
    generation: str = ""
    committers: int = 1  # CEILING
    with_campaign_update: bool = False  # CEILING: also bump the campaign's counters per batch
    ramp: bool = True  # BULKWRITER: default options, or the ramp lifted


@dataclass
class ChildResult:
    written: int = 0  # codes imported, or documents written
    elapsed_seconds: float = 0.0
    cpu_seconds: float = 0.0  # the child's user + system time during the timed part
    peak_rss_kib: int = 0  # the child's own high-water RSS, whole life
    rss_before_kib: int = 0  # RSS just before the timed part
    rss_max_kib: int = 0  # highest RSS sampled during it
    documents_written: int = 0  # by the child's client during the timed part, at its RPCs
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Phase:
    """One row of the results table."""

    name: str
    kind: str
    rows: int
    written: int
    elapsed_seconds: float
    per_second: float
    cpu_seconds: float
    peak_rss_kib: int
    rss_growth_kib: int
    committers: int
    documents_written: int
    emulator_cpu_seconds: float | None  # the Firestore emulator's, while the child ran
    load: tuple[float, float]  # the machine's 1-minute load average before and after
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def codes(count: int) -> Iterator[str]:
    for number in range(1, count + 1):
        yield CODE_FORMAT.format(number)


# --- child process -------------------------------------------------------------------------------


class RssSampler:
    """Samples this process's RSS every 50 ms in a thread; `max_kib` is the highest value seen."""

    def __init__(self, label: str, progress: Callable[[], str] | None = None) -> None:
        self._label = label
        self._progress = progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self.before_kib = 0
        self.max_kib = 0

    def __enter__(self) -> RssSampler:
        self.before_kib = self.max_kib = rss_bytes() // 1024
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.max_kib = max(self.max_kib, rss_bytes() // 1024)

    def _run(self) -> None:
        next_log = time.monotonic() + PROGRESS_EVERY
        while not self._stop.wait(RSS_SAMPLE_SECONDS):
            rss = rss_bytes() // 1024
            self.max_kib = max(self.max_kib, rss)
            if time.monotonic() >= next_log:
                next_log += PROGRESS_EVERY
                extra = f", {self._progress()}" if self._progress is not None else ""
                log.info(
                    "%s: RSS %.1f MiB (+%.1f MiB)%s",
                    self._label,
                    rss / 1024,
                    (rss - self.before_kib) / 1024,
                    extra,
                )


@contextlib.contextmanager
def measured(spec: ChildSpec, progress: Callable[[], str] | None = None) -> Iterator[ChildResult]:
    """Time the block in the child: wall, CPU, RSS and the documents its client wrote. The block
    sets `written` and `detail` of the result."""
    from shared.container import instance_services

    result = ChildResult()
    with RpcCounter(instance_services().db) as rpcs, RssSampler(spec.label, progress) as sampler:
        with harness.timed() as clock:
            yield result
        result.documents_written = rpcs.snapshot().writes
    result.elapsed_seconds = clock.wall_seconds
    result.cpu_seconds = clock.cpu_seconds
    result.peak_rss_kib = peak_rss_bytes() // 1024
    result.rss_before_kib = sampler.before_kib
    result.rss_max_kib = sampler.max_kib


def child_main(spec_path: Path, result_path: Path) -> int:
    spec = ChildSpec(**json.loads(spec_path.read_text()))
    harness.setup_logging(spec.log_level, role=f"child[{spec.label}]")
    runners = {IMPORT: _child_import, CEILING: _child_ceiling, BULKWRITER: _child_bulkwriter}
    began = time.perf_counter()
    try:
        result = runners[spec.kind](spec)
    except Exception as exc:
        log.exception("%s failed", spec.label)
        # The parent reports the failure as a row of its own and goes on with the next phase.
        failure = {"error": f"{type(exc).__name__}: {exc}", "after": time.perf_counter() - began}
        result_path.write_text(json.dumps(failure))
        return 1
    result_path.write_text(json.dumps(asdict(result)))
    return 0


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
    docs = _ready_made(spec)
    per_batch = CEILING_BATCH - 1 if spec.with_campaign_update else CEILING_BATCH
    chunks = [docs[i : i + per_batch] for i in range(0, len(docs), per_batch)]
    written = 0
    lock = threading.Lock()

    def commit(chunk: list[tuple[str, dict[str, object]]]) -> None:
        nonlocal written
        batch = db.batch()
        for doc_id, fields in chunk:
            batch.create(collection.document(doc_id), fields)
        if spec.with_campaign_update:
            campaign_store.record_pool_growth(
                batch, db, campaign_id=spec.campaign_id, added=len(chunk), now=utcnow()
            )
        batch.commit()
        with lock:
            written += len(chunk)

    log.info(
        "writing %d documents in %d batches of %d, %d committer(s)",
        len(docs),
        len(chunks),
        per_batch,
        spec.committers,
    )
    with (
        measured(spec, progress=lambda: f"{written} written") as result,
        ThreadPoolExecutor(spec.committers, thread_name_prefix="commit") as executor,
    ):
        for _ in executor.map(commit, chunks):
            pass  # re-raises a failed commit
    result.written = written
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


@dataclass
class Bench:
    args: argparse.Namespace
    emulators: harness.Emulators
    phases: list[Phase] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    prepared: bool = False

    def prepare(self) -> None:
        """An empty database on a warmed-up emulator for the next phase.

        The emulator keeps about 2 KiB of heap per document ever written, even after the DELETE
        reset (measured with `jcmd GC.heap_info` after a full GC: 15 MiB fresh, 333 MiB after
        150k documents and a reset, 969 MiB after three such rounds). Its default heap is a
        quarter of the machine's memory, and three phases of a million documents fill it: it
        then spends its time in full GCs. So by default every phase gets a new emulator on the
        same port (the clients reconnect); `--reset delete` keeps one emulator throughout.
        """
        if self.args.reset == "restart" and self.prepared:
            self.emulators.restart_firestore()
        if self.args.warmup_docs and (self.args.reset == "restart" or not self.prepared):
            self.warm_up(self.args.warmup_docs)
        self.emulators.reset()
        self.prepared = True

    def new_campaign(self, label: str, *, codes: Iterator[str] | None = None) -> str:
        from shared.container import instance_services

        return harness.create_campaign(
            instance_services().db,
            campaign_id=f"bench-{label}-{secrets.token_hex(3)}",
            title=f"Import benchmark {label}",
            codes=codes or (),
        )

    def run(self, name: str, spec: ChildSpec) -> Phase:
        """Run one child and record its row; a failed child becomes a row with its error."""
        spec_path = self.emulators.log_dir / f"{spec.label}.spec.json"
        result_path = self.emulators.log_dir / f"{spec.label}.result.json"
        spec_path.write_text(json.dumps(asdict(spec)))
        result_path.unlink(missing_ok=True)
        command = [sys.executable, "-m", "scripts.bench.imports", "--child", str(spec_path)]
        command += ["--child-result", str(result_path)]
        with harness.timed(self.emulators.firestore_pid) as clock:
            process = subprocess.Popen(command, cwd=REPO, stdin=subprocess.DEVNULL)
            try:
                code = process.wait()
            except BaseException:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                raise
        answer: dict[str, Any] = json.loads(result_path.read_text()) if result_path.exists() else {}
        if code != 0 or "error" in answer or not answer:
            error = answer.get("error") or f"child exited with code {code} and no result"
            answer = {"elapsed_seconds": float(answer.get("after", 0.0)), "detail": {}}
        else:
            error = None
        elapsed = float(answer["elapsed_seconds"])
        written = int(answer.get("written", 0))
        phase = Phase(
            name=name,
            kind=spec.kind,
            rows=spec.rows,
            written=written,
            elapsed_seconds=elapsed,
            per_second=written / elapsed if elapsed > 0 else 0.0,
            cpu_seconds=float(answer.get("cpu_seconds", 0.0)),
            peak_rss_kib=int(answer.get("peak_rss_kib", 0)),
            rss_growth_kib=int(answer.get("rss_max_kib", 0)) - int(answer.get("rss_before_kib", 0)),
            committers=spec.committers,
            documents_written=int(answer.get("documents_written", 0)),
            emulator_cpu_seconds=clock.emulator_cpu_seconds,
            load=clock.load,
            detail={**answer["detail"], "rss_before_kib": answer.get("rss_before_kib")},
            error=error,
        )
        self.phases.append(phase)
        if error is not None:
            self.problems.append(f"{name}: FAILED after {elapsed:.1f} s: {error}")
            log.error("%s failed: %s", name, error)
            return phase
        log.info(
            "%s: %d in %.1f s = %.0f/s, peak RSS %.1f MiB, RSS growth %.1f MiB",
            name,
            phase.written,
            elapsed,
            phase.per_second,
            phase.peak_rss_kib / 1024,
            phase.rss_growth_kib / 1024,
        )
        if phase.written != spec.rows:
            self.problems.append(f"{name}: wrote {phase.written} of {spec.rows}")
        return phase

    # --- phases --------------------------------------------------------------------------------

    def warm_up(self, docs: int) -> None:
        """Write and drop some documents, so the emulator's JIT is warm for the first phase."""
        began = time.perf_counter()
        self.new_campaign("warmup", codes=(f"WARMUP-{n:09d}" for n in range(docs)))
        log.info(
            "emulator warmed up with %d documents in %.1f s", docs, time.perf_counter() - began
        )

    def write_csv(self, rows: int) -> Path:
        path = self.emulators.log_dir / f"bench-{rows}.csv"
        with path.open("w", encoding="utf-8", newline="") as out:
            out.write("code\n")
            for code in codes(rows):
                out.write(code)
                out.write("\n")
        log.info("%s: %d rows, %.1f MiB", path.name, rows, path.stat().st_size / 2**20)
        return path

    def import_phase(self, label: str, rows: int) -> Phase:
        from shared.campaigns.store import get_campaign_snapshot
        from shared.container import instance_services
        from shared.settings import get_settings

        self.prepare()
        campaign_id = self.new_campaign(label)
        csv_path = self.write_csv(rows)
        name = f"imports/{campaign_id}/bench.csv"
        blob = instance_services().storage.bucket(get_settings().imports_bucket).blob(name)
        blob.upload_from_filename(str(csv_path), content_type="text/csv")
        csv_path.unlink()
        log.info("uploaded gs://%s/%s#%s", blob.bucket.name, name, blob.generation)
        spec = ChildSpec(
            kind=IMPORT,
            label=label,
            campaign_id=campaign_id,
            rows=rows,
            log_level=log.getEffectiveLevel(),
            object_name=name,
            generation=str(blob.generation),
            committers=get_settings().import_parallel_commits,
        )
        phase = self.run(f"import {_count(rows)}", spec)
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
            log_level=log.getEffectiveLevel(),
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
            log_level=log.getEffectiveLevel(),
            committers=0,
            ramp=ramp,
        )
        return self.run("BulkWriter default" if ramp else "BulkWriter ramp lifted", spec)


def _count(rows: int) -> str:
    if rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}M"
    if rows % 1_000 == 0:
        return f"{rows // 1_000}k"
    return str(rows)


def _mib(kib: float) -> str:
    return f"{kib / 1024:.1f}"


def _per_doc(seconds: float | None, docs: int) -> str:
    """CPU microseconds per document: unlike wall time, hardly changed by a busy machine."""
    return "-" if seconds is None or docs == 0 else f"{seconds / docs * 1e6:.0f}"


def render_table(phases: Sequence[Phase]) -> str:
    header = (
        "phase",
        "rows",
        "par",
        "seconds",
        "per s",
        "writes/doc",
        "peak RSS MiB",
        "RSS growth MiB",
        "CPU µs/doc",
        "emulator µs/doc",
        "load",
    )
    return harness.table(
        header,
        [
            (
                p.name,
                f"{p.written:,}",
                str(p.committers) if p.committers else "-",
                f"{p.elapsed_seconds:.1f}",
                "FAILED" if p.error else f"{p.per_second:,.0f}",
                f"{p.documents_written / p.written:.3f}" if p.written else "-",
                _mib(p.peak_rss_kib),
                _mib(p.rss_growth_kib),
                _per_doc(p.cpu_seconds, p.written),
                _per_doc(p.emulator_cpu_seconds, p.written),
                f"{p.load[0]:.1f}>{p.load[1]:.1f}",
            )
            for p in phases
        ],
    )


Verdict = tuple[str, float | None, str, bool | None]  # what, value, target, met


def _memory_verdicts(small: Phase, large: Phase) -> list[Verdict]:
    ratio = large.peak_rss_kib / small.peak_rss_kib
    growth = large.rss_growth_kib / small.rss_growth_kib if small.rss_growth_kib > 0 else None
    return [
        (
            f"peak RSS {_count(large.rows)} / {_count(small.rows)}",
            ratio,
            f"<= {TARGET_RSS_RATIO:.2f}",
            ratio <= TARGET_RSS_RATIO,
        ),
        (f"RSS growth {_count(large.rows)} / {_count(small.rows)}", growth, "info", None),
    ]


def verdicts(bench: Bench, parallel: int) -> list[Verdict]:
    # A failed phase has no figures: the targets it would measure are missed.
    done = [p for p in bench.phases if p.error is None]
    by_name = {p.name: p for p in done}
    small = next((p for p in done if p.kind == IMPORT and p.rows != bench.args.rows), None)
    large = next((p for p in done if p.kind == IMPORT and p.rows == bench.args.rows), None)
    ceiling = by_name.get(f"ceiling batch x{parallel}")
    single = by_name.get("ceiling batch x1")
    out: list[Verdict] = [
        (f"{p.name} failed", None, "completes", False) for p in bench.phases if p.error
    ]
    if small is not None and large is not None:
        out += _memory_verdicts(small, large)
    if large is None:
        return out
    out.append(
        (
            "importer codes/s",
            large.per_second,
            f">= {TARGET_CODES_PER_SECOND:,.0f}",
            large.per_second >= TARGET_CODES_PER_SECOND,
        )
    )
    if ceiling is not None:
        ratio = large.per_second / ceiling.per_second
        out.append(
            (
                f"importer / ceiling x{parallel}",
                ratio,
                f">= {TARGET_CEILING_RATIO:.2f}",
                ratio >= TARGET_CEILING_RATIO,
            )
        )
    if single is not None and single is not ceiling:
        out.append(("importer / ceiling x1", large.per_second / single.per_second, "info", None))
    return out


def render_verdicts(rows: Sequence[Verdict]) -> str:
    width = max((len(r[0]) for r in rows), default=0)
    lines = []
    for what, value, target, met in rows:
        shown = "-" if value is None else (f"{value:,.0f}" if value >= 100 else f"{value:.2f}")
        verdict = "" if met is None else ("met" if met else "MISSED")
        lines.append(f"{what.ljust(width)}  {shown:>8}  target {target:<10} {verdict}".rstrip())
    return "\n".join(lines)


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


def bench(run: Bench) -> int:
    """Run the phases and print what was measured, also when interrupted half-way."""
    from shared.settings import get_settings

    args = run.args
    settings = get_settings()
    parallel = settings.import_parallel_commits
    load_before = harness.load_average()
    interrupted = False
    try:
        run_phases(run, parallel)
    except KeyboardInterrupt:
        if not run.phases:
            raise
        log.warning("interrupted; reporting the phases that finished")
        interrupted = True
    load_after = harness.load_average()

    targets = verdicts(run, parallel)
    print(
        f"codedrop import benchmark: {os.cpu_count()} CPUs, load average "
        f"{load_before[0]:.1f} -> {load_after[0]:.1f}; importer batch "
        f"{settings.import_batch_size}, {parallel} parallel commits, ramp "
        f"{'on' if settings.import_ramp_enabled else 'off'}; ceiling batches of {CEILING_BATCH}; "
        f"emulator {'restarted' if args.reset == 'restart' else 'emptied'} before each phase"
        + (" (INTERRUPTED)" if interrupted else "")
    )
    print()
    print(render_table(run.phases))
    print()
    print(render_verdicts(targets))
    for problem in run.problems:
        print(f"PROBLEM: {problem}")
    sys.stdout.flush()
    harness.write_json(
        args.json,
        {
            "project": harness.PROJECT,
            "cpus": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": load_after,
            "import_batch_size": settings.import_batch_size,
            "import_parallel_commits": parallel,
            "import_ramp": settings.import_ramp_enabled,
            "ceiling_batch": CEILING_BATCH,
            "reset": args.reset,
            "warmup_docs": args.warmup_docs,
            "interrupted": interrupted,
            "phases": [asdict(p) for p in run.phases],
            "targets": [{"what": w, "value": v, "target": t, "met": m} for w, v, t, m in targets],
            "problems": run.problems,
        },
    )
    if interrupted:
        return 130
    return 1 if run.problems else 0


OPTIONS: list[harness.Option] = [
    ("--rows", positive, 1_000_000, "codes in the big run"),
    ("--small-rows", positive, 100_000, "codes in the memory comparison run"),
    ("--skip-small", None, False, "no --small-rows run"),
    ("--parallel", positive, None, "the importer's parallel commits, and the ceiling's committers"),
    ("--batch-size", positive, None, "the importer's batch size (CODEDROP_IMPORT_BATCH_SIZE)"),
    ("--skip-ceiling", None, False, "only the import (e.g. for profiling)"),
    ("--ceiling-hot-doc", None, False, "also a ceiling that bumps the campaign in every batch"),
    ("--with-bulkwriter", None, False, "also time BulkWriter (default ramp, and lifted)"),
    ("--bulk-docs", positive, 10_000, "BulkWriter documents"),
    ("--warmup-docs", int, 20_000, "documents written to warm the emulator up first (0: none)"),
]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__, prog="imports", options=OPTIONS)
    # A new emulator, or only the DELETE reset (the emulator keeps ~2 KiB of heap per document).
    reset = "before each phase: a new emulator (restart) or an emptied one (delete)"
    parser.add_argument("--reset", choices=("restart", "delete"), default="restart", help=reset)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-result", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        if args.child_result is None:
            raise SystemExit("--child needs --child-result")
        return child_main(args.child, args.child_result)
    harness.setup_logging(harness.level(args.verbose), role="bench")
    harness.stop_on_sigterm()
    # Before anything of shared is used: the children inherit this environment.
    if args.parallel is not None:
        os.environ["CODEDROP_IMPORT_PARALLEL_COMMITS"] = str(args.parallel)
    if args.batch_size is not None:
        os.environ["CODEDROP_IMPORT_BATCH_SIZE"] = str(args.batch_size)
    emulators = harness.Emulators(storage=True)
    try:
        with emulators:
            code = bench(Bench(args=args, emulators=emulators))
            emulators.keep_logs = code == 130
            return code
    except KeyboardInterrupt:
        log.warning("interrupted")
        return 130
    except Exception:
        log.exception("benchmark failed")
        return 2
    finally:
        for leftover in emulators.log_dir.glob("*.csv"):  # when the logs are kept
            leftover.unlink()


if __name__ == "__main__":
    sys.exit(main())
