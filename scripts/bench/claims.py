"""Claim benchmark: codedrop's claim engine against the reference article's design, on one emulator.

    .venv/bin/python -m scripts.bench.claims [--codes 5000] [--shoppers 10000]
        [--double-clicks 1000] [--processes 2] [--threads T | --concurrency 64]
        [--firestore HOST:PORT] [--skip-baseline] [--baseline-cap-seconds 60]
        [--warmup-claims 2000] [--json PATH] [-v]

A flash sale: `--codes` codes, `--shoppers` distinct shoppers of whom `--double-clicks` press the
button twice (the 11,000 requests are shuffled, so second clicks come while first ones are in
flight), `--processes` processes of `--threads` claimer threads each (by default
`--concurrency` spread over the processes). Each process is one function instance: its own
Firestore client, ClaimEngine and candidate pool. The campaign and its codes are written before
timing starts; every process builds its engine, warms its gRPC channel and then waits on one
barrier, so the claim phase starts everywhere at once.

Reported per design: wall time of the claim phase (first request started to last answered),
answers and new codes per second, latency percentiles (all answers, successes only), and the
Firestore work per new code as the client sent it: every process counts its client's RPCs
(devkit/firestore_rpcs.py) and the documents they read and wrote, so commits, conflicts
(RPCs refused for contention: Aborted, FailedPrecondition), reads and writes per new code are
what went over the wire during the phase, range queries and double clicks included. Conflicts
are the claim commits that lost their coupon to another claimer (a commit writing `coupons` that
failed its precondition); lost races on the engine's segment documents are shown apart, as are
reads and writes by collection. CONTENDED answers given while codes were still being issued (the
answer came before the last code was) are counted as a violation of their own. Then the
read cost of a SOLD_OUT answer (200 more claims by late shoppers after the sale, in one process),
outcome counts, and the invariants read back from the database (devkit/audit.py plus the
benchmark's own checks). The baseline (scripts/bench/reference_design.py) runs the same load on
a freshly reset emulator with a time cap; the ratio of the two claim rates is measured in this
very run.

Starts its own Firestore emulator on a free port unless `--firestore` names one. Exit code 1 if
any invariant of codedrop's engine is violated; the baseline's flaws are reported, not failed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import random
import secrets
import signal
import sys
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from google.cloud import firestore

from devkit.firestore_rpcs import RpcCounter, RpcCounts
from devkit.measure import cpu_seconds, per, percentiles
from scripts.bench import cost, harness
from scripts.bench import reference_design as reference
from scripts.bench.harness import Row, fmt

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.synchronize import Event as MpEvent

log = logging.getLogger("bench.claims")

ENGINE, REFERENCE = "engine", "reference"
DESIGN_TITLES = {ENGINE: "codedrop engine", REFERENCE: "reference design"}
READY_TIMEOUT = 180.0  # spawning a process and importing the client takes a few seconds
LATE_SHOPPER = "late-shopper-"
# Errors of RPCs that lost to a concurrent writer: a guarded commit (FailedPrecondition), an
# aborted transaction or a read that timed out on a lock (Aborted).
CONTENTION = ("Aborted", "FailedPrecondition")
COUPONS, SEGMENTS = "coupons", "segments"

# claim(user_id, stop_at) -> (outcome, code)
ClaimFn = Callable[[str, float | None], tuple[str, str | None]]


class Answer(NamedTuple):
    """One claim: its index in the request list, what it answered, and when (perf_counter)."""

    request: int
    outcome: str
    code: str | None
    started: float
    ended: float


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
    log_level: int


@dataclass(frozen=True)
class WorkerResult:
    worker: int
    answers: list[Answer]
    metrics: dict[str, int]  # the design's own counters (claims, commits, ...)
    rpcs: RpcCounts  # what the client sent during the claim phase
    not_issued: int
    in_flight: int
    began: float
    ended: float  # when the worker stopped waiting for its claims
    cpu_seconds: float  # this process's CPU time during the claim phase


@dataclass(frozen=True)
class ProbeResult:
    answers: list[Answer]
    rpcs: RpcCounts


# --- worker process ------------------------------------------------------------------------------


def _worker(job: WorkerJob, conn: Connection, start: MpEvent, probe: MpEvent) -> None:
    """One function instance. Sends ("ready"|"progress"|"result"|"probe"|"error", payload)."""
    # Ctrl-C reaches the whole terminal process group; the parent stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    harness.setup_logging(job.log_level)
    clean = True
    try:
        clean = _worker_main(job, conn, start, probe)
    except BaseException:  # noqa: BLE001 (the parent reports it and stops the run)
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
        clean = False
    finally:
        conn.close()
    if not clean:
        # Claims still running (the baseline past its cap, stuck on locks): do not wait for them.
        logging.shutdown()
        os._exit(0)


def _design(job: WorkerJob, db: firestore.Client) -> tuple[ClaimFn, Callable[[], dict[str, int]]]:
    """The claim of the job's design and its counters."""
    if job.design == REFERENCE:
        claimer = reference.ReferenceClaimer(db, job.campaign_id)

        def reference_claim(user_id: str, stop_at: float | None) -> tuple[str, str | None]:
            answer = claimer.claim(user_id, stop_at=stop_at)
            return answer.outcome, answer.code

        return reference_claim, claimer.counters.snapshot

    from devkit.claims import claim_as
    from shared.claims.engine import ClaimEngine
    from shared.errors import CodedropError
    from shared.settings import get_settings

    engine = ClaimEngine(db=db, settings=get_settings())
    pool = engine.pool(job.campaign_id)

    def engine_claim(user_id: str, stop_at: float | None) -> tuple[str, str | None]:
        del stop_at  # the engine has its own deadline
        try:
            outcome = claim_as(engine, job.campaign_id, user_id)
        except CodedropError as exc:
            return exc.error_code, None
        return (reference.CREATED if outcome.created else reference.HELD), outcome.claim.code

    def engine_metrics() -> dict[str, int]:
        pool_metrics = {f"pool_{k}": int(v) for k, v in asdict(pool.metrics).items()}
        return {**engine.metrics.snapshot(), **pool_metrics}

    return engine_claim, engine_metrics


