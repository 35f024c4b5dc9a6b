"""Assignment benchmark: a recipient list against a pool of codes, the real job path against
plain atomic batches of the same writes, on emulators of its own.

    .venv/bin/python -m scripts.bench.assignments [--rows 1000000] [--small-rows 100000]
        [--skip-small] [--skip-ceiling] [--parallel N] [--batch-size N] [--query-limit N]
        [--warmup-docs 20000] [--emulator-heap 8g] [--profile DIR] [--json PATH] [-v]

Starts a Firestore, a Cloud Storage and a Pub/Sub emulator on free ports (project
demo-codedrop-bench, bucket codedrop-imports, topic coupon-events), each in its own process
group, and stops them at the end.

Assignment phases (`--small-rows`, then `--rows`): a campaign counting emails (`identity:
email`, low-stock threshold 1% of the pool) gets a pool of as many codes as the list has
recipients, loaded with parallel plain batches before timing; a CSV of distinct recipients
(`user0000001@bench.example,Name1`, …) is uploaded to `assignments/{campaign}/bench.csv`, and
the real job path, `AssignmentService.handle_object_finalized`, runs in a child process of its
own, so the child's peak RSS is the job's alone. The child reports wall time, CPU time, peak
RSS (its own high-water mark, VmHWM), RSS growth during the job (sampled every 50 ms) and the
Firestore RPCs its clients sent (devkit/firestore_rpcs.py; the walk of the pool goes
through a client of its own): documents read and written,
queries, commits and commits refused. Then the parent reads everything back:

- the job's counts; every claim and every coupon (no code held twice, no recipient twice, every
  assigned coupon pointing at its claim and back, assigned coupons = claims = assigned);
- the result file (one row per recipient, with the code the database holds for them);
- the counters: the `codes.assigned` events the job published are pulled from Pub/Sub and
  applied by UsageService (count_usage's code) from 8 threads, then once more (a redelivery of
  every event); the counters must equal the documents, and the low-stock and sold-out
  announcements must have been made exactly once.

The ceiling, in the same run (first: the largest phase's read-back is the run's longest part,
mostly count_usage's stock check after each event, a query the emulator answers in time growing
with the documents it holds): a fresh pool of `--rows` codes, and the same writes the job makes
for `--rows` recipients (each coupon updated as assigned and the recipient's claim slot created,
with the same fields, ids from the same codes and recipients, their fields built before
timing), written by plain atomic batches of 250 pairs (500 writes) from as many committers as
the job runs batches in parallel, each batch's protobufs built and sent as the job does its own
(shared/gcp/writes): no query, no read, no update-time guard (an update's and a create's own
existence checks only), no CSV, no event. `--rows 100000 --skip-small` runs the job and its
ceiling at 100k.

`--profile DIR` writes each child's cProfile, every thread's, to DIR/{phase}.pstats.

Every phase starts on a new Firestore emulator on the same port (the emulator keeps ~2 KiB of
heap per document ever written), warmed up with `--warmup-docs` documents. Prints a table and
the targets (assignments/s >= 0.7 of the ceiling; peak RSS at `--rows` within 10% of
`--small-rows`; zero invariant violations) to stdout, logs to stderr; `--json` writes every
figure. Exit code 1: a phase failed or an invariant was violated; 2: the benchmark itself
failed; 130: interrupted (the phases that finished are still reported).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
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

from devkit.emulators import RunningEmulator, free_port, start_pubsub
from devkit.firestore_rpcs import RpcCounter
from devkit.measure import peak_rss_bytes
from scripts.bench import harness
from scripts.bench.harness import positive
from scripts.bench.imports import RssSampler

log = logging.getLogger("bench.assignments")

REPO = Path(__file__).resolve().parents[2]
CEILING_PAIRS = 250  # 500 writes: Firestore's limit for one atomic batch
LOAD_BATCH = 500
LOAD_COMMITTERS = 4
APPLY_THREADS = 8
SUBSCRIPTION = "bench-counters"
TARGET_CEILING_RATIO = 0.7
TARGET_RSS_RATIO = 1.10
ASSIGN, CEILING = "assign", "ceiling"


def recipient(number: int) -> str:
    return f"user{number:07d}@bench.example"


def code(number: int) -> str:
    return f"BENCH-{number:09d}"


# --- what a child is told and what it answers ----------------------------------------------------


@dataclass(frozen=True)
class ChildSpec:
    kind: str  # ASSIGN or CEILING
    label: str
    campaign_id: str
    rows: int
    log_level: int
    committers: int
    object_name: str = ""  # ASSIGN: the uploaded list and its generation
    generation: str = ""
    profile: str = ""  # a directory: the child's measured block is profiled into it


def _profile_path(spec: ChildSpec) -> Path | None:
    return Path(spec.profile) / f"{spec.label}.pstats" if spec.profile else None


@dataclass
class ChildResult:
    written: int = 0  # recipients given a code
    elapsed_seconds: float = 0.0
    cpu_seconds: float = 0.0
    peak_rss_kib: int = 0
    rss_before_kib: int = 0
    rss_max_kib: int = 0
    rpcs: dict[str, Any] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)


@contextlib.contextmanager
def measured(label: str, progress: Callable[[], str] | None = None) -> Iterator[ChildResult]:
    """Time the block in the child: wall, CPU, RSS and its client's Firestore RPCs."""
    from shared.container import instance_services

    result = ChildResult()
    services = instance_services()
    with (
        RpcCounter(services.db) as rpcs,
        RpcCounter(services.streams_db) as streamed,  # the job's walk of the pool
        RssSampler(label, progress) as sampler,
    ):
        with harness.timed() as clock:
            yield result
        result.rpcs = (rpcs.snapshot() + streamed.snapshot()).as_dict()
    result.elapsed_seconds = clock.wall_seconds
    result.cpu_seconds = clock.cpu_seconds
    result.peak_rss_kib = peak_rss_bytes() // 1024
    result.rss_before_kib = sampler.before_kib
    result.rss_max_kib = sampler.max_kib


