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
  applied by UsageCounter (count_usage's code) from 8 threads, then once more (a redelivery of
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
import logging
import os
import secrets
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from devkit.emulators import RunningEmulator, free_port, start_pubsub
from scripts.bench import harness, phases
from scripts.bench.harness import positive
from scripts.bench.phases import ChildResult, ChildSpec, Verdict, at_least, count, measured

log = logging.getLogger("bench.assignments")

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


# --- child process -------------------------------------------------------------------------------


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
    with measured(spec) as result:
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
    coupon_prefix = writes.document_prefix(coupons)
    claim_prefix = writes.document_prefix(claims)

    def commit(chunk: Sequence[tuple[str, dict[str, Any], str, dict[str, Any]]]) -> None:
        # The job's own way of building and sending a batch (raw Write protobufs), so the
        # ceiling is never slowed by a costlier client than the job's.
        batch = db.batch()
        pbs = []
        for coupon_id, update, claim_id, created in chunk:
            pbs.append(writes.update(coupon_prefix + coupon_id, update))
            pbs.append(writes.create(claim_prefix + claim_id, created))
        writes.add_writes(batch, pbs)
        writes.commit(batch)

    db.collection("warm").document("up").get()  # connect outside the measurement
    result = phases.committed(spec, pairs, CEILING_PAIRS, commit)
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
    from devkit.pubsub import pull_all
    from shared.container import instance_services
    from shared.events.models import CodesAssigned, parse_event
    from shared.gcp.firestore import announcement_ref, campaigns_collection
    from shared.settings import get_settings

    usage = instance_services().usage_counter
    counters = instance_services().counters
    subscription = f"projects/{get_settings().project_id}/subscriptions/{SUBSCRIPTION}"
    events = [parse_event(m.data) for m in pull_all(subscription)]
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
class Phase(phases.Phase):
    rpcs: dict[str, Any] = field(default_factory=dict)  # the child's Firestore RPCs, as counted
    audit: dict[str, Any] | None = None  # an assignment's read-back


@dataclass(kw_only=True)
class Bench(phases.ChildBench[Phase]):
    module = "scripts.bench.assignments"
    shortfall = "{name}: {written} of {rows} recipients given a code"

    def new_row(self, rpcs: dict[str, Any], **fields: Any) -> Phase:
        return Phase(**fields, rpcs=rpcs)

    @property
    def profile_dir(self) -> str:
        return str(self.args.profile.resolve()) if self.args.profile else ""

    def warm_up(self, docs: int) -> None:
        campaign_id = self.new_campaign("warmup", rows=0)
        self.load_pool(campaign_id, docs, prefix="WARMUP")

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

    def assign_phase(self, label: str, rows: int) -> Phase:
        from shared.settings import get_settings

        self.prepare()
        campaign_id = self.new_campaign(label, rows=rows)
        self.load_pool(campaign_id, rows)
        blob = self.upload_csv(
            f"assignments/{campaign_id}/bench.csv",
            "recipient,first_name",
            (f"{recipient(n)},Name{n}" for n in range(1, rows + 1)),
        )
        spec = ChildSpec(
            kind=ASSIGN,
            label=label,
            campaign_id=campaign_id,
            rows=rows,
            committers=get_settings().assignment_parallel_commits,
            object_name=blob.name,
            generation=str(blob.generation),
            profile=self.profile_dir,
        )
        phase = self.run(f"assign {count(rows)}", spec)
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
            committers=committers,
            profile=self.profile_dir,
        )
        return self.run(f"ceiling batch x{committers}", spec)


def render_table(rows: Sequence[Phase]) -> str:
    def calls(p: Phase, method: str) -> str:
        return f"{p.rpcs.get('calls', {}).get(method, 0):,}"

    def refused(p: Phase) -> str:
        errors = p.rpcs.get("errors", {})
        return f"{sum(n for k, n in errors.items() if k.startswith('commit')):,}"

    columns: list[phases.Column[Phase]] = [
        ("writes/row", lambda p: phases.per(p.rpcs.get("documents_written"), p.written)),
        ("reads/row", lambda p: phases.per(p.rpcs.get("documents_read"), p.written)),
        ("queries", lambda p: calls(p, "run_query")),
        ("commits", lambda p: calls(p, "commit")),
        ("refused", refused),
    ]
    return phases.render_table(rows, unit="row", columns=columns)


def verdicts(bench: Bench) -> list[Verdict]:
    out = phases.failed(bench.phases)
    assigns = [p for p in bench.phases if p.error is None and p.kind == ASSIGN]
    small, large = phases.small_and_large(bench, ASSIGN)
    ceiling = next((p for p in bench.phases if p.error is None and p.kind == CEILING), None)
    for p in assigns:
        if p.audit is None:  # interrupted before its read-back ended: nothing was verified
            out.append((f"{p.name}: read back", None, "completes", False))
            continue
        violations = sum(p.audit.get("violations", {}).values())
        out.append((f"{p.name}: invariant violations", float(violations), "0", violations == 0))
    if small is not None and large is not None:
        out.append(phases.peak_rss(small, large, TARGET_RSS_RATIO))
    if large is not None and ceiling is not None:
        ratio = large.per_second / ceiling.per_second
        out.append(at_least("assignments/s / ceiling", ratio, TARGET_CEILING_RATIO))
    return out