def _claims(
    claim: ClaimFn, requests: list[tuple[int, str]], threads: int
) -> harness.TimedCalls[tuple[int, str], tuple[str, str | None]]:
    failures = Counter[str]()

    def failed(exc: Exception) -> tuple[str, str | None]:
        outcome = f"EXCEPTION:{type(exc).__name__}"
        failures[outcome] += 1
        if failures[outcome] <= 3:
            log.error("a claim failed unexpectedly", exc_info=exc)
        return outcome, None

    def make_call() -> Callable[[tuple[int, str]], tuple[str, str | None]]:
        # The reference design stops between ranges once the cap given to go() has passed.
        return lambda request: claim(request[1], calls.stop_at)

    calls: harness.TimedCalls[tuple[int, str], tuple[str, str | None]] = harness.TimedCalls(
        requests, make_call, threads, failed, name="claimer"
    )
    return calls


def _answers(calls: harness.TimedCalls[tuple[int, str], tuple[str, str | None]]) -> list[Answer]:
    return [Answer(t.item[0], t.result[0], t.result[1], t.started, t.ended) for t in calls.answers]


def _worker_main(job: WorkerJob, conn: Connection, start: MpEvent, probe: MpEvent) -> bool:
    # Imported here, after the parent has put the emulator into the environment.
    from shared.campaigns import store as campaign_store
    from shared.container import instance_services

    db = instance_services().db
    rpcs = RpcCounter(db)
    claim, metrics = _design(job, db)
    # Warm the gRPC channel (connection, auth metadata) outside the measurement.
    if campaign_store.get_campaign_snapshot(db, campaign_id=job.campaign_id) is None:
        raise RuntimeError(f"campaign {job.campaign_id} not found")

    runner = _claims(claim, job.requests, job.threads)
    conn.send(("ready", job.worker))
    if not start.wait(timeout=READY_TIMEOUT):
        raise RuntimeError("no start signal from the parent")
    before = rpcs.snapshot()
    with harness.timed() as phase:
        began = time.perf_counter()
        stop_at = began + job.cap_seconds if job.cap_seconds is not None else None
        runner.go(stop_at)
        finished = runner.wait(
            until=stop_at + job.grace_seconds if stop_at is not None else None,
            progress=lambda n: conn.send(("progress", (job.worker, n))),
        )
        answers = _answers(runner)
    conn.send(
        (
            "result",
            WorkerResult(
                worker=job.worker,
                answers=answers,
                metrics=metrics(),
                rpcs=rpcs.snapshot() - before,
                not_issued=runner.not_issued,
                in_flight=len(job.requests) - runner.not_issued - len(answers),
                began=began,
                ended=time.perf_counter(),
                cpu_seconds=phase.cpu_seconds,
            ),
        )
    )
    if not finished:
        log.warning("%d claims still running after the grace period", runner.still_running())
        return False

    if job.probe_claims > 0:
        # Only once every instance has finished the sale: late shoppers meet a sold-out campaign.
        if not probe.wait(timeout=READY_TIMEOUT):
            raise RuntimeError("no probe signal from the parent")
        before = rpcs.snapshot()
        late = [(i, f"{LATE_SHOPPER}{i}") for i in range(job.probe_claims)]
        prober = _claims(claim, late, job.threads)
        prober.go()
        prober.wait()
        conn.send(("probe", ProbeResult(answers=_answers(prober), rpcs=rpcs.snapshot() - before)))
    return True