def child_main(spec_path: Path, result_path: Path) -> int:
    spec = ChildSpec(**json.loads(spec_path.read_text()))
    harness.setup_logging(spec.log_level, role=f"child[{spec.label}]")
    runners = {ASSIGN: _child_assign, CEILING: _child_ceiling}
    began = time.perf_counter()
    try:
        result = runners[spec.kind](spec)
    except Exception as exc:
        log.exception("%s failed", spec.label)
        failure = {"error": f"{type(exc).__name__}: {exc}", "after": time.perf_counter() - began}
        result_path.write_text(json.dumps(failure))
        return 1
    result_path.write_text(json.dumps(asdict(result), default=str))
    return 0


def _child_assign(spec: ChildSpec) -> ChildResult:
    # Imported here: the parent put the emulators into the environment.
    from shared.campaigns import store as campaign_store
    from shared.container import instance_services
    from shared.intake.service import StoredObject
    from shared.settings import get_settings

    settings = get_settings()
    services = instance_services()
    # Connect every client outside the measurement (gRPC channels, HTTP session, publisher).
    campaign_store.get_campaign(services.db, campaign_id=spec.campaign_id)
    services.storage.bucket(settings.imports_bucket).get_blob(spec.object_name)
    _ = services.bus  # builds the publisher
    obj = StoredObject(settings.imports_bucket, spec.object_name, spec.generation)
    log.info(
        "assigning %s (batches of %d, %d in parallel, queries of up to %d)",
        obj.uri,
        settings.assignment_batch_size,
        settings.assignment_parallel_commits,
        settings.assignment_query_limit,
    )
    with measured(spec.label) as result, harness.profiled(_profile_path(spec)):
        job = services.assignments.handle_object_finalized(obj)
    if job is None:
        raise RuntimeError("handle_object_finalized returned no job")
    result.written = job.assigned
    result.detail = {
        "job": job.model_dump(mode="json", exclude={"errors", "unassigned_lines"}),
        "batch_size": settings.assignment_batch_size,
        "parallel_commits": settings.assignment_parallel_commits,
        "query_limit": settings.assignment_query_limit,
    }
    return result


