"""Claim benchmark: codedrop's claim engine against the reference article's design, on one emulator.

    .venv/bin/python scripts/bench_claims.py [--codes 5000] [--shoppers 10000]
        [--double-clicks 1000] [--concurrency 64] [--processes 2] [--firestore HOST:PORT]
        [--skip-baseline] [--baseline-cap-seconds 60] [--warmup-claims 2000] [--json PATH] [-v]

A flash sale: `--codes` codes, `--shoppers` distinct shoppers of whom `--double-clicks` press the
button twice (the 11,000 requests are shuffled, so second clicks come while first ones are in
flight), `--concurrency` claimers spread over `--processes` processes. Each process is one
function instance: its own Firestore client, ClaimEngine and candidate pool, and
concurrency/processes threads. The campaign and its codes are written before timing starts;
every process builds its engine, warms its gRPC channel and then waits on one barrier, so the
claim phase starts everywhere at once.

Reported per design: wall time of the claim phase (first request started to last answered),
answers and new codes per second, latency percentiles (all answers, successes only), commits and
conflicts per new code, Firestore document reads and writes per new code (a query returning N
documents counts N reads, an empty one 1), the read cost of a SOLD_OUT answer (200 more claims
by late shoppers after the sale, in one process), outcome counts, and the invariants read back
from the database (shared.audit plus the benchmark's own checks). The baseline
(scripts/bench_reference_design.py) runs the same load on a freshly reset emulator with a time
cap; the ratio of the two claim rates is measured in this very run.

Starts its own Firestore emulator on a free port unless `--firestore` names one. Exit code 1 if
any invariant of codedrop's engine is violated; the baseline's flaws are reported, not failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import random
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypedDict

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from emulator import RunningEmulator, free_port, start_firestore  # noqa: E402
from scripts import bench_reference_design as reference  # noqa: E402

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.synchronize import Event as MpEvent

    from google.cloud import firestore

log = logging.getLogger("bench_claims")

PROJECT = "demo-codedrop-bench"
ENGINE, REFERENCE = "engine", "reference"
DESIGN_TITLES = {ENGINE: "codedrop engine", REFERENCE: "reference design"}
READY_TIMEOUT = 180.0  # spawning a process and importing the client takes a few seconds
PROGRESS_EVERY = 5.0
LATE_SHOPPER = "late-shopper-"

# (index in the request list, outcome, code, started, ended, document reads, document writes):
# perf_counter is CLOCK_MONOTONIC on Linux, one clock for all processes, so stamps of different
# processes can be compared; reads and writes are those the claim itself made (see `tally`), the
# candidate pool's range queries are shared by all claims of an instance and counted apart.
RawAnswer = tuple[int, str, str | None, float, float, int, int]
# claim(user_id, stop_at) -> (outcome, code)
ClaimFn = Callable[[str, float | None], tuple[str, str | None]]


# --- what a worker process is told and what it answers ------------------------------------------


@dataclass(frozen=True)
class WorkerJob:
    design: str
    worker: int
    campaign_id: str
    requests: list[tuple[int, str]]
    threads: int
    cap_seconds: float | None
    grace_seconds: float
    probe_claims: int  # > 0 only for the engine's worker 0: the sold-out probe after the sale
    probe_threads: int
    log_level: int


class WorkerResult(TypedDict):
    worker: int
    answers: list[RawAnswer]
    counters: dict[str, int]
    not_issued: int
    in_flight: int
    began: float
    ended: float  # when the worker stopped waiting for its claims
    cpu_seconds: float  # this process's CPU time during the claim phase


class ProbeResult(TypedDict):
    answers: list[RawAnswer]
    before: dict[str, int]
    after: dict[str, int]


# --- worker process ------------------------------------------------------------------------------


def _setup_logging(level: int) -> None:
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(processName)s %(levelname)s %(name)s: %(message)s",
    )
    # The client libraries are chatty at DEBUG.
    for noisy in ("google", "grpc", "urllib3"):
        logging.getLogger(noisy).setLevel(max(level, logging.INFO))


class _Runner:
    """Threads that take requests from one queue and time each claim."""

    def __init__(self, claim: ClaimFn, requests: Sequence[tuple[int, str]], threads: int) -> None:
        self.claim = claim
        self.queue: deque[tuple[int, str]] = deque(requests)
        self.answers: list[RawAnswer] = []
        self.stop_at: float | None = None
        self._go = threading.Event()
        self._failures = 0
        self.threads = [
            threading.Thread(target=self._loop, name=f"claimer-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self.threads:
            thread.start()

    def go(self, stop_at: float | None) -> None:
        self.stop_at = stop_at
        self._go.set()

    def _loop(self) -> None:
        self._go.wait()
        stop_at = self.stop_at
        while True:
            if stop_at is not None and time.perf_counter() >= stop_at:
                return  # the cap: issue no new request
            try:
                index, user_id = self.queue.popleft()
            except IndexError:
                return
            bucket: Counter[str] = Counter()
            reference.tally.bucket = bucket
            started = time.perf_counter()
            try:
                outcome, code = self.claim(user_id, stop_at)
            except Exception as exc:
                outcome, code = f"EXCEPTION:{type(exc).__name__}", None
                self._failures += 1
                if self._failures <= 5:
                    log.exception("claim of %s failed unexpectedly", user_id)
            finally:
                ended = time.perf_counter()
                reference.tally.bucket = None
            self.answers.append(
                (index, outcome, code, started, ended, bucket["doc_reads"], bucket["doc_writes"])
            )

    def alive(self) -> list[threading.Thread]:
        return [t for t in self.threads if t.is_alive()]

    def wait(self, *, until: float | None, progress: Callable[[int], None] | None) -> bool:
        """Join the threads (until `until`, a perf_counter time); True if all finished."""
        next_progress = time.perf_counter() + PROGRESS_EVERY
        while alive := self.alive():
            now = time.perf_counter()
            if until is not None and now >= until:
                return False
            if progress is not None and now >= next_progress:
                progress(len(self.answers))
                next_progress = now + PROGRESS_EVERY
            limit = min(next_progress, until) if until is not None else next_progress
            alive[0].join(timeout=max(0.01, min(0.5, limit - now)))
        return True


def _worker(job: WorkerJob, conn: Connection, start: MpEvent, probe: MpEvent) -> None:
    """One function instance. Sends ("ready"|"progress"|"result"|"probe"|"error", payload)."""
    # Ctrl-C reaches the whole terminal process group; the parent stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _setup_logging(job.log_level)
    clean = True
    try:
        clean = _worker_main(job, conn, start, probe)
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
        clean = False
    finally:
        conn.close()
    if not clean:
        # Claims still running (the baseline past its cap, stuck on locks): do not wait for them.
        logging.shutdown()
        os._exit(0)


def _worker_main(job: WorkerJob, conn: Connection, start: MpEvent, probe: MpEvent) -> bool:
    # Imported here, after the parent has put the emulator into the environment.
    from shared import campaign_store
    from shared.firestore_db import get_db
    from shared.settings import get_settings

    db = get_db()
    claim: ClaimFn
    counters: Callable[[], dict[str, int]]
    if job.design == ENGINE:
        from shared.claim_engine import ClaimEngine, EngineCounters
        from shared.errors import CodedropError

        class TalliedCounters(EngineCounters):
            """The engine's counters, also added to the running claim's tally."""

            def add(self, **deltas: int) -> None:
                super().add(**deltas)
                reference.add_to_tally(deltas)

        engine = ClaimEngine(db=db, settings=get_settings())
        engine.counters = TalliedCounters()
        pool = engine.pool(job.campaign_id)

        def engine_claim(user_id: str, stop_at: float | None) -> tuple[str, str | None]:
            del stop_at  # the engine has its own deadline
            try:
                outcome = engine.claim(campaign_id=job.campaign_id, user_id=user_id)
            except CodedropError as exc:
                return exc.error_code, None
            return ("created" if outcome.created else "held"), outcome.claim.code

        def engine_counters() -> dict[str, int]:
            pool_counters = {f"pool_{k}": int(v) for k, v in asdict(pool.counters).items()}
            return {**engine.counters.snapshot(), **pool_counters}

        claim, counters = engine_claim, engine_counters
    else:
        claimer = reference.ReferenceClaimer(db, job.campaign_id)

        def reference_claim(user_id: str, stop_at: float | None) -> tuple[str, str | None]:
            answer = claimer.claim(user_id, stop_at=stop_at)
            return answer.outcome, answer.code

        claim, counters = reference_claim, claimer.counters.snapshot

    # Warm the gRPC channel (connection, auth metadata) outside the measurement.
    if campaign_store.get_campaign_snapshot(db, campaign_id=job.campaign_id) is None:
        raise RuntimeError(f"campaign {job.campaign_id} not found")

    runner = _Runner(claim, job.requests, job.threads)
    conn.send(("ready", job.worker))
    if not start.wait(timeout=READY_TIMEOUT):
        raise RuntimeError("no start signal from the parent")
    began = time.perf_counter()
    cpu_began = time.process_time()
    stop_at = began + job.cap_seconds if job.cap_seconds is not None else None
    runner.go(stop_at)
    finished = runner.wait(
        until=stop_at + job.grace_seconds if stop_at is not None else None,
        progress=lambda n: conn.send(("progress", (job.worker, n))),
    )
    answers = list(runner.answers)
    cpu_seconds = time.process_time() - cpu_began
    not_issued = len(runner.queue)
    conn.send(
        (
            "result",
            WorkerResult(
                worker=job.worker,
                answers=answers,
                counters=counters(),
                not_issued=not_issued,
                in_flight=len(job.requests) - not_issued - len(answers),
                began=began,
                ended=time.perf_counter(),
                cpu_seconds=cpu_seconds,
            ),
        )
    )
    if not finished:
        log.warning("%d claims still running after the grace period", len(runner.alive()))
        return False

    if job.probe_claims > 0:
        # Only once every instance has finished the sale: late shoppers meet a sold-out campaign.
        if not probe.wait(timeout=READY_TIMEOUT):
            raise RuntimeError("no probe signal from the parent")
        before = counters()
        late = [(i, f"{LATE_SHOPPER}{i}") for i in range(job.probe_claims)]
        prober = _Runner(claim, late, job.probe_threads)
        prober.go(None)
        prober.wait(until=None, progress=None)
        conn.send(("probe", ProbeResult(answers=prober.answers, before=before, after=counters())))
    return True


# --- parent: running one design --------------------------------------------------------------


@dataclass
class PhaseOutput:
    results: list[WorkerResult]
    probe: ProbeResult | None
    emulator_cpu_seconds: float | None  # the emulator's CPU time during the claim phase


def process_cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of a process (all its threads), from /proc; None if unknown."""
    if pid is None:
        return None
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _collect(
    kind: str,
    conns: dict[int, Connection],
    processes: dict[int, multiprocessing.process.BaseProcess],
    timeout: float | None,
) -> dict[int, Any]:
    """Wait for one `kind` message from each worker in `conns`, logging progress meanwhile."""
    deadline = time.monotonic() + timeout if timeout is not None else None
    pending = dict(conns)
    got: dict[int, Any] = {}
    progress: dict[int, int] = {}
    next_log = time.monotonic() + PROGRESS_EVERY
    while pending:
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"no {kind!r} from workers {sorted(pending)} in time")
        ready = multiprocessing.connection.wait(list(pending.values()), timeout=1.0)
        for worker, conn in list(pending.items()):
            if conn not in ready:
                continue
            try:
                message_kind, payload = conn.recv()
            except EOFError:
                code = processes[worker].exitcode
                raise RuntimeError(f"worker {worker} died (exit code {code})") from None
            if message_kind == "error":
                raise RuntimeError(f"worker {worker} failed:\n{payload}")
            if message_kind == "progress":
                progress[payload[0]] = payload[1]
                if time.monotonic() >= next_log:
                    log.info("progress: %d answers so far", sum(progress.values()))
                    next_log = time.monotonic() + PROGRESS_EVERY - 1
            elif message_kind == kind:
                got[worker] = payload
                del pending[worker]
            else:
                raise RuntimeError(f"worker {worker}: unexpected message {message_kind!r}")
    return got