# --- parent: running one design ------------------------------------------------------------------


@dataclass
class PhaseOutput:
    results: list[WorkerResult]
    probe: ProbeResult | None
    emulator_cpu_seconds: float | None  # the emulator's CPU time during the claim phase


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
    next_log = time.monotonic() + harness.PROGRESS_EVERY
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
                    log.info("progress: %d requests issued", sum(progress.values()))
                    next_log = time.monotonic() + harness.PROGRESS_EVERY - 1
            elif message_kind == kind:
                got[worker] = payload
                del pending[worker]
            else:
                raise RuntimeError(f"worker {worker}: unexpected message {message_kind!r}")
    return got


def _stop(workers: dict[int, multiprocessing.process.BaseProcess]) -> None:
    for worker in workers.values():
        if worker.is_alive():
            log.warning("stopping worker %s (pid %s)", worker.name, worker.pid)
            worker.terminate()
            worker.join(timeout=5)
            if worker.is_alive():
                worker.kill()
                worker.join(timeout=5)


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
        cpu_before = cpu_seconds(emulator_pid) if emulator_pid is not None else None
        start.set()
        timeout = cap_seconds + grace_seconds + 120 if cap_seconds is not None else None
        results: dict[int, WorkerResult] = _collect("result", conns, workers, timeout)
        cpu_after = cpu_seconds(emulator_pid) if emulator_pid is not None else None
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
            emulator_cpu_seconds=(
                cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
            ),
        )
    finally:
        _stop(workers)
        for conn in conns.values():
            conn.close()


# --- figures -------------------------------------------------------------------------------------


def latency_figures(answers: Sequence[Answer], prefix: str) -> dict[str, float | None]:
    cuts = percentiles((a.ended - a.started) * 1000 for a in answers)
    return {f"{prefix}_p{p}_ms": cuts.get(p) for p in (50, 95, 99)}


def common_figures(answers: list[Answer], requests: int, *, not_answered: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"requests": requests, "answered": len(answers)}
    figures["not_answered"] = not_answered
    created = [a for a in answers if a.outcome == reference.CREATED]
    first = min((a.started for a in answers), default=0.0)
    wall = max(a.ended for a in answers) - first if answers else 0.0
    figures["wall_seconds"] = wall if answers else None
    figures["answers_per_second"] = per(len(answers), wall)
    figures["codes_per_second"] = per(len(created), wall)
    figures.update(latency_figures(answers, "all"))
    figures.update(latency_figures(created, "success"))
    figures["outcomes"] = dict(Counter(a.outcome for a in answers).most_common())
    figures["last_code_issued_after_seconds"] = (
        max(a.ended for a in created) - first if created else None
    )
    # Answers per second of the phase, by outcome: shows where a run slows down.
    timeline: defaultdict[int, Counter[str]] = defaultdict(Counter)
    for a in answers:
        timeline[int(a.ended - first)][a.outcome] += 1
    figures["timeline"] = [dict(timeline[second]) for second in range(int(wall) + 1)]
    figures["codes_issued_by_answers"] = len(created)
    return figures


def cpu_figures(output: PhaseOutput) -> dict[str, Any]:
    return {
        "phase_seconds": max(r.ended for r in output.results)
        - min(r.began for r in output.results),
        "cpu_seconds_emulator": output.emulator_cpu_seconds,
        "cpu_seconds_workers": sum(r.cpu_seconds for r in output.results),
    }


