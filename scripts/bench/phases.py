"""A measured phase run in a child process: what the import and assignment benchmarks share.

The parent gives the child a spec (JSON, `--child PATH`); the child runs its scenario inside
`measured()` (wall time, CPU time, peak RSS, RSS growth sampled every 50 ms, its Firestore
clients' RPCs) and answers with a result (JSON, `--child-result PATH`), so that the child's peak
RSS is its scenario's alone. The parent records each child as a `Phase`, one row of the table,
and prints the table, the targets and the problems, and writes the JSON file of figures."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from google.cloud.storage import Blob

from devkit.firestore_rpcs import RpcCounter
from devkit.measure import peak_rss_bytes, rss_bytes
from scripts.bench import harness

log = logging.getLogger("bench.phases")

REPO = Path(__file__).resolve().parents[2]
RSS_SAMPLE_SECONDS = 0.05
PROGRESS_EVERY = 10.0

T = TypeVar("T")
S = TypeVar("S", bound="ChildSpec")
P = TypeVar("P", bound="Phase")


# --- what a child is told and what it answers ----------------------------------------------------


@dataclass(frozen=True)
class ChildSpec:
    """What a child runs; a benchmark adds the fields of its own scenarios."""

    kind: str  # which of the benchmark's scenarios
    label: str
    campaign_id: str
    rows: int
    # The child logs at the parent's level.
    log_level: int = field(default_factory=lambda: log.getEffectiveLevel())
    committers: int = 1
    object_name: str = ""  # an uploaded file and its generation
    generation: str = ""
    profile: str = ""  # a directory: the child's measured block is profiled into it


@dataclass
class ChildResult:
    written: int = 0  # what the scenario counts as done: codes imported, recipients given a code
    elapsed_seconds: float = 0.0
    cpu_seconds: float = 0.0  # the child's user + system time during the timed part
    peak_rss_kib: int = 0  # the child's own high-water RSS, whole life
    rss_before_kib: int = 0  # RSS just before the timed part
    rss_max_kib: int = 0  # highest RSS sampled during it
    rpcs: dict[str, Any] = field(default_factory=dict)  # its Firestore clients', timed part
    detail: dict[str, Any] = field(default_factory=dict)


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
    """Time the block in the child: wall, CPU, RSS and the RPCs of its Firestore clients (the
    streaming one too: a walk of a collection goes through it), cProfiled if the spec says so.
    The block sets `written` and `detail` of the result."""
    from shared.container import instance_services

    services = instance_services()
    profile = Path(spec.profile) / f"{spec.label}.pstats" if spec.profile else None
    result = ChildResult()
    with (
        RpcCounter(services.db) as rpcs,
        RpcCounter(services.streams_db) as streamed,
        RssSampler(spec.label, progress) as sampler,
    ):
        with harness.timed() as clock, harness.profiled(profile):
            yield result
        result.rpcs = (rpcs.snapshot() + streamed.snapshot()).as_dict()
    result.elapsed_seconds = clock.wall_seconds
    result.cpu_seconds = clock.cpu_seconds
    result.peak_rss_kib = peak_rss_bytes() // 1024
    result.rss_before_kib = sampler.before_kib
    result.rss_max_kib = sampler.max_kib


def committed(
    spec: ChildSpec, items: Sequence[T], per_batch: int, commit: Callable[[Sequence[T]], None]
) -> ChildResult:
    """`commit` the items in chunks of `per_batch` from `spec.committers` threads, measured;
    `written` counts the items of the chunks committed."""
    chunks = [items[i : i + per_batch] for i in range(0, len(items), per_batch)]
    written = 0
    lock = threading.Lock()

    def one(chunk: Sequence[T]) -> None:
        nonlocal written
        commit(chunk)
        with lock:
            written += len(chunk)

    log.info(
        "writing %d items in %d batches of %d, %d committer(s)",
        len(items),
        len(chunks),
        per_batch,
        spec.committers,
    )
    with (
        measured(spec, progress=lambda: f"{written} written") as result,
        ThreadPoolExecutor(spec.committers, thread_name_prefix="commit") as executor,
    ):
        for _ in executor.map(one, chunks):
            pass  # re-raises a failed commit
    result.written = written
    return result


def child_main(
    spec_type: type[S],
    runners: Mapping[str, Callable[[S], ChildResult]],
    spec_path: Path,
    result_path: Path,
) -> int:
    spec = spec_type(**json.loads(spec_path.read_text()))
    harness.setup_logging(spec.log_level, role=f"child[{spec.label}]")
    began = time.perf_counter()
    try:
        result = runners[spec.kind](spec)
    except Exception as exc:
        log.exception("%s failed", spec.label)
        # The parent reports the failure as a row of its own and goes on with the next phase.
        failure = {"error": f"{type(exc).__name__}: {exc}", "after": time.perf_counter() - began}
        result_path.write_text(json.dumps(failure))
        return 1
    result_path.write_text(json.dumps(asdict(result), default=str))
    return 0


# --- parent --------------------------------------------------------------------------------------


@dataclass
class Phase:
    """One row of the results table: a child's answer, and the emulator's CPU and the machine's
    load while it ran."""

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
    emulator_cpu_seconds: float | None  # the Firestore emulator's, while the child ran
    load: tuple[float, float]  # the machine's 1-minute load average before and after
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass(kw_only=True)
class ChildBench(ABC, Generic[P]):
    """A benchmark of phases each run in a child process (`python -m {module} --child ...`).

    `shortfall`: the problem recorded when a phase did not write exactly its rows (format
    fields name, written, rows)."""

    module: ClassVar[str]
    shortfall: ClassVar[str]

    args: argparse.Namespace
    emulators: harness.Emulators
    phases: list[P] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    restart: bool = True  # prepare(): a new emulator for each phase, or the one emptied
    prepared: bool = False

    @abstractmethod
    def new_row(self, rpcs: dict[str, Any], **fields: Any) -> P:
        """A row of this benchmark's table: the shared `fields`, and its own from the child's
        Firestore RPCs."""

    @abstractmethod
    def warm_up(self, docs: int) -> None:
        """Write and drop some documents, so the emulator's JIT is warm for the next phase."""

    def prepare(self) -> None:
        """An empty database on a warmed-up emulator for the next phase: a new emulator on the
        same port (the clients reconnect) unless `restart` is false, `--warmup-docs` documents
        written to a new one, then the DELETE reset.

        The emulator keeps about 2 KiB of heap per document ever written, even after the DELETE
        reset (measured with `jcmd GC.heap_info` after a full GC: 15 MiB fresh, 333 MiB after
        150k documents and a reset, 969 MiB after three such rounds). Its default heap is a
        quarter of the machine's memory, and three phases of a million documents fill it: it
        then spends its time in full GCs.
        """
        if self.restart and self.prepared:
            self.emulators.restart_firestore()
        if self.args.warmup_docs and (self.restart or not self.prepared):
            began = time.perf_counter()
            self.warm_up(self.args.warmup_docs)
            log.info(
                "emulator warmed up with %d documents in %.1f s",
                self.args.warmup_docs,
                time.perf_counter() - began,
            )
        self.emulators.reset()
        self.prepared = True

    def upload_csv(self, name: str, header: str, lines: Iterable[str]) -> Blob:
        """A CSV (`header`, then `lines`) uploaded as `name` to the imports bucket, written
        through a file that is removed at once."""
        from shared.container import instance_services
        from shared.settings import get_settings

        path = self.emulators.log_dir / "upload.csv"
        try:
            with path.open("w", encoding="utf-8", newline="") as out:
                out.write(f"{header}\n")
                for line in lines:
                    out.write(f"{line}\n")
            blob = instance_services().storage.bucket(get_settings().imports_bucket).blob(name)
            blob.upload_from_filename(str(path), content_type="text/csv")
            size = path.stat().st_size / 2**20
            log.info(
                "uploaded gs://%s/%s#%s, %.1f MiB", blob.bucket.name, name, blob.generation, size
            )
        finally:
            path.unlink(missing_ok=True)
        return blob

    def run(self, name: str, spec: ChildSpec) -> P:
        """Run one child and record its row; a failed child becomes a row with its error."""
        answer, code, clock = self.child(spec)
        error = answer.get("error") if answer else f"child exited with code {code} and no result"
        if code != 0 and error is None:
            error = f"child exited with code {code}"
        elapsed = float(answer.get("elapsed_seconds", answer.get("after", 0.0)))
        written = int(answer.get("written", 0))
        phase = self.new_row(
            answer.get("rpcs", {}),
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
            emulator_cpu_seconds=clock.emulator_cpu_seconds,
            load=clock.load,
            detail={**answer.get("detail", {}), "rss_before_kib": answer.get("rss_before_kib")},
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
            written,
            elapsed,
            phase.per_second,
            phase.peak_rss_kib / 1024,
            phase.rss_growth_kib / 1024,
        )
        if written != spec.rows:
            self.problems.append(self.shortfall.format(name=name, written=written, rows=spec.rows))
        return phase

    def child(self, spec: ChildSpec) -> tuple[dict[str, Any], int, harness.Phase]:
        """Run a child on `spec`: its answer (empty if it wrote none), its exit code, and the
        wall time, emulator CPU and load around it."""
        spec_path = self.emulators.log_dir / f"{spec.label}.spec.json"
        result_path = self.emulators.log_dir / f"{spec.label}.result.json"
        spec_path.write_text(json.dumps(asdict(spec)))
        result_path.unlink(missing_ok=True)
        command = [sys.executable, "-m", self.module, "--child", str(spec_path)]
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
        return answer, code, clock