def _child_ceiling(spec: ChildSpec) -> ChildResult:
    from shared.assignments.assigner import claim_fields, coupon_claimed_fields
    from shared.assignments.recipients import RecipientRow
    from shared.claims.identity import IdentityKind, identity_key
    from shared.claims.store import claim_id_for
    from shared.clock import utcnow
    from shared.container import instance_services
    from shared.coupons.store import Candidate, coupon_id_for
    from shared.gcp import writes
    from shared.gcp.firestore import claims_collection, coupons_collection

    db = instance_services().db
    coupons = coupons_collection(db, spec.campaign_id)
    claims = claims_collection(db, spec.campaign_id)
    now = utcnow()
    began = time.perf_counter()
    # The job's writes for recipient n and code n, ready-made.
    pairs: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = []
    for n in range(1, spec.rows + 1):
        person = recipient(n)
        row = RecipientRow(n + 1, person, person, identity_key(IdentityKind.EMAIL, person), ())
        claim_id = claim_id_for(row.key, 0)
        candidate = Candidate(coupon_id_for(code(n)), code(n), 0.0, now)
        update = coupon_claimed_fields(row=row, claim_id=claim_id, now=now)
        created = claim_fields(
            campaign_id=spec.campaign_id, row=row, candidate=candidate, now=now, job_id="ceiling"
        )
        pairs.append((candidate.coupon_id, update, claim_id, created))
    log.info("%d pairs built in %.1f s", len(pairs), time.perf_counter() - began)
    chunks = [pairs[i : i + CEILING_PAIRS] for i in range(0, len(pairs), CEILING_PAIRS)]
    written = 0
    lock = threading.Lock()

    coupon_prefix = writes.document_prefix(coupons)
    claim_prefix = writes.document_prefix(claims)

    def commit(chunk: list[tuple[str, dict[str, Any], str, dict[str, Any]]]) -> None:
        # The job's own way of building and sending a batch (raw Write protobufs), so the
        # ceiling is never slowed by a costlier client than the job's.
        nonlocal written
        batch = db.batch()
        pbs = []
        for coupon_id, update, claim_id, created in chunk:
            pbs.append(writes.update(coupon_prefix + coupon_id, update))
            pbs.append(writes.create(claim_prefix + claim_id, created))
        writes.add_writes(batch, pbs)
        writes.commit(batch)
        with lock:
            written += len(chunk)

    db.collection("warm").document("up").get()  # connect outside the measurement
    with (
        measured(spec.label, progress=lambda: f"{written} written") as result,
        harness.profiled(_profile_path(spec)),
        ThreadPoolExecutor(spec.committers, thread_name_prefix="commit") as executor,
    ):
        for _ in executor.map(commit, chunks):
            pass  # re-raises a failed commit
    result.written = written
    result.detail = {"pairs_per_batch": CEILING_PAIRS}
    return result


# --- reading the truth back ----------------------------------------------------------------------


@dataclass
class Audit:
    claims: int = 0
    assigned_coupons: int = 0
    result_rows: int = 0
    counted_claimed: int | None = None
    events: int = 0
    redelivered_applied: int = 0
    low_stock_announcements: int = 0
    sold_out_announcements: int = 0
    violations: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def flag(self, what: str, count: int = 1) -> None:
        self.violations[what] = self.violations.get(what, 0) + count


def audit_database(campaign_id: str, audit: Audit) -> dict[str, str]:
    """Claims and coupons read back: the recipient -> code map of the campaign."""
    from shared.container import instance_services
    from shared.gcp.firestore import claims_collection, coupons_collection

    db = instance_services().streams_db  # two collections read whole: a stream each
    holder: dict[str, str] = {}
    coupon_claim: dict[str, str] = {}
    claim_ids: set[str] = set()
    for snapshot in (
        claims_collection(db, campaign_id).select(["coupon_id", "user_id", "code"]).stream()
    ):
        data = snapshot.to_dict() or {}
        audit.claims += 1
        claim_ids.add(snapshot.id)
        if data["user_id"] in holder:
            audit.flag("recipient holding two codes")
        holder[data["user_id"]] = data["code"]
        if data["coupon_id"] in coupon_claim:
            audit.flag("code held twice")
        coupon_claim[data["coupon_id"]] = snapshot.id
    for snapshot in coupons_collection(db, campaign_id).select(["assigned", "claim_id"]).stream():
        data = snapshot.to_dict() or {}
        claim_id = coupon_claim.pop(snapshot.id, None)
        if data.get("assigned"):
            audit.assigned_coupons += 1
            if claim_id is None or data.get("claim_id") != claim_id:
                audit.flag("assigned coupon without its claim")
        elif claim_id is not None:
            audit.flag("claim of an unassigned coupon")
    if coupon_claim:
        audit.flag("claim of a missing coupon", len(coupon_claim))
    if audit.assigned_coupons != audit.claims:
        audit.flag("assigned coupons != claims")
    return holder