def work_figures(rpcs: RpcCounts, created: int) -> dict[str, Any]:
    """Firestore work per new code, from the RPCs every instance's client sent during the phase
    (what a sale costs per code sold: double clicks, range queries and sold-out answers
    included)."""
    lost = rpcs.rejected_commits
    # A claim commit writes the coupon (and the claim): it lost the coupon to another claimer.
    conflicts = sum(n for key, n in lost.items() if _rejected(key, CONTENTION, COUPONS))
    segment_races = sum(n for key, n in lost.items() if _rejected(key, CONTENTION, SEGMENTS))
    return {
        "reads_total": rpcs.documents_read,
        "writes_total": rpcs.writes,
        "reads_per_code": per(rpcs.documents_read, created),
        "writes_per_code": per(rpcs.writes, created),
        "commits_per_code": per(rpcs.calls.get("commit", 0), created),
        "conflicts": conflicts,
        "conflicts_per_code": per(conflicts, created),
        "contention_other": rpcs.failed(*CONTENTION) - conflicts,
        "segment_races": segment_races,
        "reads_by_collection": dict(rpcs.reads_by_collection),
        "writes_by_collection": dict(rpcs.writes_by_collection),
        "rpcs": rpcs.as_dict(),
    }


def _rejected(key: str, errors: Sequence[str], collection: str) -> bool:
    """Whether a rejected commit ("Error: coll+coll") failed so and wrote that collection."""
    error, _, collections = key.partition(": ")
    return error in errors and collection in collections.split("+")


def double_click_figures(
    answers: list[Answer], users: Sequence[str]
) -> tuple[dict[str, int], dict[str, list[tuple[str, str | None]]]]:
    """For each shopper who clicked twice: did both answers carry the same code?

    Returns the counts and, for the shoppers whose answers differ, both answers.
    """
    answered: defaultdict[str, list[tuple[str, str | None]]] = defaultdict(list)
    for a in answers:
        answered[users[a.request]].append((a.outcome, a.code))
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


def _phase_figures(
    output: PhaseOutput, users: Sequence[str], answers: list[Answer]
) -> dict[str, Any]:
    not_answered = len(users) - len(answers)
    figures = common_figures(answers, len(users), not_answered=not_answered)
    figures.update(cpu_figures(output))
    metrics: Counter[str] = Counter()
    for result in output.results:
        metrics.update(result.metrics)
    rpcs = sum((r.rpcs for r in output.results), RpcCounts())
    figures.update(work_figures(rpcs, figures["codes_issued_by_answers"]), metrics=dict(metrics))
    return figures


def probe_figures(probe: ProbeResult) -> dict[str, Any]:
    sold_out = sum(1 for a in probe.answers if a.outcome == reference.SOLD_OUT)
    return {
        "probe_claims": len(probe.answers),
        "probe_outcomes": dict(Counter(a.outcome for a in probe.answers)),
        "probe_reads": probe.rpcs.documents_read,
        "probe_writes": probe.rpcs.writes,
        "probe_rpcs": probe.rpcs.as_dict(),
        "reads_per_sold_out": per(probe.rpcs.documents_read, sold_out),
        "probe_p50_ms": latency_figures(probe.answers, "probe")["probe_p50_ms"],
    }


def engine_figures(
    db: firestore.Client,
    *,
    campaign_id: str,
    output: PhaseOutput,
    users: Sequence[str],
    codes: int,
    shoppers: int,
) -> dict[str, Any]:
    from devkit.audit import audit_campaign

    answers = [a for r in output.results for a in r.answers]
    figures = _phase_figures(output, users, answers)
    if output.probe is not None:
        figures.update(probe_figures(output.probe))

    log.info("auditing campaign %s", campaign_id)
    report = audit_campaign(db, campaign_id=campaign_id)
    answered = answers_against_database(db, campaign_id=campaign_id, answers=answers, users=users)
    outcomes: Counter[str] = Counter(figures["outcomes"])
    double, mismatched = double_click_figures(answers, users)
    expected = min(codes, shoppers)
    unexpected = sum(n for o, n in outcomes.items() if o not in {"created", "held", "SOLD_OUT"})
    last_code = max((a.ended for a in answers if a.outcome == reference.CREATED), default=0.0)
    invariants: dict[str, int] = {
        **report.violations,
        "codes_not_issued": max(0, expected - report.assigned),
        "sold_out_while_codes_left": int(outcomes["SOLD_OUT"] > 0 and report.unassigned > 0),
        "double_clickers_mismatched": double["double_clickers_mismatched"],
        "contended_while_codes_left": sum(
            1 for a in answers if a.outcome == "CONTENDED" and a.ended < last_code
        ),
        "contended_answers": outcomes["CONTENDED"],
        "unexpected_answers": unexpected - outcomes["CONTENDED"],
        "not_answered": figures["not_answered"],
        **answered,
    }
    if mismatched:
        log.error(
            "double clickers with different answers, e.g. %s", dict(list(mismatched.items())[:5])
        )
    read_back = ("codes_total", "assigned", "unassigned", "claims", "shoppers")
    figures.update({f"db_{name}": getattr(report, name) for name in read_back})
    figures.update(double, expected_codes_issued=expected, invariants=invariants)
    figures["violations"] = sum(invariants.values())
    figures["cost"] = cost.per_claims(
        claims=figures["requests"],
        reads=figures["reads_total"],
        writes=figures["writes_total"],
        cpu_seconds=figures["cpu_seconds_workers"],
    ).as_dict()
    return figures