@dataclass(frozen=True)
class Outcome:
    """How a run of the phases went: the machine's load averages around it, and whether it was
    interrupted (the phases that finished are still reported)."""

    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    interrupted: bool


def run_phases(bench: ChildBench[Any], phases: Callable[[], None]) -> Outcome:
    """Run the phases; an interrupt after the first phase keeps what was measured."""
    load_before = harness.load_average()
    interrupted = False
    try:
        phases()
    except KeyboardInterrupt:
        if not bench.phases:
            raise
        log.warning("interrupted; reporting the phases that finished")
        interrupted = True
    return Outcome(load_before, harness.load_average(), interrupted)


# --- the report ----------------------------------------------------------------------------------


def count(rows: int) -> str:
    """1000000 as 1M, 100000 as 100k."""
    if rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}M"
    if rows % 1_000 == 0:
        return f"{rows // 1_000}k"
    return str(rows)


def per(value: float | None, rows: int, *, scale: float = 1.0, digits: int = 3) -> str:
    """`value` per row (times `scale`), "-" without one."""
    return "-" if value is None or not rows else f"{value / rows * scale:.{digits}f}"


def _mib(kib: float) -> str:
    return f"{kib / 1024:.1f}"


Column = tuple[str, Callable[[P], str]]


def render_table(phases: Sequence[P], *, unit: str, columns: Sequence[Column[P]]) -> str:
    """The shared columns around a benchmark's own `columns` (after "per s"). CPU per `unit` is
    in microseconds: unlike wall time, hardly changed by a busy machine."""
    header = (
        "phase",
        "rows",
        "par",
        "seconds",
        "per s",
        *(name for name, _ in columns),
        "peak RSS MiB",
        "RSS growth MiB",
        f"CPU µs/{unit}",
        f"emulator µs/{unit}",
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
                *(cell(p) for _, cell in columns),
                _mib(p.peak_rss_kib),
                _mib(p.rss_growth_kib),
                per(p.cpu_seconds, p.written, scale=1e6, digits=0),
                per(p.emulator_cpu_seconds, p.written, scale=1e6, digits=0),
                f"{p.load[0]:.1f}>{p.load[1]:.1f}",
            )
            for p in phases
        ],
    )