def run_phase(
    *,
    design: str,
    campaign_id: str,
    requests: list[tuple[int, str]],
    processes: int,
    threads: int,
    cap_seconds: float | None,
    grace_seconds: float,
    probe_claims: int,
    emulator_pid: int | None,
) -> PhaseOutput:
    context = multiprocessing.get_context("spawn")
    start, probe = context.Event(), context.Event()
    workers: dict[int, multiprocessing.process.BaseProcess] = {}
    conns: dict[int, Connection] = {}
    try:
        for w in range(processes):
            job = WorkerJob(
                design=design,
                worker=w,
                campaign_id=campaign_id,
                requests=requests[w::processes],
                threads=threads,
                cap_seconds=cap_seconds,
                grace_seconds=grace_seconds,
                probe_claims=probe_claims if w == 0 else 0,
                probe_threads=threads,
                log_level=log.getEffectiveLevel(),
            )
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(
                target=_worker,
                args=(job, sender, start, probe),
                name=f"{design}-{w}",
                daemon=True,
            )
            process.start()
            sender.close()
            workers[w], conns[w] = process, receiver
        _collect("ready", conns, workers, READY_TIMEOUT)
        log.info("%s: %d processes x %d threads ready; go", design, processes, threads)
        cpu_before = process_cpu_seconds(emulator_pid)
        start.set()
        timeout = cap_seconds + grace_seconds + 120 if cap_seconds is not None else None
        results: dict[int, WorkerResult] = _collect("result", conns, workers, timeout)
        cpu_after = process_cpu_seconds(emulator_pid)
        emulator_cpu = (
            cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
        )
        probe_result: ProbeResult | None = None
        if probe_claims > 0:
            probe.set()
            log.info("%s: sold-out probe, %d late shoppers", design, probe_claims)
            probe_result = _collect("probe", {0: conns[0]}, workers, READY_TIMEOUT)[0]
        for worker in workers.values():
            worker.join(timeout=30)
        return PhaseOutput(
            results=[results[w] for w in sorted(results)],
            probe=probe_result,
            emulator_cpu_seconds=emulator_cpu,
        )
    finally:
        for worker in workers.values():
            if worker.is_alive():
                log.warning("stopping worker %s (pid %s)", worker.name, worker.pid)
                worker.terminate()
                worker.join(timeout=5)
                if worker.is_alive():
                    worker.kill()
                    worker.join(timeout=5)
        for conn in conns.values():
            conn.close()