def answers_against_database(
    db: firestore.Client, *, campaign_id: str, answers: Sequence[Answer], users: Sequence[str]
) -> dict[str, int]:
    """What the shoppers were told, against the claims the database holds."""
    from shared.gcp.firestore import claims_collection

    held_by = {
        (data.get("user_id"), data.get("code"))
        for data in (
            s.to_dict() or {}
            for s in claims_collection(db, campaign_id).select(["user_id", "code"]).stream()
        )
    }
    created = [(users[a.request], a.code) for a in answers if a.outcome == reference.CREATED]
    held = [(users[a.request], a.code) for a in answers if a.outcome == reference.HELD]
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
    all_answers = [a for r in output.results for a in r.answers]
    answers = [a for a in all_answers if a.outcome != reference.CUT]
    figures = _phase_figures(output, users, answers)
    figures["cut_at_cap"] = len(all_answers) - len(answers)
    figures["stalled"] = figures["not_answered"] > 0
    log.info("checking reference campaign %s", campaign_id)
    check = reference.check_reference(
        db,
        campaign_id=campaign_id,
        created=[(users[a.request], a.code) for a in answers if a.outcome == reference.CREATED],
    )
    double, _ = double_click_figures(answers, users)
    read_back = {"codes_total", "assigned", "unassigned"}  # named as the engine's figures
    figures.update({(f"db_{k}" if k in read_back else k): v for k, v in check.items()})
    figures["sold_out_while_codes_left"] = int(
        figures["outcomes"].get(reference.SOLD_OUT, 0) > 0 and check["unassigned"] > 0
    )
    figures.update(double)
    return figures


# --- setup ---------------------------------------------------------------------------------------