Verdict = tuple[str, float | None, str, bool | None]  # what, value, target, met (None: info)


def failed(phases: Sequence[Phase]) -> list[Verdict]:
    """A failed phase has no figures: the targets it would measure are missed."""
    return [(f"{p.name} failed", None, "completes", False) for p in phases if p.error]


def small_and_large(bench: ChildBench[P], kind: str) -> tuple[P | None, P | None]:
    """The finished phases of `kind` at `--small-rows` and at `--rows`."""
    done = [p for p in bench.phases if p.error is None and p.kind == kind]
    small = next((p for p in done if p.rows != bench.args.rows), None)
    large = next((p for p in done if p.rows == bench.args.rows), None)
    return small, large


def at_least(what: str, value: float, target: float, *, digits: int = 2) -> Verdict:
    return (what, value, f">= {target:,.{digits}f}", value >= target)


def peak_rss(small: Phase, large: Phase, target_ratio: float) -> Verdict:
    """The child's peak RSS stays flat from `--small-rows` to `--rows`."""
    ratio = large.peak_rss_kib / small.peak_rss_kib
    what = f"peak RSS {count(large.rows)} / {count(small.rows)}"
    return (what, ratio, f"<= {target_ratio:.2f}", ratio <= target_ratio)


def render_verdicts(rows: Sequence[Verdict]) -> str:
    width = max((len(r[0]) for r in rows), default=0)
    lines = []
    for what, value, target, met in rows:
        shown = "-" if value is None else (f"{value:,.0f}" if value >= 100 else f"{value:.2f}")
        verdict = "" if met is None else ("met" if met else "MISSED")
        lines.append(f"{what.ljust(width)}  {shown:>8}  target {target:<10} {verdict}".rstrip())
    return "\n".join(lines)