def read_back_lines(rows: Sequence[Phase]) -> list[str]:
    lines = []
    for p in rows:
        if p.audit is not None:
            a = p.audit
            lines.append(
                f"{p.name} read back: {a['claims']:,} claims, {a['assigned_coupons']:,} assigned "
                f"coupons, {a['result_rows']:,} result rows, counters {a['counted_claimed']:,} "
                f"from {a['events']:,} codes.assigned events (redelivered: "
                f"{a['redelivered_applied']} applied again), announcements low stock "
                f"{a['low_stock_announcements']} sold out {a['sold_out_announcements']}, "
                f"violations {a['violations'] or 'none'} ({a['seconds']:.0f} s)"
            )
    return lines


def run_phases(run: Bench, parallel: int) -> None:
    args = run.args
    # The ceiling first: the read-back after the largest phase is the run's longest part.
    if not args.skip_ceiling:
        run.ceiling_phase(args.rows, parallel)
    if not args.skip_small:
        run.assign_phase("small", args.small_rows)
    run.assign_phase("large", args.rows)


def bench(args: argparse.Namespace, emulators: harness.Emulators) -> int:
    with pubsub(emulators.log_dir):
        return measure(Bench(args=args, emulators=emulators))


def measure(run: Bench) -> int:
    from shared.settings import get_settings

    args = run.args
    settings = get_settings()
    outcome = phases.run_phases(run, lambda: run_phases(run, settings.assignment_parallel_commits))
    return phases.report(
        run,
        outcome,
        title=(
            f"codedrop assignment benchmark: {os.cpu_count()} CPUs, load average "
            f"{harness.shown_load(outcome.load_before)} -> "
            f"{harness.shown_load(outcome.load_after)}; batches of "
            f"{settings.assignment_batch_size} recipients, "
            f"{settings.assignment_parallel_commits} in parallel, queries of up to "
            f"{settings.assignment_query_limit:,}; ceiling batches of {CEILING_PAIRS} pairs; a "
            "new emulator for each phase"
            + (" (PROFILED: times and CPU include the profiler's)" if args.profile else "")
        ),
        table=render_table(run.phases),
        notes=read_back_lines(run.phases),
        targets=verdicts(run),
        figures={
            "assignment_batch_size": settings.assignment_batch_size,
            "assignment_parallel_commits": settings.assignment_parallel_commits,
            "assignment_query_limit": settings.assignment_query_limit,
            "ceiling_pairs_per_batch": CEILING_PAIRS,
        },
    )


OPTIONS: list[harness.Option] = [
    ("--skip-ceiling", None, False, "no ceiling run"),
    ("--parallel", positive, None, "batches in parallel, and the ceiling's committers"),
    ("--batch-size", positive, None, "recipients per batch (CODEDROP_ASSIGNMENT_BATCH_SIZE)"),
    (
        "--query-limit",
        positive,
        None,
        "most candidates per query (CODEDROP_ASSIGNMENT_QUERY_LIMIT)",
    ),
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
    return phases.parser(
        __doc__, prog="assignments", what="recipients (and codes)", options=OPTIONS
    ).parse_args(argv)


@contextlib.contextmanager
def pubsub(log_dir: Path) -> Iterator[RunningEmulator]:
    """A Pub/Sub emulator with the events topic and the subscription the audit pulls."""
    emulator = start_pubsub(port=free_port(), log_dir=log_dir)
    try:
        os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host_port
        harness.forget_services()
        from devkit.pubsub import create_topic_with_pull
        from shared.settings import get_settings

        settings = get_settings()
        create_topic_with_pull(
            project=settings.project_id, topic=settings.events_topic, subscription=SUBSCRIPTION
        )
        yield emulator
    finally:
        emulator.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return phases.main(
        args,
        spec_type=ChildSpec,
        runners={ASSIGN: _child_assign, CEILING: _child_ceiling},
        environment={
            "CODEDROP_ASSIGNMENT_PARALLEL_COMMITS": args.parallel,
            "CODEDROP_ASSIGNMENT_BATCH_SIZE": args.batch_size,
            "CODEDROP_ASSIGNMENT_QUERY_LIMIT": args.query_limit,
            # A phase of a million writes a million claims and updates a million coupons: about
            # 2 KiB of emulator heap per document write, more than the JVM's default of a
            # quarter of this machine's memory.
            "JAVA_TOOL_OPTIONS": f"-Xmx{args.emulator_heap}" if args.emulator_heap else None,
        },
        bench=bench,
    )


if __name__ == "__main__":
    sys.exit(main())