def make_requests(shoppers: int, double_clicks: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    users = [f"shopper-{i:06d}" for i in range(shoppers)]
    requests = users + rng.sample(users, min(double_clicks, shoppers))
    rng.shuffle(requests)
    return requests


def setup_campaign(db: firestore.Client, *, design: str, codes: int) -> str:
    return harness.create_campaign(
        db,
        campaign_id=f"bench-{design}-{secrets.token_hex(3)}",
        title=f"Claim benchmark ({DESIGN_TITLES[design]})",
        codes=(f"BENCH-{i:06d}" for i in range(codes)),
    )


def warm_up(db: firestore.Client, *, claims: int, threads: int) -> None:
    """Untimed: a small sale on a throwaway campaign, so that neither design pays for the
    emulator's JVM warming up (its first seconds run at half speed). The caller resets after."""
    from devkit.claims import claim_as
    from shared.claims.engine import ClaimEngine
    from shared.errors import CodedropError
    from shared.settings import get_settings

    started = time.perf_counter()
    campaign_id = setup_campaign(db, design=ENGINE, codes=max(1, claims // 2))
    engine = ClaimEngine(db=db, settings=get_settings())

    def claim(i: int) -> None:
        with contextlib.suppress(CodedropError):
            claim_as(engine, campaign_id, f"warm-up-{i}")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(claim, range(claims)))
    engine.close()  # its campaign listener: the emulator is emptied next
    log.info("emulator warmed up with %d claims in %.1f s", claims, time.perf_counter() - started)


# --- output --------------------------------------------------------------------------------------


def _get(key: str, digits: int = 1) -> Callable[[Any], str]:
    return lambda f: fmt(f.get(key), digits)


def _outcome(name: str) -> Callable[[Any], str]:
    return lambda f: fmt(f["outcomes"].get(name, 0)) if "outcomes" in f else "-"


def _invariant(name: str) -> Callable[[Any], str]:
    return lambda f: fmt(f["invariants"].get(name)) if "invariants" in f else "-"


def _others(f: Any) -> str:
    if "outcomes" not in f:
        return "-"
    known = {"created", "held", "SOLD_OUT", "CONTENDED"}
    other = {k: v for k, v in f["outcomes"].items() if k not in known}
    return ", ".join(f"{k} {v}" for k, v in other.items()) or "0"


def _dollars(*keys: str) -> Callable[[Any], str]:
    return lambda f: " / ".join(f"${f['cost'][k]:.4f}" for k in keys) if "cost" in f else "-"


def _pair(a: str, b: str) -> Callable[[Any], str]:
    return lambda f: f"{fmt(f.get(a))} / {fmt(f.get(b))}"


def _either(invariant: str, figure: str) -> Callable[[Any], str]:
    """An engine invariant, or the baseline's figure of the same meaning."""

    def get(f: Any) -> str:
        if "invariants" in f:
            return fmt(f["invariants"].get(invariant))
        return fmt(f.get(figure))

    return get


def _mismatched(f: Any) -> str:
    total = f.get("double_clickers_mismatched")
    if not total:
        return fmt(total)
    parts = [f"two codes {f.get('double_clickers_two_codes', 0)}"] + [
        f"code + {k.removeprefix('double_clickers_code_and_')} {v}"
        for k, v in f.items()
        if k.startswith("double_clickers_code_and_")
    ]
    return f"{total} ({', '.join(parts)})"


def _probe(f: Any) -> str:
    if "probe_claims" not in f:
        return "-"
    return f"{fmt(f['probe_claims'])}, {fmt(f.get('probe_p50_ms'))}"


def _pcts(prefix: str) -> Callable[[Any], str]:
    return lambda f: " / ".join(fmt(f.get(f"{prefix}_p{p}_ms")) for p in (50, 95, 99))


def _reads_by_rpc(f: Any) -> str:
    if "rpcs" not in f:
        return "-"
    reads = f["rpcs"]["reads_by_method"]
    gets = reads.get("batch_get_documents", 0) + reads.get("get_document", 0)
    return " / ".join(fmt(n) for n in (gets, reads.get("run_query", 0)))


def _by_collection(key: str) -> Callable[[Any], str]:
    def shown(f: Any) -> str:
        counts = f.get(key)
        if not counts:
            return "-"
        return ", ".join(
            f"{name} {fmt(n)}" for name, n in sorted(counts.items(), key=lambda i: -i[1])
        )

    return shown


def _rpc(key: str) -> Callable[[Any], str]:
    return lambda f: fmt(f["rpcs"][key]) if "rpcs" in f else "-"


ROWS: list[Row | str] = [
    "load",
    ("requests (shoppers + double clicks)", _get("requests")),
    ("answered", _get("answered")),
    ("not answered (time cap)", _get("not_answered")),
    ("stalled (hit the cap)", lambda f: fmt(f.get("stalled", False))),
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
    ("latency p50 / p95 / p99, all (ms)", _pcts("all")),
    ("latency p50 / p95 / p99, new codes (ms)", _pcts("success")),
    "Firestore work per new code (the client's RPCs, whole phase)",
    ("commits", _get("commits_per_code", 2)),
    ("conflicts (claim commits that lost their coupon)", _get("conflicts_per_code", 3)),
    ("  other lost races (segment leases, cursors; locks)", _get("contention_other")),
    ("reads", _get("reads_per_code", 2)),
    ("writes", _get("writes_per_code", 3)),
    ("reads / writes, whole phase", _pair("reads_total", "writes_total")),
    ("  reads by RPC: batch get / query", _reads_by_rpc),
    ("  reads by collection", _by_collection("reads_by_collection")),
    ("  writes by collection", _by_collection("writes_by_collection")),
    ("  of the reads: missing documents", _rpc("missing_documents")),
    ("  of the reads: empty queries", _rpc("empty_queries")),
    ("  writes refused (failed commits)", _rpc("writes_rejected")),
    ("reads per SOLD_OUT answer, late shoppers", _get("reads_per_sold_out", 2)),
    ("  late-shopper probe: claims, p50 (ms)", _probe),
    f"dollars per {cost.PER_CLAIMS:,} claims at list prices (scripts/bench/cost.py)",
    ("Firestore reads / writes", _dollars("reads", "writes")),
    ("function CPU and memory / requests", _dollars("cpu_and_memory", "requests")),
    ("total", _dollars("total")),
    "outcomes",
    ("created (new code)", _outcome("created")),
    ("held (double click got its code)", _outcome("held")),
    ("SOLD_OUT", _outcome("SOLD_OUT")),
    ("CONTENDED", _outcome("CONTENDED")),
    ("other", _others),
    "database, read back",
    ("codes issued / expected", _pair("db_assigned", "expected_codes_issued")),
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
    ("CONTENDED answers while codes were being issued", _invariant("contended_while_codes_left")),
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


TARGET_SECONDS = 8.0
TARGET_WRITES = 2.0
TARGET_READS = 3.0
TARGET_CONFLICTS = 0.1
TARGET_SOLD_OUT_READS = 1.0


def targets(engine: dict[str, Any]) -> list[tuple[str, bool, str]]:
    def within(value: Any, limit: float) -> bool:
        return value is not None and value <= limit

    created = engine["codes_issued_by_answers"]
    written = engine["writes_by_collection"]
    claim_writes = written.get(COUPONS, 0) + written.get("claims", 0)
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
            f"{fmt(engine['wall_seconds'], 2)} s",
        ),
        (
            f"the claim itself writes {TARGET_WRITES:g} documents per new code (coupon, claim)",
            claim_writes <= TARGET_WRITES * created,
            f"{claim_writes:,} coupon and claim writes for {created:,} new codes; "
            f"all writes {fmt(engine['writes_per_code'], 3)} per code",
        ),
        (
            f"at most {TARGET_CONFLICTS:g} conflicts per new code",
            within(engine["conflicts_per_code"], TARGET_CONFLICTS),
            f"{engine['conflicts']:,} claim commits lost their coupon "
            f"= {fmt(engine['conflicts_per_code'], 3)} per code",
        ),
        (
            "no CONTENDED answer while codes were being issued",
            engine["invariants"]["contended_while_codes_left"] == 0,
            f"{engine['invariants']['contended_while_codes_left']} "
            f"(of {engine['invariants']['contended_answers']} CONTENDED answers)",
        ),
        (
            f"at most {TARGET_READS:g} reads per new code",
            # Every read of the phase: SOLD_OUT and double-click answers grow with the traffic.
            within(engine["reads_per_code"], TARGET_READS),
            f"{engine['reads_total']:,} reads for {created:,} new codes "
            f"= {fmt(engine['reads_per_code'], 2)} per code",
        ),
        (
            f"a SOLD_OUT answer costs at most {TARGET_SOLD_OUT_READS:g} read",
            within(engine.get("reads_per_sold_out"), TARGET_SOLD_OUT_READS),
            f"{fmt(engine.get('probe_reads'))} reads for "
            f"{fmt((engine.get('probe_outcomes') or {}).get('SOLD_OUT'))} late SOLD_OUT answers "
            f"= {fmt(engine.get('reads_per_sold_out'), 2)}",
        ),
    ]


# --- main ----------------------------------------------------------------------------------------


OPTIONS: list[harness.Option] = [
    ("--codes", harness.positive, 5000, "codes in the campaign"),
    ("--shoppers", harness.positive, 10000, "distinct shoppers"),
    ("--double-clicks", int, 1000, "shoppers who send a second request"),
    (
        "--concurrency",
        harness.positive,
        64,
        "concurrent claimers, over all processes (unless --threads)",
    ),
    ("--processes", harness.positive, 2, "function instances"),
    ("--threads", harness.positive, None, "claimer threads per process"),
    ("--sold-out-probe", int, 200, "late shoppers claiming after the sale"),
    ("--warmup-claims", int, 2000, "untimed claims first, to warm the emulator up (0: none)"),
    harness.FIRESTORE_OPTION,
    ("--skip-baseline", None, False, "only codedrop's engine"),
    ("--baseline-cap-seconds", float, 60.0, "the reference design starts no request after this"),
    ("--baseline-grace-seconds", float, 30.0, "then how long its claims may take to answer"),
    ("--seed", int, 20261121, "shuffles the requests"),
]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__, prog="claims", options=OPTIONS)
    args = parser.parse_args(argv)
    if args.threads is not None:
        args.concurrency = args.threads * args.processes
    if args.concurrency < args.processes:
        parser.error("--concurrency must be at least --processes")
    if args.double_clicks < 0 or args.double_clicks > args.shoppers:
        parser.error("--double-clicks must be between 0 and --shoppers")
    return args