def audit_result(result_uri: str, holder: dict[str, str], audit: Audit) -> None:
    """Every row of the result file: a recipient once, with the code the database holds."""
    from shared.container import instance_services
    from shared.settings import get_settings

    bucket = get_settings().imports_bucket
    blob = (
        instance_services().storage.bucket(bucket).blob(result_uri.removeprefix(f"gs://{bucket}/"))
    )
    seen: set[str] = set()
    with blob.open("r", encoding="utf-8", newline="") as handle:
        rows = csv.reader(handle)
        if next(rows) != ["recipient", "code", "first_name"]:
            audit.flag("result header")
        for row in rows:
            audit.result_rows += 1
            if row[0] in seen:
                audit.flag("recipient twice in the result")
            seen.add(row[0])
            if holder.get(row[0]) != row[1]:
                audit.flag("result code differs from the database")
    if audit.result_rows != len(holder):
        audit.flag("result rows != recipients holding a code")


def apply_events(campaign_id: str, audit: Audit) -> None:
    """Pull what the job published and apply it as count_usage does, then redeliver it all."""
    from google.cloud.pubsub_v1 import SubscriberClient

    from shared.container import instance_services
    from shared.events.models import CodesAssigned, parse_event
    from shared.gcp.firestore import announcement_ref, campaigns_collection
    from shared.settings import get_settings

    usage = instance_services().usage
    counters = instance_services().counters
    subscription = f"projects/{get_settings().project_id}/subscriptions/{SUBSCRIPTION}"
    payloads: list[bytes] = []
    with SubscriberClient() as subscriber:
        while True:
            response = subscriber.pull(
                request={
                    "subscription": subscription,
                    "max_messages": 1000,
                    "return_immediately": True,
                },
                timeout=30,
            )
            if not response.received_messages:
                break
            payloads += [r.message.data for r in response.received_messages]
            subscriber.acknowledge(
                subscription=subscription, ack_ids=[r.ack_id for r in response.received_messages]
            )
    events = [parse_event(p) for p in payloads]
    assigned = [e for e in events if isinstance(e, CodesAssigned) and e.campaign_id == campaign_id]
    audit.events = len(assigned)
    with ThreadPoolExecutor(APPLY_THREADS) as executor:
        list(executor.map(usage.handle, assigned))
        audit.redelivered_applied = sum(executor.map(counters.apply, assigned))
    audit.counted_claimed = counters.totals(campaign_id).claimed
    if audit.counted_claimed != audit.claims:
        audit.flag("counters != documents")
    if audit.redelivered_applied:
        audit.flag("redelivered event counted again", audit.redelivered_applied)
    db = instance_services().db
    campaign = campaigns_collection(db).document(campaign_id).get().to_dict() or {}
    total = campaign.get("codes_total")
    for kind in ("low_stock", "sold_out"):
        if announcement_ref(db, campaign_id, f"{kind}.{campaign_id}.{total}").get().exists:
            setattr(audit, f"{kind}_announcements", 1)


# --- parent --------------------------------------------------------------------------------------