# --- figures ---------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_figures(answers: Sequence[RawAnswer], prefix: str) -> dict[str, float | None]:
    latencies = sorted((a[4] - a[3]) * 1000 for a in answers)
    return {f"{prefix}_p{p}_ms": percentile(latencies, p) for p in (50, 95, 99)}


def per(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def summed(results: Sequence[WorkerResult]) -> Counter[str]:
    total: Counter[str] = Counter()
    for result in results:
        total.update(result["counters"])
    return total


def common_figures(answers: list[RawAnswer], requests: int, *, not_answered: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"requests": requests, "answered": len(answers)}
    figures["not_answered"] = not_answered
    created = [a for a in answers if a[1] == reference.CREATED]
    if answers:
        first = min(a[3] for a in answers)
        last = max(a[4] for a in answers)
        wall = last - first
    else:
        first, wall = 0.0, 0.0
    figures["wall_seconds"] = wall if answers else None
    figures["answers_per_second"] = per(len(answers), wall)
    figures["codes_per_second"] = per(len(created), wall)
    figures.update(latency_figures(answers, "all"))
    figures.update(latency_figures(created, "success"))
    figures["outcomes"] = dict(Counter(a[1] for a in answers).most_common())
    figures["last_code_issued_after_seconds"] = (
        max(a[4] for a in created) - first if created else None
    )
    # Answers per second of the phase, by outcome: shows where a run slows down.
    timeline: defaultdict[int, Counter[str]] = defaultdict(Counter)
    for a in answers:
        timeline[int(a[4] - first)][a[1]] += 1
    figures["timeline"] = [dict(timeline[second]) for second in range(int(wall) + 1)]
    figures["codes_issued_by_answers"] = len(created)
    return figures


def cpu_figures(output: PhaseOutput) -> dict[str, Any]:
    return {
        "phase_seconds": max(r["ended"] for r in output.results)
        - min(r["began"] for r in output.results),
        "cpu_seconds_emulator": output.emulator_cpu_seconds,
        "cpu_seconds_workers": sum(r["cpu_seconds"] for r in output.results),
    }


def work_figures(
    answers: Sequence[RawAnswer], *, reads_total: int, writes_total: int, shared_reads: int
) -> dict[str, Any]:
    """Firestore work per new code: everything the run read and wrote, divided by the new codes
    (what a sale costs per code sold), and the work on the path of a successful claim only (its
    own reads and writes plus the shared range queries that found its candidate)."""
    count: Counter[str] = Counter()
    reads: Counter[str] = Counter()
    writes: Counter[str] = Counter()
    for a in answers:
        count[a[1]] += 1
        reads[a[1]] += a[5]
        writes[a[1]] += a[6]
    created = count[reference.CREATED]
    return {
        "reads_total": reads_total,
        "writes_total": writes_total,
        "reads_per_code": per(reads_total, created),
        "writes_per_code": per(writes_total, created),
        "reads_per_code_path": per(reads[reference.CREATED] + shared_reads, created),
        "writes_per_code_path": per(writes[reference.CREATED], created),
        "shared_query_reads": shared_reads,
        "reads_per_held": per(reads[reference.HELD], count[reference.HELD]),
        "reads_per_sold_out_in_sale": per(reads[reference.SOLD_OUT], count[reference.SOLD_OUT]),
        "reads_by_outcome": dict(reads),
        "writes_by_outcome": dict(writes),
    }


def double_click_figures(
    answers: list[RawAnswer], users: Sequence[str]
) -> tuple[dict[str, int], dict[str, list[tuple[str, str | None]]]]:
    """For each shopper who clicked twice: did both answers carry the same code?

    Returns the counts and, for the shoppers whose answers differ, both answers.
    """
    answered: defaultdict[str, list[tuple[str, str | None]]] = defaultdict(list)
    for a in answers:
        answered[users[a[0]]].append((a[1], a[2]))
    twice = {u: c for u, c in answered.items() if len(c) == 2}
    same = {u for u, c in twice.items() if c[0][1] is not None and c[0][1] == c[1][1]}
    neither = {u for u, c in twice.items() if c[0][1] is None and c[1][1] is None}
    mismatched = {u: twice[u] for u in sorted(set(twice) - same - neither)}
    # Why they differ: two different codes (a shopper holding two), or a code and no code
    # (SOLD_OUT told to a holder, or CONTENDED: "retry", which would then return the code).
    no_code = Counter(
        next(outcome for outcome, code in both if code is None)
        for both in mismatched.values()
        if any(code is None for _, code in both)
    )
    return {
        "double_clickers_answered": len(twice),
        "double_clickers_same_code_twice": len(same),
        "double_clickers_no_code": len(neither),
        "double_clickers_mismatched": len(mismatched),
        "double_clickers_two_codes": sum(
            1 for both in mismatched.values() if all(code is not None for _, code in both)
        ),
        **{f"double_clickers_code_and_{outcome}": n for outcome, n in no_code.items()},
    }, mismatched


def engine_figures(
    db: firestore.Client,
    *,
    campaign_id: str,
    output: PhaseOutput,
    users: Sequence[str],
    codes: int,
    shoppers: int,
) -> dict[str, Any]:
    from shared.audit import audit_campaign

    answers = [a for r in output.results for a in r["answers"]]
    not_answered = sum(r["not_issued"] + r["in_flight"] for r in output.results)
    figures = common_figures(answers, len(users), not_answered=not_answered)
    figures.update(cpu_figures(output))
    counters = summed(output.results)
    created = figures["codes_issued_by_answers"]
    reads = counters["doc_reads"] + counters["pool_docs_read"]
    writes = counters["doc_writes"]
    figures.update(
        commits_per_code=per(counters["commits"], created),
        conflicts_per_code=per(counters["conflicts"], created),
        **work_figures(
            answers, reads_total=reads, writes_total=writes, shared_reads=counters["pool_docs_read"]
        ),
        pool_queries=counters["pool_queries"],
        counters=dict(counters),
    )
    if output.probe is not None:
        before, after = Counter(output.probe["before"]), Counter(output.probe["after"])
        delta = after.copy()
        delta.subtract(before)
        probe_answers = output.probe["answers"]
        sold_out = sum(1 for a in probe_answers if a[1] == "SOLD_OUT")
        probe_reads = delta["doc_reads"] + delta["pool_docs_read"]
        figures.update(
            probe_claims=len(probe_answers),
            probe_outcomes=dict(Counter(a[1] for a in probe_answers)),
            probe_reads=probe_reads,
            probe_writes=delta["doc_writes"],
            reads_per_sold_out=per(probe_reads, sold_out),
            probe_p50_ms=latency_figures(probe_answers, "probe")["probe_p50_ms"],
        )

    log.info("auditing campaign %s", campaign_id)
    report = audit_campaign(db, campaign_id=campaign_id)
    answered = answers_against_database(db, campaign_id=campaign_id, answers=answers, users=users)
    outcomes: Counter[str] = Counter(figures["outcomes"])
    double, mismatched = double_click_figures(answers, users)
    expected = min(codes, shoppers)
    unexpected = sum(n for o, n in outcomes.items() if o not in {"created", "held", "SOLD_OUT"})
    invariants: dict[str, int] = {
        **report.violations,
        "codes_not_issued": max(0, expected - report.assigned),
        "sold_out_while_codes_left": int(outcomes["SOLD_OUT"] > 0 and report.unassigned > 0),
        "double_clickers_mismatched": double["double_clickers_mismatched"],
        "contended_answers": outcomes["CONTENDED"],
        "unexpected_answers": unexpected - outcomes["CONTENDED"],
        "not_answered": not_answered,
        **answered,
    }
    if mismatched:
        log.error(
            "double clickers with different answers, e.g. %s", dict(list(mismatched.items())[:5])
        )
    figures.update(
        db_codes_total=report.codes_total,
        db_assigned=report.assigned,
        db_unassigned=report.unassigned,
        db_claims=report.claims,
        db_shoppers=report.shoppers,
        expected_codes_issued=expected,
        **double,
        invariants=invariants,
        violations=sum(invariants.values()),
    )
    return figures


def answers_against_database(
    db: firestore.Client, *, campaign_id: str, answers: Sequence[RawAnswer], users: Sequence[str]
) -> dict[str, int]:
    """What the shoppers were told, against the claims the database holds."""
    from shared.firestore_db import claims_collection

    held_by = {
        (data.get("user_id"), data.get("code"))
        for data in (
            s.to_dict() or {}
            for s in claims_collection(db, campaign_id).select(["user_id", "code"]).stream()
        )
    }
    created = [(users[a[0]], a[2]) for a in answers if a[1] == reference.CREATED]
    held = [(users[a[0]], a[2]) for a in answers if a[1] == reference.HELD]
    codes = Counter(code for _, code in created)
    return {
        "codes_answered_twice": sum(1 for n in codes.values() if n > 1),
        "created_answers_not_in_db": sum(1 for pair in created if pair not in held_by),
        "held_answers_not_in_db": sum(1 for pair in held if pair not in held_by),
        "db_claims_never_answered": len(held_by - set(created)),
    }


def reference_figures(
    db: firestore.Client,
    *,
    campaign_id: str,
    output: PhaseOutput,
    users: Sequence[str],
) -> dict[str, Any]:
    all_answers = [a for r in output.results for a in r["answers"]]
    answers = [a for a in all_answers if a[1] != reference.CUT]
    cut = len(all_answers) - len(answers)
    not_answered = cut + sum(r["not_issued"] + r["in_flight"] for r in output.results)
    figures = common_figures(answers, len(users), not_answered=not_answered)
    figures["cut_at_cap"] = cut
    figures.update(cpu_figures(output))
    figures["stalled"] = not_answered > 0
    counters = summed(output.results)
    created = figures["codes_issued_by_answers"]
    aborted_commits = counters["commit_attempts"] - counters["transactions_done"]
    figures.update(
        commits_per_code=per(counters["commit_attempts"], created),
        conflicts_per_code=per(aborted_commits + counters["read_aborts"], created),
        **work_figures(
            answers,
            reads_total=counters["doc_reads"],
            writes_total=counters["doc_writes"],
            shared_reads=0,
        ),
        counters=dict(counters),
    )
    log.info("checking reference campaign %s", campaign_id)
    check = reference.check_reference(
        db,
        campaign_id=campaign_id,
        created=[(users[a[0]], a[2]) for a in answers if a[1] == reference.CREATED],
    )
    double, _ = double_click_figures(answers, users)
    figures.update(
        db_codes_total=check["codes_total"],
        db_assigned=check["assigned"],
        db_unassigned=check["unassigned"],
        users_with_two_codes=check["users_with_two_codes"],
        max_codes_per_user=check["max_codes_per_user"],
        codes_answered_twice=check["codes_answered_twice"],
        answers_not_in_db=check["answers_not_in_db"],
        sold_out_while_codes_left=int(
            figures["outcomes"].get(reference.SOLD_OUT, 0) > 0 and check["unassigned"] > 0
        ),
        **double,
    )
    return figures


# --- setup -----------------------------------------------------------------------------------


RESET_TIMEOUT = 120.0


def reset_database(host_port: str) -> None:
    """Delete every document of the benchmark's project (the emulator's reset endpoint).

    Not emulator.reset_firestore: its 10 s timeout is too short when the machine is busy and the
    emulator has just deleted tens of thousands of documents.
    """
    url = f"http://{host_port}/emulator/v1/projects/{PROJECT}/databases/(default)/documents"
    started = time.perf_counter()
    request = urllib.request.Request(url, method="DELETE")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    with opener.open(request, timeout=RESET_TIMEOUT) as response:
        if not 200 <= response.status < 300:
            raise RuntimeError(f"DELETE {url} answered {response.status}")
    log.info("emulator reset in %.1f s", time.perf_counter() - started)


def make_requests(shoppers: int, double_clicks: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    users = [f"shopper-{i:06d}" for i in range(shoppers)]
    requests = users + rng.sample(users, min(double_clicks, shoppers))
    rng.shuffle(requests)
    return requests


def setup_campaign(db: firestore.Client, *, design: str, codes: int) -> str:
    from shared import campaign_service, coupon_store
    from shared.models import CampaignCreate

    now = datetime.now(UTC)
    campaign = campaign_service.create_campaign(
        db,
        data=CampaignCreate(
            campaign_id=f"bench-{design}-{secrets.token_hex(3)}",
            title=f"Claim benchmark ({DESIGN_TITLES[design]})",
            starts_at=now - timedelta(hours=1),
            ends_at=now + timedelta(days=1),
        ),
        now=now,
    )
    started = time.perf_counter()
    written = coupon_store.add_codes(
        db,
        campaign_id=campaign.campaign_id,
        codes=(f"BENCH-{i:06d}" for i in range(codes)),
        now=now,
    )
    log.info(
        "%s: campaign %s with %d codes written in %.1f s",
        design,
        campaign.campaign_id,
        written,
        time.perf_counter() - started,
    )
    return campaign.campaign_id


def warm_up(db: firestore.Client, *, claims: int, threads: int) -> None:
    """Untimed: a small sale on a throwaway campaign, so that neither design pays for the
    emulator's JVM warming up (its first seconds run at half speed). The caller resets after."""
    from concurrent.futures import ThreadPoolExecutor

    from shared.claim_engine import ClaimEngine
    from shared.errors import CodedropError
    from shared.settings import get_settings

    started = time.perf_counter()
    campaign_id = setup_campaign(db, design=ENGINE, codes=max(1, claims // 2))
    engine = ClaimEngine(db=db, settings=get_settings())

    def claim(i: int) -> None:
        with contextlib.suppress(CodedropError):
            engine.claim(campaign_id=campaign_id, user_id=f"warm-up-{i}")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(claim, range(claims)))
    log.info("emulator warmed up with %d claims in %.1f s", claims, time.perf_counter() - started)


# --- output ----------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


Row = tuple[str, Callable[[dict[str, Any]], Any]]


def _get(key: str, digits: int = 1) -> Callable[[dict[str, Any]], str]:
    return lambda f: _fmt(f.get(key), digits)


def _outcome(name: str) -> Callable[[dict[str, Any]], str]:
    return lambda f: _fmt(f["outcomes"].get(name, 0)) if "outcomes" in f else "-"


def _invariant(name: str) -> Callable[[dict[str, Any]], str]:
    return lambda f: _fmt(f["invariants"].get(name)) if "invariants" in f else "-"


def _others(f: dict[str, Any]) -> str:
    if "outcomes" not in f:
        return "-"
    known = {"created", "held", "SOLD_OUT", "CONTENDED"}
    other = {k: v for k, v in f["outcomes"].items() if k not in known}
    return ", ".join(f"{k} {v}" for k, v in other.items()) or "0"


def _pair(a: str, b: str, b_default: str | None = None) -> Callable[[dict[str, Any]], str]:
    def get(f: dict[str, Any]) -> str:
        second = f.get(b, f.get(b_default) if b_default else None)
        return f"{_fmt(f.get(a))} / {_fmt(second)}"

    return get


def _either(invariant: str, figure: str) -> Callable[[dict[str, Any]], str]:
    """An engine invariant, or the baseline's figure of the same meaning."""

    def get(f: dict[str, Any]) -> str:
        if "invariants" in f:
            return _fmt(f["invariants"].get(invariant))
        return _fmt(f.get(figure))

    return get


def _mismatched(f: dict[str, Any]) -> str:
    total = f.get("double_clickers_mismatched")
    if not total:
        return _fmt(total)
    parts = [f"two codes {f.get('double_clickers_two_codes', 0)}"] + [
        f"code + {k.removeprefix('double_clickers_code_and_')} {v}"
        for k, v in f.items()
        if k.startswith("double_clickers_code_and_")
    ]
    return f"{total} ({', '.join(parts)})"


def _probe(f: dict[str, Any]) -> str:
    if "probe_claims" not in f:
        return "-"
    return f"{_fmt(f['probe_claims'])}, {_fmt(f.get('probe_p50_ms'))}"


ROWS: list[Row | str] = [
    "load",
    ("requests (shoppers + double clicks)", _get("requests")),
    ("answered", _get("answered")),
    ("not answered (time cap)", _get("not_answered")),
    ("stalled (hit the cap)", lambda f: _fmt(f.get("stalled", False))),
    "speed",
    ("claim phase wall time (s)", _get("wall_seconds", 2)),
    ("  phase ran, start to last worker done (s)", _get("phase_seconds", 2)),
    ("answers / s", _get("answers_per_second")),
    ("new codes / s", _get("codes_per_second")),
    ("last code issued after (s)", _get("last_code_issued_after_seconds", 2)),
    (
        "CPU s in the phase: emulator / claimers",
        _pair("cpu_seconds_emulator", "cpu_seconds_workers"),
    ),
    ("latency p50 / p95 / p99, all (ms)", lambda f: _pcts(f, "all")),
    ("latency p50 / p95 / p99, new codes (ms)", lambda f: _pcts(f, "success")),
    "Firestore work per new code",
    ("commits", _get("commits_per_code", 2)),
    ("conflicts (lost commits, aborts)", _get("conflicts_per_code", 2)),
    ("reads: own + range queries, successful claims", _get("reads_per_code_path", 2)),
    ("writes: successful claims", _get("writes_per_code_path", 2)),
    ("reads: whole run / new codes", _get("reads_per_code", 2)),
    ("writes: whole run / new codes", _get("writes_per_code", 3)),
    ("reads / writes, whole run", _pair("reads_total", "writes_total")),
    ("  of which range-query reads (candidate pool)", _get("shared_query_reads")),
    ("reads per held answer (double click)", _get("reads_per_held", 2)),
    ("reads per SOLD_OUT answer, during the sale", _get("reads_per_sold_out_in_sale", 2)),
    ("reads per SOLD_OUT answer, late shoppers", _get("reads_per_sold_out", 2)),
    ("  late-shopper probe: claims, p50 (ms)", _probe),
    "outcomes",
    ("created (new code)", _outcome("created")),
    ("held (double click got its code)", _outcome("held")),
    ("SOLD_OUT", _outcome("SOLD_OUT")),
    ("CONTENDED", _outcome("CONTENDED")),
    ("other", _others),
    "database, read back",
    ("codes issued / expected", _pair("db_assigned", "expected_codes_issued", "db_codes_total")),
    ("unassigned codes left", _get("db_unassigned")),
    (
        "double clickers: same code twice / answered",
        _pair("double_clickers_same_code_twice", "double_clickers_answered"),
    ),
    ("double clickers: no code either time", _get("double_clickers_no_code")),
    ("users holding two codes", _either("shoppers_over_limit", "users_with_two_codes")),
    "invariants (violations; 0 = held)",
    ("codes_held_twice", _invariant("codes_held_twice")),
    ("over_issued", _invariant("over_issued")),
    ("shoppers_over_limit", _invariant("shoppers_over_limit")),
    ("claims_without_coupon", _invariant("claims_without_coupon")),
    ("coupons_without_claim", _invariant("coupons_without_claim")),
    ("codes not issued", _invariant("codes_not_issued")),
    (
        "SOLD_OUT while codes were left",
        _either("sold_out_while_codes_left", "sold_out_while_codes_left"),
    ),
    ("double clickers with different answers", _mismatched),
    ("CONTENDED answers", _invariant("contended_answers")),
    ("unexpected answers (errors)", _invariant("unexpected_answers")),
    ("codes answered twice", _either("codes_answered_twice", "codes_answered_twice")),
    (
        "created answers not in the database",
        _either("created_answers_not_in_db", "answers_not_in_db"),
    ),
    ("held answers not in the database", _invariant("held_answers_not_in_db")),
    ("claims in the database never answered", _invariant("db_claims_never_answered")),
]


def _pcts(f: dict[str, Any], prefix: str) -> str:
    values = [f.get(f"{prefix}_p{p}_ms") for p in (50, 95, 99)]
    return " / ".join(_fmt(v) for v in values)


def render_table(engine: dict[str, Any], baseline: dict[str, Any] | None) -> str:
    columns = [("codedrop engine", engine)]
    columns.append(("reference design (002)", baseline if baseline is not None else {}))
    label_width = max(len(r[0]) for r in ROWS if isinstance(r, tuple)) + 2
    widths = [
        max(len(title), *(len(r[1](f)) for r in ROWS if isinstance(r, tuple))) + 2
        for title, f in columns
    ]
    lines = [
        "".ljust(label_width)
        + "".join(t.rjust(w) for (t, _), w in zip(columns, widths, strict=True))
    ]
    lines.append("-" * (label_width + sum(widths)))
    for row in ROWS:
        if isinstance(row, str):
            lines.append(f"[{row}]")
            continue
        label, get = row
        cells = [get(f) if f else "skipped" for _, f in columns]
        lines.append(
            label.ljust(label_width)
            + "".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))
        )
    return "\n".join(lines)


TARGET_SECONDS = 6.0
TARGET_WRITES = 2.0
TARGET_READS = 3.0
TARGET_SOLD_OUT_READS = 1.0


def targets(engine: dict[str, Any]) -> list[tuple[str, bool, str]]:
    def within(value: Any, limit: float) -> bool:
        return value is not None and value <= limit

    return [
        (
            "all codes issued, zero invariant violations",
            engine["violations"] == 0,
            f"{engine['db_assigned']:,}/{engine['expected_codes_issued']:,} issued, "
            f"{engine['violations']} violations",
        ),
        (
            f"whole scenario under {TARGET_SECONDS:g} s",
            within(engine["wall_seconds"], TARGET_SECONDS),
            f"{_fmt(engine['wall_seconds'], 2)} s",
        ),
        (
            f"at most {TARGET_WRITES:g} writes per new code",
            # Judged per successful claim: the whole run adds one write per campaign (sold out).
            within(engine["writes_per_code_path"], TARGET_WRITES),
            f"{_fmt(engine['writes_per_code_path'], 2)} per successful claim "
            f"({_fmt(engine['writes_per_code'], 3)} for the whole run / new codes)",
        ),
        (
            f"at most {TARGET_READS:g} reads per new code",
            # Judged on every read of the run (SOLD_OUT and double-click answers included): those
            # grow with the traffic, unlike the one-off write that records the sell-out.
            within(engine["reads_per_code"], TARGET_READS),
            f"{_fmt(engine['reads_per_code'], 2)} for the whole run / new codes "
            f"({_fmt(engine['reads_per_code_path'], 2)} on the path of a successful claim, "
            "range queries included)",
        ),
        (
            f"a SOLD_OUT answer costs at most {TARGET_SOLD_OUT_READS:g} read",
            within(engine.get("reads_per_sold_out"), TARGET_SOLD_OUT_READS),
            f"{_fmt(engine.get('reads_per_sold_out'), 2)} for late shoppers "
            f"({_fmt(engine.get('reads_per_sold_out_in_sale'), 2)} during the sale)",
        ),
    ]


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--codes", type=int, default=5000, help="codes in the campaign")
    parser.add_argument("--shoppers", type=int, default=10000, help="distinct shoppers")
    parser.add_argument(
        "--double-clicks", type=int, default=1000, help="shoppers who send a second request"
    )
    parser.add_argument(
        "--concurrency", type=int, default=64, help="concurrent claimers, over all processes"
    )
    parser.add_argument("--processes", type=int, default=2, help="function instances")
    parser.add_argument(
        "--sold-out-probe", type=int, default=200, help="late shoppers claiming after the sale"
    )
    parser.add_argument(
        "--warmup-claims",
        type=int,
        default=2000,
        help="untimed claims on a throwaway campaign first, to warm the emulator's JVM (0: none)",
    )
    parser.add_argument("--firestore", metavar="HOST:PORT", help="use this running emulator")
    parser.add_argument("--skip-baseline", action="store_true", help="only codedrop's engine")
    parser.add_argument(
        "--baseline-cap-seconds",
        type=float,
        default=60.0,
        help="the reference design issues no new request after this long",
    )
    parser.add_argument(
        "--baseline-grace-seconds",
        type=float,
        default=30.0,
        help="after the cap, how long claims already running may take to answer",
    )
    parser.add_argument("--seed", type=int, default=20261121, help="shuffles the requests")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write all figures here")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    for name in ("codes", "shoppers", "concurrency", "processes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.concurrency < args.processes:
        parser.error("--concurrency must be at least --processes")
    if args.double_clicks < 0 or args.double_clicks > args.shoppers:
        parser.error("--double-clicks must be between 0 and --shoppers")
    return args


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def bench(args: argparse.Namespace, host_port: str, emulator_pid: int | None) -> int:
    from shared.firestore_db import get_db

    db = get_db()
    users = make_requests(args.shoppers, args.double_clicks, args.seed)
    requests = list(enumerate(users))
    threads = math.ceil(args.concurrency / args.processes)
    config = {
        "codes": args.codes,
        "shoppers": args.shoppers,
        "double_clicks": args.double_clicks,
        "requests": len(users),
        "processes": args.processes,
        "threads_per_process": threads,
        "concurrency": threads * args.processes,
        "baseline_cap_seconds": None if args.skip_baseline else args.baseline_cap_seconds,
        "seed": args.seed,
        "warmup_claims": args.warmup_claims,
        "firestore": host_port,
        "cpus": os.cpu_count(),
        # Other work on the machine skews every figure here: say how busy it was.
        "load_average_at_start": _load(),
    }
    log.info("scenario: %s", config)

    if args.warmup_claims > 0:
        warm_up(db, claims=args.warmup_claims, threads=threads)
    reset_database(host_port)
    campaign_id = setup_campaign(db, design=ENGINE, codes=args.codes)
    output = run_phase(
        design=ENGINE,
        campaign_id=campaign_id,
        requests=requests,
        processes=args.processes,
        threads=threads,
        cap_seconds=None,
        grace_seconds=0,
        probe_claims=args.sold_out_probe,
        emulator_pid=emulator_pid,
    )
    engine = engine_figures(
        db,
        campaign_id=campaign_id,
        output=output,
        users=users,
        codes=args.codes,
        shoppers=args.shoppers,
    )
    log.info("engine: %s s, %s", _fmt(engine["wall_seconds"], 2), engine["outcomes"])
    log.info("engine: answers per second of the phase: %s", _timeline(engine))

    baseline: dict[str, Any] | None = None
    if not args.skip_baseline:
        # The same collection size for both designs: start again from an empty database.
        reset_database(host_port)
        baseline_campaign = setup_campaign(db, design=REFERENCE, codes=args.codes)
        baseline_output = run_phase(
            design=REFERENCE,
            campaign_id=baseline_campaign,
            requests=requests,
            processes=args.processes,
            threads=threads,
            cap_seconds=args.baseline_cap_seconds,
            grace_seconds=args.baseline_grace_seconds,
            probe_claims=0,
            emulator_pid=emulator_pid,
        )
        baseline = reference_figures(
            db, campaign_id=baseline_campaign, output=baseline_output, users=users
        )
        log.info("reference: %s s, %s", _fmt(baseline["wall_seconds"], 2), baseline["outcomes"])
        log.info("reference: answers per second of the phase: %s", _timeline(baseline))

    ratios: dict[str, float | None] = {}
    if baseline is not None:
        ratios = {
            "answers_per_second": _ratio(engine, baseline, "answers_per_second"),
            "codes_per_second": _ratio(engine, baseline, "codes_per_second"),
        }
    print(
        f"\nClaim benchmark: {args.codes:,} codes, {args.shoppers:,} shoppers + "
        f"{args.double_clicks:,} double clicks = {len(users):,} requests; "
        f"{args.processes} processes x {threads} threads; Firestore emulator {host_port}; "
        f"{os.cpu_count()} CPUs; load average {config['load_average_at_start']} at start, "
        f"{_load()} at the end\n"
    )
    print(render_table(engine, baseline))
    if baseline is not None:
        capped = (
            f"(reference capped at {args.baseline_cap_seconds:g} s"
            f"{', stalled' if baseline['stalled'] else ''})"
        )
        if baseline["answered"]:
            print(
                f"\nclaims/s, engine / reference: {_fmt(ratios['answers_per_second'])}x answers, "
                f"{_fmt(ratios['codes_per_second'])}x new codes {capped}"
            )
        else:
            # As if it had answered one request at the cap: a lower bound of the ratio.
            bound = engine["answers_per_second"] * args.baseline_cap_seconds
            ratios["answers_per_second_lower_bound"] = bound
            print(
                f"\nclaims/s, engine / reference: the reference answered no request "
                f"{capped}; ratio > {_fmt(bound, 0)}x"
            )
    print("\ntargets for codedrop's engine:")
    target_results = targets(engine)
    for name, ok, detail in target_results:
        print(f"  {'PASS' if ok else 'MISS'}  {name}: {detail}")
    violations = {k: v for k, v in engine["invariants"].items() if v}
    print(f"\ninvariants: {'all held' if not violations else f'VIOLATED {violations}'}")

    if args.json is not None:
        document = {
            "config": config,
            "engine": engine,
            "reference": baseline,
            "ratio_engine_to_reference": ratios,
            "targets": {name: {"met": ok, "value": detail} for name, ok, detail in target_results},
            "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        log.info("figures written to %s", args.json)
    return 1 if violations else 0


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _timeline(figures: dict[str, Any]) -> str:
    return "; ".join(
        f"{second}s " + " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        for second, counts in enumerate(figures["timeline"])
        if counts
    )


def _ratio(engine: dict[str, Any], baseline: dict[str, Any], key: str) -> float | None:
    a, b = engine.get(key), baseline.get(key)
    return a / b if a is not None and b else None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    _setup_logging(logging.DEBUG if args.verbose else logging.INFO)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    emulator: RunningEmulator | None = None
    log_dir = Path(tempfile.mkdtemp(prefix="codedrop-bench-"))
    failed = True
    try:
        if args.firestore:
            host_port = args.firestore
        else:
            emulator = start_firestore(port=free_port(), project=PROJECT, log_dir=log_dir)
            host_port = emulator.host_port
        # Before anything of shared is used: settings and the client are built once per process,
        # and the worker processes inherit this environment.
        os.environ["FIRESTORE_EMULATOR_HOST"] = host_port
        os.environ["GOOGLE_CLOUD_PROJECT"] = PROJECT
        code = bench(args, host_port, emulator.process.pid if emulator is not None else None)
        failed = False
        return code
    except KeyboardInterrupt:
        log.warning("interrupted")
        failed = False
        return 130
    finally:
        if emulator is not None:
            emulator.stop()
        if failed and emulator is not None:
            log.warning("emulator log kept in %s", log_dir)
        else:
            shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