def _timeline(figures: dict[str, Any]) -> str:
    return "; ".join(
        f"{second}s " + " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        for second, counts in enumerate(figures["timeline"])
        if counts
    )


def _ratio(engine: dict[str, Any], baseline: dict[str, Any], key: str) -> float | None:
    return per(engine.get(key), baseline.get(key))


def _design_phase(
    args: argparse.Namespace,
    emulators: harness.Emulators,
    *,
    design: str,
    requests: list[tuple[int, str]],
    threads: int,
) -> tuple[str, PhaseOutput]:
    from shared.container import instance_services

    # The same collection size for both designs: start from an empty database.
    emulators.reset()
    campaign_id = setup_campaign(instance_services().db, design=design, codes=args.codes)
    capped = design == REFERENCE
    output = run_phase(
        design=design,
        campaign_id=campaign_id,
        requests=requests,
        processes=args.processes,
        threads=threads,
        cap_seconds=args.baseline_cap_seconds if capped else None,
        grace_seconds=args.baseline_grace_seconds if capped else 0,
        probe_claims=0 if capped else args.sold_out_probe,
        emulator_pid=emulators.firestore_pid,
    )
    return campaign_id, output


def _print_ratios(
    args: argparse.Namespace, engine: dict[str, Any], baseline: dict[str, Any]
) -> dict[str, float | None]:
    ratios = {
        "answers_per_second": _ratio(engine, baseline, "answers_per_second"),
        "codes_per_second": _ratio(engine, baseline, "codes_per_second"),
    }
    capped = (
        f"(reference capped at {args.baseline_cap_seconds:g} s"
        f"{', stalled' if baseline['stalled'] else ''})"
    )
    if baseline["answered"]:
        print(
            f"\nclaims/s, engine / reference: {fmt(ratios['answers_per_second'])}x answers, "
            f"{fmt(ratios['codes_per_second'])}x new codes {capped}"
        )
    else:
        # As if it had answered one request at the cap: a lower bound of the ratio.
        bound = engine["answers_per_second"] * args.baseline_cap_seconds
        ratios["answers_per_second_lower_bound"] = bound
        print(
            f"\nclaims/s, engine / reference: the reference answered no request "
            f"{capped}; ratio > {fmt(bound, 0)}x"
        )
    return ratios