@dataclass
class Phase:
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
    rpcs: dict[str, Any]
    emulator_cpu_seconds: float | None
    load: tuple[float, float]
    detail: dict[str, Any] = field(default_factory=dict)
    audit: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class Bench:
    args: argparse.Namespace
    emulators: harness.Emulators
    phases: list[Phase] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    prepared: bool = False

    @property
    def profile_dir(self) -> str:
        return str(self.args.profile.resolve()) if self.args.profile else ""

    def prepare(self) -> None:
        """A new, warmed-up and emptied Firestore emulator for the next phase."""
        if self.prepared:
            self.emulators.restart_firestore()
        if self.args.warmup_docs:
            began = time.perf_counter()
            campaign_id = self.new_campaign("warmup", rows=0)
            self.load_pool(campaign_id, self.args.warmup_docs, prefix="WARMUP")
            log.info("emulator warmed up in %.1f s", time.perf_counter() - began)
        self.emulators.reset()
        self.prepared = True

    def new_campaign(self, label: str, *, rows: int) -> str:
        from shared.container import instance_services
        from shared.gcp.firestore import campaign_ref

        db = instance_services().db
        campaign_id = harness.create_campaign(
            db,
            campaign_id=f"bench-{label}-{secrets.token_hex(3)}",
            title=f"Assignment benchmark {label}",
            low_stock_threshold=max(1, rows // 100),
        )
        campaign_ref(db, campaign_id).update({"identity": "email"})
        return campaign_id

    def load_pool(self, campaign_id: str, count: int, *, prefix: str = "") -> None:
        """`count` unassigned codes, written by parallel plain batches (not timed)."""
        from google.cloud import firestore

        from shared.clock import utcnow
        from shared.container import instance_services
        from shared.coupons.store import coupon_fields, coupon_id_for
        from shared.gcp.firestore import campaign_ref, coupons_collection

        db = instance_services().db
        coupons = coupons_collection(db, campaign_id)
        now = utcnow()
        began = time.perf_counter()

        def write(start: int) -> None:
            batch = db.batch()
            for n in range(start, min(start + LOAD_BATCH, count + 1)):
                text = f"{prefix}{code(n)}"
                batch.create(
                    coupons.document(coupon_id_for(text)),
                    coupon_fields(code=text, now=now, job_id="pool"),
                )
            batch.commit()

        with ThreadPoolExecutor(LOAD_COMMITTERS) as executor:
            list(executor.map(write, range(1, count + 1, LOAD_BATCH)))
        campaign_ref(db, campaign_id).update(
            {"codes_total": firestore.Increment(count), "pool_generation": firestore.Increment(1)}
        )
        log.info("pool of %d codes loaded in %.1f s", count, time.perf_counter() - began)

    def upload_list(self, campaign_id: str, rows: int) -> tuple[str, str]:
        from shared.container import instance_services
        from shared.settings import get_settings

        path = self.emulators.log_dir / f"recipients-{rows}.csv"
        with path.open("w", encoding="utf-8", newline="") as out:
            out.write("recipient,first_name\n")
            for n in range(1, rows + 1):
                out.write(f"{recipient(n)},Name{n}\n")
        name = f"assignments/{campaign_id}/bench.csv"
        blob = instance_services().storage.bucket(get_settings().imports_bucket).blob(name)
        blob.upload_from_filename(str(path), content_type="text/csv")
        log.info("uploaded %s: %d rows, %.1f MiB", name, rows, path.stat().st_size / 2**20)
        path.unlink()
        return name, str(blob.generation)

    def run(self, name: str, spec: ChildSpec) -> Phase:
        """Run one child and record its row; a failed child becomes a row with its error."""
        spec_path = self.emulators.log_dir / f"{spec.label}.spec.json"
        result_path = self.emulators.log_dir / f"{spec.label}.result.json"
        spec_path.write_text(json.dumps(asdict(spec)))
        result_path.unlink(missing_ok=True)
        command = [sys.executable, "-m", "scripts.bench.assignments", "--child", str(spec_path)]
        command += ["--child-result", str(result_path)]
        with harness.timed(self.emulators.firestore_pid) as clock:
            process = subprocess.Popen(command, cwd=REPO, stdin=subprocess.DEVNULL)
            try:
                code_ = process.wait()
            except BaseException:
                process.terminate()
                process.wait(timeout=30)
                raise
        answer: dict[str, Any] = json.loads(result_path.read_text()) if result_path.exists() else {}
        error = answer.get("error") if answer else f"child exited with code {code_} and no result"
        if code_ != 0 and error is None:
            error = f"child exited with code {code_}"
        elapsed = float(answer.get("elapsed_seconds", answer.get("after", 0.0)))
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
            rpcs=answer.get("rpcs", {}),
            emulator_cpu_seconds=clock.emulator_cpu_seconds,
            load=clock.load,
            detail=answer.get("detail", {}),
            error=error,
        )
        self.phases.append(phase)
        if error is not None:
            self.problems.append(f"{name}: FAILED after {elapsed:.1f} s: {error}")
            return phase
        log.info(
            "%s: %d in %.1f s = %.0f/s, peak RSS %.1f MiB",
            name,
            written,
            elapsed,
            phase.per_second,
            phase.peak_rss_kib / 1024,
        )
        if written != spec.rows:
            self.problems.append(f"{name}: {written} of {spec.rows} recipients given a code")
        return phase

    def assign_phase(self, label: str, rows: int) -> Phase:
        from shared.settings import get_settings

        self.prepare()
        campaign_id = self.new_campaign(label, rows=rows)
        self.load_pool(campaign_id, rows)
        name, generation = self.upload_list(campaign_id, rows)
        spec = ChildSpec(
            kind=ASSIGN,
            label=label,
            campaign_id=campaign_id,
            rows=rows,
            log_level=log.getEffectiveLevel(),
            committers=get_settings().assignment_parallel_commits,
            object_name=name,
            generation=generation,
            profile=self.profile_dir,
        )
        phase = self.run(f"assign {_count(rows)}", spec)
        if phase.error is None:
            phase.audit = asdict(self.audit(campaign_id, phase))
        return phase

    def audit(self, campaign_id: str, phase: Phase) -> Audit:
        began = time.perf_counter()
        audit = Audit()
        job = phase.detail["job"]
        holder = audit_database(campaign_id, audit)
        if job.get("result"):
            audit_result(job["result"], holder, audit)
        else:
            audit.flag("no result file")
        del holder
        if job["assigned"] != audit.claims:
            audit.flag("job's assigned != claims")
        apply_events(campaign_id, audit)
        for kind in ("low_stock", "sold_out"):
            if getattr(audit, f"{kind}_announcements") != 1:
                audit.flag(f"{kind} not announced")
        audit.seconds = time.perf_counter() - began
        if audit.violations:
            self.problems.append(f"{phase.name}: invariant violations {audit.violations}")
        log.info("%s read back in %.1f s: %s", phase.name, audit.seconds, audit.violations or "ok")
        return audit

    def ceiling_phase(self, rows: int, committers: int) -> Phase:
        self.prepare()
        campaign_id = self.new_campaign("ceiling", rows=rows)
        self.load_pool(campaign_id, rows)
        spec = ChildSpec(
            kind=CEILING,
            label="ceiling",
            campaign_id=campaign_id,
            rows=rows,
            log_level=log.getEffectiveLevel(),
            committers=committers,
            profile=self.profile_dir,
        )
        return self.run(f"ceiling batch x{committers}", spec)