def report(
    bench: ChildBench[Any],
    outcome: Outcome,
    *,
    title: str,
    table: str,
    targets: Sequence[Verdict],
    figures: Mapping[str, Any],
    notes: Sequence[str] = (),
) -> int:
    """Print the title, the table, any notes, the targets and the problems; write the JSON
    file of figures (`figures`: the benchmark's settings, between the load averages and the
    phases). The exit code: 130 interrupted, 1 a problem, else 0."""
    print(title + (" (INTERRUPTED)" if outcome.interrupted else ""))
    print()
    print(table)
    print()
    if notes:
        print("\n".join(notes))
        print()
    print(render_verdicts(targets))
    for problem in bench.problems:
        print(f"PROBLEM: {problem}")
    sys.stdout.flush()
    harness.write_json(
        bench.args.json,
        {
            "project": harness.PROJECT,
            "cpus": os.cpu_count(),
            "load_average_before": outcome.load_before,
            "load_average_after": outcome.load_after,
            **figures,
            "warmup_docs": bench.args.warmup_docs,
            "interrupted": outcome.interrupted,
            "phases": [asdict(p) for p in bench.phases],
            "targets": [{"what": w, "value": v, "target": t, "met": m} for w, v, t, m in targets],
            "problems": bench.problems,
        },
    )
    if outcome.interrupted:
        return 130
    return 1 if bench.problems else 0


# --- command line --------------------------------------------------------------------------------


def parser(
    doc: str | None, *, prog: str, what: str, options: Sequence[harness.Option]
) -> argparse.ArgumentParser:
    """harness.parser with what every such benchmark has: its sizes (`what` its rows are), its
    own `options`, the warm-up, and the hidden flags a child is started with."""
    sizes: list[harness.Option] = [
        ("--rows", harness.positive, 1_000_000, f"{what} in the big run"),
        ("--small-rows", harness.positive, 100_000, f"{what} in the memory comparison run"),
        ("--skip-small", None, False, "no --small-rows run"),
    ]
    warm_up: harness.Option = (
        "--warmup-docs",
        int,
        20_000,
        "documents written to warm each new emulator up (0: none)",
    )
    created = harness.parser(doc, prog=prog, options=[*sizes, *options, warm_up])
    created.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    created.add_argument("--child-result", type=Path, help=argparse.SUPPRESS)
    return created


def main(
    args: argparse.Namespace,
    *,
    spec_type: type[S],
    runners: Mapping[str, Callable[[S], ChildResult]],
    environment: Mapping[str, object | None],
    bench: Callable[[argparse.Namespace, harness.Emulators], int],
) -> int:
    """A child runs its spec. The parent puts `environment` (the values that are not None) into
    its own, before anything of shared is used (the children inherit it), and runs `bench` on a
    Firestore and a Cloud Storage emulator of its own. Exit code 2: the benchmark itself
    failed; 130: interrupted."""
    if args.child is not None:
        if args.child_result is None:
            raise SystemExit("--child needs --child-result")
        return child_main(spec_type, runners, args.child, args.child_result)
    for variable, value in environment.items():
        if value is not None:
            os.environ[variable] = str(value)
    try:
        return harness.run_with_emulators(args, bench, storage=True)
    except Exception:
        log.exception("benchmark failed")
        return 2