def bench(args: argparse.Namespace, emulators: harness.Emulators) -> int:
    from shared.container import instance_services

    db = instance_services().db
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
        "firestore": emulators.host_port,
        "cpus": os.cpu_count(),
        "load_average_at_start": harness.shown_load(),
    }
    log.info("scenario: %s", config)

    if args.warmup_claims > 0:
        warm_up(db, claims=args.warmup_claims, threads=threads)
    campaign_id, output = _design_phase(
        args, emulators, design=ENGINE, requests=requests, threads=threads
    )
    engine = engine_figures(
        db,
        campaign_id=campaign_id,
        output=output,
        users=users,
        codes=args.codes,
        shoppers=args.shoppers,
    )
    log.info("engine: %s s, %s", fmt(engine["wall_seconds"], 2), engine["outcomes"])
    log.info("engine: answers per second of the phase: %s", _timeline(engine))

    baseline: dict[str, Any] | None = None
    if not args.skip_baseline:
        campaign_id, output = _design_phase(
            args, emulators, design=REFERENCE, requests=requests, threads=threads
        )
        baseline = reference_figures(db, campaign_id=campaign_id, output=output, users=users)
        log.info("reference: %s s, %s", fmt(baseline["wall_seconds"], 2), baseline["outcomes"])
        log.info("reference: answers per second of the phase: %s", _timeline(baseline))

    print(
        f"\nClaim benchmark: {args.codes:,} codes, {args.shoppers:,} shoppers + "
        f"{args.double_clicks:,} double clicks = {len(users):,} requests; "
        f"{args.processes} processes x {threads} threads; Firestore emulator "
        f"{emulators.host_port}; {os.cpu_count()} CPUs; load average "
        f"{config['load_average_at_start']} at start, {harness.shown_load()} at the end\n"
    )
    print(
        harness.compare({"codedrop engine": engine, "reference design (002)": baseline or {}}, ROWS)
    )
    ratios = _print_ratios(args, engine, baseline) if baseline is not None else {}
    print("\ntargets for codedrop's engine:")
    target_results = targets(engine)
    for name, ok, detail in target_results:
        print(f"  {'PASS' if ok else 'MISS'}  {name}: {detail}")
    violations = {k: v for k, v in engine["invariants"].items() if v}
    print(f"\ninvariants: {'all held' if not violations else f'VIOLATED {violations}'}")

    harness.write_json(
        args.json,
        {
            "config": config,
            "engine": engine,
            "reference": baseline,
            "ratio_engine_to_reference": ratios,
            "targets": {name: {"met": ok, "value": detail} for name, ok, detail in target_results},
        },
    )
    return 1 if violations else 0


def main(argv: Sequence[str] | None = None) -> int:
    return harness.run_with_emulators(parse_args(argv), bench)


if __name__ == "__main__":
    sys.exit(main())