def _count(rows: int) -> str:
    if rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}M"
    if rows % 1_000 == 0:
        return f"{rows // 1_000}k"
    return str(rows)


def _per(value: float | int | None, rows: int, scale: float = 1.0) -> str:
    return "-" if value is None or not rows else f"{value / rows * scale:.3f}"


def render_table(phases: Sequence[Phase]) -> str:
    header = (
        "phase",
        "rows",
        "par",
        "seconds",
        "per s",
        "writes/row",
        "reads/row",
        "queries",
        "commits",
        "refused",
        "peak RSS MiB",
        "RSS growth MiB",
        "CPU µs/row",
        "emulator µs/row",
        "load",
    )
    lines = []
    for p in phases:
        calls = p.rpcs.get("calls", {})
        errors = p.rpcs.get("errors", {})
        lines.append(
            (
                p.name,
                f"{p.written:,}",
                str(p.committers),
                f"{p.elapsed_seconds:.1f}",
                "FAILED" if p.error else f"{p.per_second:,.0f}",
                _per(p.rpcs.get("documents_written"), p.written),
                _per(p.rpcs.get("documents_read"), p.written),
                f"{calls.get('run_query', 0):,}",
                f"{calls.get('commit', 0):,}",
                f"{sum(n for k, n in errors.items() if k.startswith('commit')):,}",
                f"{p.peak_rss_kib / 1024:.1f}",
                f"{p.rss_growth_kib / 1024:.1f}",
                _per(p.cpu_seconds, p.written, 1e6).split(".")[0],
                _per(p.emulator_cpu_seconds, p.written, 1e6).split(".")[0],
                f"{p.load[0]:.1f}>{p.load[1]:.1f}",
            )
        )
    return harness.table(header, lines)


Verdict = tuple[str, float | None, str, bool | None]


def verdicts(bench: Bench) -> list[Verdict]:
    done = [p for p in bench.phases if p.error is None]
    out: list[Verdict] = [
        (f"{p.name} failed", None, "completes", False) for p in bench.phases if p.error
    ]
    assigns = [p for p in done if p.kind == ASSIGN]
    small = next((p for p in assigns if p.rows != bench.args.rows), None)
    large = next((p for p in assigns if p.rows == bench.args.rows), None)
    ceiling = next((p for p in done if p.kind == CEILING), None)
    for p in assigns:
        if p.audit is None:  # interrupted before its read-back ended: nothing was verified
            out.append((f"{p.name}: read back", None, "completes", False))
            continue
        violations = sum(p.audit.get("violations", {}).values())
        out.append((f"{p.name}: invariant violations", float(violations), "0", violations == 0))
    if small is not None and large is not None:
        ratio = large.peak_rss_kib / small.peak_rss_kib
        out.append(
            (
                f"peak RSS {_count(large.rows)} / {_count(small.rows)}",
                ratio,
                f"<= {TARGET_RSS_RATIO:.2f}",
                ratio <= TARGET_RSS_RATIO,
            )
        )
    if large is not None and ceiling is not None:
        ratio = large.per_second / ceiling.per_second
        out.append(
            (
                "assignments/s / ceiling",
                ratio,
                f">= {TARGET_CEILING_RATIO:.2f}",
                ratio >= TARGET_CEILING_RATIO,
            )
        )
    return out


def render_verdicts(rows: Sequence[Verdict]) -> str:
    width = max((len(r[0]) for r in rows), default=0)
    lines = []
    for what, value, target, met in rows:
        shown = "-" if value is None else (f"{value:,.0f}" if value >= 100 else f"{value:.2f}")
        verdict = "" if met is None else ("met" if met else "MISSED")
        lines.append(f"{what.ljust(width)}  {shown:>8}  target {target:<10} {verdict}".rstrip())
    return "\n".join(lines)


def bench(run: Bench) -> int:
    from shared.settings import get_settings

    args = run.args
    settings = get_settings()
    load_before = harness.load_average()
    interrupted = False
    try:
        # The ceiling first: the read-back after the largest phase is the run's longest part.
        if not args.skip_ceiling:
            run.ceiling_phase(args.rows, settings.assignment_parallel_commits)
        if not args.skip_small:
            run.assign_phase("small", args.small_rows)
        run.assign_phase("large", args.rows)
    except KeyboardInterrupt:
        if not run.phases:
            raise
        log.warning("interrupted; reporting the phases that finished")
        interrupted = True
    load_after = harness.load_average()
    targets = verdicts(run)
    print(
        f"codedrop assignment benchmark: {os.cpu_count()} CPUs, load average "
        f"{harness.shown_load(load_before)} -> {harness.shown_load(load_after)}; batches of "
        f"{settings.assignment_batch_size} recipients, {settings.assignment_parallel_commits} "
        f"in parallel, queries of up to {settings.assignment_query_limit:,}; ceiling batches of "
        f"{CEILING_PAIRS} pairs; a new emulator for each phase"
        + (" (INTERRUPTED)" if interrupted else "")
        + (" (PROFILED: times and CPU include the profiler's)" if args.profile else "")
    )
    print()
    print(render_table(run.phases))
    print()
    for p in run.phases:
        if p.audit is not None:
            a = p.audit
            print(
                f"{p.name} read back: {a['claims']:,} claims, {a['assigned_coupons']:,} assigned "
                f"coupons, {a['result_rows']:,} result rows, counters {a['counted_claimed']:,} "
                f"from {a['events']:,} codes.assigned events (redelivered: "
                f"{a['redelivered_applied']} applied again), announcements low stock "
                f"{a['low_stock_announcements']} sold out {a['sold_out_announcements']}, "
                f"violations {a['violations'] or 'none'} ({a['seconds']:.0f} s)"
            )
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
            "assignment_batch_size": settings.assignment_batch_size,
            "assignment_parallel_commits": settings.assignment_parallel_commits,
            "assignment_query_limit": settings.assignment_query_limit,
            "ceiling_pairs_per_batch": CEILING_PAIRS,
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
    ("--rows", positive, 1_000_000, "recipients (and codes) in the big run"),
    ("--small-rows", positive, 100_000, "recipients in the memory comparison run"),
    ("--skip-small", None, False, "no --small-rows run"),
    ("--skip-ceiling", None, False, "no ceiling run"),
    ("--parallel", positive, None, "batches in parallel, and the ceiling's committers"),
    ("--batch-size", positive, None, "recipients per batch (CODEDROP_ASSIGNMENT_BATCH_SIZE)"),
    (
        "--query-limit",
        positive,
        None,
        "most candidates per query (CODEDROP_ASSIGNMENT_QUERY_LIMIT)",
    ),
    ("--warmup-docs", int, 20_000, "documents written to warm each emulator up (0: none)"),
    ("--emulator-heap", str, None, "the emulators' JVM heap, e.g. 8g (default: the JVM's)"),
    (
        "--profile",
        Path,
        None,
        "a directory: cProfile each child's measured block, every thread, into it (its "
        "figures are then slowed by the profiler)",
    ),
]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__, prog="assignments", options=OPTIONS)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-result", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


@contextlib.contextmanager
def pubsub(log_dir: Path) -> Iterator[RunningEmulator]:
    """A Pub/Sub emulator with the events topic and the subscription the audit pulls."""
    emulator = start_pubsub(port=free_port(), log_dir=log_dir)
    try:
        os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host_port
        harness.forget_services()
        from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

        from shared.settings import get_settings

        settings = get_settings()
        topic = f"projects/{settings.project_id}/topics/{settings.events_topic}"
        PublisherClient().create_topic(name=topic)
        with SubscriberClient() as subscriber:
            subscriber.create_subscription(
                name=f"projects/{settings.project_id}/subscriptions/{SUBSCRIPTION}", topic=topic
            )
        yield emulator
    finally:
        emulator.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        if args.child_result is None:
            raise SystemExit("--child needs --child-result")
        return child_main(args.child, args.child_result)
    harness.setup_logging(harness.level(args.verbose), role="bench")
    harness.stop_on_sigterm()
    # Before anything of shared is used: the children inherit this environment.
    for flag, variable in (
        ("parallel", "CODEDROP_ASSIGNMENT_PARALLEL_COMMITS"),
        ("batch_size", "CODEDROP_ASSIGNMENT_BATCH_SIZE"),
        ("query_limit", "CODEDROP_ASSIGNMENT_QUERY_LIMIT"),
    ):
        if getattr(args, flag) is not None:
            os.environ[variable] = str(getattr(args, flag))
    if args.emulator_heap:
        # A phase of a million writes a million claims and updates a million coupons: about
        # 2 KiB of emulator heap per document write, more than the JVM's default of a quarter
        # of this machine's memory.
        os.environ["JAVA_TOOL_OPTIONS"] = f"-Xmx{args.emulator_heap}"
    emulators = harness.Emulators(storage=True)
    try:
        with emulators, pubsub(emulators.log_dir):
            code_ = bench(Bench(args=args, emulators=emulators))
            emulators.keep_logs = code_ == 130
            return code_
    except KeyboardInterrupt:
        log.warning("interrupted")
        return 130
    except Exception:
        log.exception("benchmark failed")
        return 2


if __name__ == "__main__":
    sys.exit(main())
