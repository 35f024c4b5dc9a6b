"""The load test's audit: the sale's invariants from the recorded responses, the documents
read back from Firestore and the usage counters, and the targets of the run."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from google.cloud import firestore

from devkit import http
from devkit.audit import AuditReport, audit_campaign
from scripts.load_test.options import Options
from scripts.load_test.report import CLAIM_KINDS
from scripts.load_test.stack import Target
from shared.gcp.firestore import claims_collection


@dataclass
class Truth:
    """The campaign read back from Firestore after the sale."""

    audit: AuditReport
    codes_by_user: dict[str, list[str]]
    claimed_at: list[float]


def read_truth(target: Target, campaign_id: str) -> Truth:
    # The client finds the emulator through the environment.
    os.environ["FIRESTORE_EMULATOR_HOST"] = target.firestore_host
    os.environ["GOOGLE_CLOUD_PROJECT"] = target.project
    db = firestore.Client(project=target.project)
    audit = audit_campaign(db, campaign_id=campaign_id)
    codes_by_user: defaultdict[str, list[str]] = defaultdict(list)
    claimed_at: list[float] = []
    for snapshot in claims_collection(db, campaign_id).stream():
        data = snapshot.to_dict() or {}
        codes_by_user[str(data.get("user_id"))].append(str(data.get("code")))
        when = data.get("claimed_at")
        if isinstance(when, datetime):
            claimed_at.append(when.timestamp())
    return Truth(audit=audit, codes_by_user=dict(codes_by_user), claimed_at=sorted(claimed_at))


def wait_counted(target: Target, campaign_id: str, token: str, claims: int, seconds: float) -> None:
    """Poll the admin stats until `claimed` reaches `claims`, or `seconds` pass."""
    url = f"{target.admin_url}/v1/campaigns/{campaign_id}"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            status, body = http.call_json("GET", url, token=token)
            stats = body.get("stats") if status == 200 and isinstance(body, dict) else None
            if isinstance(stats, dict) and (stats.get("claimed") or 0) >= claims:
                return
        time.sleep(0.5)


def settle_counters(
    target: Target, campaign_id: str, token: str, truth: Truth, seconds: float
) -> dict[str, Any]:
    """Poll the admin stats until `claimed` equals the documents' count, or `seconds` pass."""
    url = f"{target.admin_url}/v1/campaigns/{campaign_id}"
    started = time.monotonic()
    expected = truth.audit.claims
    stats: dict[str, Any] = {}
    history: list[tuple[float, int | None]] = []
    while True:
        try:
            status, body = http.call_json("GET", url, token=token)
        except OSError:
            status, body = 0, None
        if status == 200 and isinstance(body, dict) and isinstance(body.get("stats"), dict):
            stats = body["stats"]
        claimed = stats.get("claimed")
        elapsed = time.monotonic() - started
        if not history or history[-1][1] != claimed:
            history.append((round(elapsed, 2), claimed))
        if claimed == expected or elapsed >= seconds:
            break
        time.sleep(0.5)
    reconcile: Any = None
    with contextlib.suppress(OSError):
        _, reconcile = http.call_json(
            "POST", f"{url}/reconcile", body={"repair": False}, token=token
        )
    return {
        "settled": stats.get("claimed") == expected,
        "seconds_to_settle": round(time.monotonic() - started, 2),
        "stats": stats,
        "documents": {"claims": expected, "codes_total": truth.audit.codes_total},
        "history": history,
        "reconcile_dry_run": reconcile,
    }


@dataclass
class Check:
    name: str
    title: str
    description: str
    examples: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, example: str, count: int = 1) -> None:
        self.count += count
        if len(self.examples) < 10:
            self.examples.append(example)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "count": self.count,
            "examples": self.examples,
        }


# A violation found: its example, and how many violations it stands for (1 unless given).
Finding = str | tuple[str, int]
Finder = Callable[["Sale"], Iterator[Finding]]


def check(name: str, title: str) -> Callable[[Finder], Callable[[Sale], Check]]:
    """Turn a function that yields the violations it finds into one that returns the Check;
    its docstring says what the check looks for."""

    def wrap(find: Finder) -> Callable[[Sale], Check]:
        description = " ".join((find.__doc__ or "").split())

        def run(sale: Sale) -> Check:
            found = Check(name, title, description)
            for finding in find(sale):
                example, count = (finding, 1) if isinstance(finding, str) else finding
                found.add(example, count)
            return found

        return run

    return wrap


@dataclass
class Sale:
    """The recorded responses and the database, digested for the checks."""

    records: Sequence[dict[str, Any]]
    truth: Truth
    counters: Mapping[str, Any]
    shoppers: int
    max_per_user: int
    requests: list[dict[str, Any]] = field(init=False)
    journeys: dict[str, dict[str, Any]] = field(init=False)
    claims: list[dict[str, Any]] = field(init=False)
    answered: defaultdict[str, set[str]] = field(init=False)  # shopper -> codes answered
    owners: defaultdict[str, set[str]] = field(init=False)  # code -> shoppers answered it
    seen: set[str] = field(init=False)  # shoppers who sent anything

    def __post_init__(self) -> None:
        self.requests = [r for r in self.records if r.get("kind") != "journey"]
        self.journeys = {str(r["shopper"]): r for r in self.records if r.get("kind") == "journey"}
        self.claims = [r for r in self.requests if r.get("kind") in CLAIM_KINDS]
        self.answered = defaultdict(set)
        self.owners = defaultdict(set)
        for r in self.claims:
            if r.get("status") in (200, 201) and r.get("code"):
                self.answered[str(r["shopper"])].add(str(r["code"]))
                self.owners[str(r["code"])].add(str(r["shopper"]))
        self.seen = {str(r["shopper"]) for r in self.records}

    @property
    def db(self) -> AuditReport:
        return self.truth.audit

    @property
    def unfinished(self) -> list[str]:
        return sorted(self.seen - set(self.journeys))

    @property
    def never_seen(self) -> int:
        return max(self.shoppers - len(self.seen), 0)


@check("codes_held_twice", "codes held by two shoppers")
def _held_twice(sale: Sale) -> Iterator[Finding]:
    """A coupon in two claims in the database, or one code answered to two shoppers."""
    for coupon_id in sale.db.codes_held_twice:
        yield f"coupon {coupon_id} is in two claims"
    for code, users in sorted(sale.owners.items()):
        if len(users) > 1:
            yield f"code {code} answered to {', '.join(sorted(users))}"


@check("over_issued", "over-issue")
def _over_issued(sale: Sale) -> Iterator[Finding]:
    """More claims than codes in the pool, or more distinct codes answered than exist."""
    db = sale.db
    extra = max(db.over_issued, len(sale.owners) - db.codes_total, 0)
    if extra:
        yield (
            f"{db.claims:,} claims and {len(sale.owners):,} codes answered for a pool of "
            f"{db.codes_total:,}",
            extra,
        )


@check("shoppers_over_limit", "shoppers holding more than allowed")
def _over_limit(sale: Sale) -> Iterator[Finding]:
    """A shopper holding more codes than the campaign allows, in the database or in the answers."""
    heavy = set(sale.db.shoppers_over_limit) | {
        u for u, c in sale.answered.items() if len(c) > sale.max_per_user
    }
    for user in sorted(heavy):
        in_db = sale.truth.codes_by_user.get(user, [])
        yield f"{user}: database {in_db}, answered {sorted(sale.answered[user])}"


@check("sold_out_while_codes_remained", "SOLD_OUT while codes remained")
def _sold_out_early(sale: Sale) -> Iterator[Finding]:
    """A 410 SOLD_OUT answered while the pool still had a code: unassigned coupons after the sale,
    or a new code issued to a request sent after that 410 arrived."""
    unassigned = sale.db.unassigned
    new_code_starts = [float(r["t"]) for r in sale.claims if r.get("status") == 201]
    latest_new_start = max(new_code_starts, default=-math.inf)
    for r in (r for r in sale.claims if r.get("status") == 410):
        ended = float(r["t"]) + float(r["ms"]) / 1000
        if unassigned > 0:
            yield f"{r['shopper']} told SOLD_OUT; {unassigned:,} coupons are still unassigned"
        elif ended < latest_new_start:
            yield (
                f"{r['shopper']} told SOLD_OUT at +{ended - float(sale.claims[0]['t']):.3f} s; a "
                f"request sent {latest_new_start - ended:.3f} s later got a new code"
            )


@check("responses_disagree_with_db", "answers that disagree with the database")
def _disagreements(sale: Sale) -> Iterator[Finding]:
    """A code answered (claim or claims/me) that the database does not give that shopper, or a code
    the database gives a shopper who was never answered it."""
    held_by = sale.truth.codes_by_user
    for user, codes in sorted(sale.answered.items()):
        held = set(held_by.get(user, []))
        for code in sorted(codes - held):
            yield f"{user} was answered {code}; the database gives them {sorted(held)}"
    for r in sale.requests:
        if r.get("kind") == "me" and r.get("status") == 200:
            user = str(r["shopper"])
            read, held = set(r.get("codes") or []), set(held_by.get(user, []))
            if read != held:
                yield f"{user} read back {sorted(read)}; the database has {sorted(held)}"
    for user, held_codes in sorted(held_by.items()):
        for code in sorted(set(held_codes) - sale.answered.get(user, set())):
            outcome = sale.journeys.get(user, {}).get("outcome", "not one of this run's shoppers")
            yield f"the database gives {code} to {user}, never answered it ({outcome})"


@check("shoppers_without_answer", "shoppers never answered")
def _unanswered(sale: Sale) -> Iterator[Finding]:
    """A shopper whose claim ended without a code or SOLD_OUT (gave up on retries, an error status,
    no response), or who never finished the journey."""
    if sale.never_seen:
        yield (f"{sale.never_seen:,} shoppers never sent a request", sale.never_seen)
    for user in sale.unfinished:
        yield f"{user} never finished the journey (the run ended first)"
    if len(sale.seen) > sale.shoppers:
        yield (
            f"the client ran {len(sale.seen):,} shoppers for {sale.shoppers:,} asked "
            "(it restarted users)",
            0,
        )
    for user, journey in sorted(sale.journeys.items()):
        if journey.get("outcome") not in ("code", "sold_out"):
            yield (
                f"{user}: {journey.get('outcome')} (last status {journey.get('status')}, "
                f"{journey.get('attempts')} attempts)"
            )


@check("counters_disagree", "counters after they settle")
def _counters(sale: Sale) -> Iterator[Finding]:
    """GET /v1/campaigns/{id} stats (sharded usage counters) against the documents, after polling
    until they match or the settle time ran out."""
    db, stats = sale.db, sale.counters.get("stats") or {}
    if stats.get("claimed") != db.claims:
        yield (
            f"stats.claimed {stats.get('claimed')} vs {db.claims:,} claim documents after "
            f"{sale.counters.get('seconds_to_settle')} s"
        )
    if stats.get("codes_total") != db.codes_total:
        yield f"stats.codes_total {stats.get('codes_total')} vs {db.codes_total:,} coupons"


@check("database_inconsistent", "claims and coupons disagree")
def _consistency(sale: Sale) -> Iterator[Finding]:
    """A claim whose coupon does not point back at it, or an assigned coupon without its claim."""
    for claim_id in sale.db.claims_without_coupon:
        yield f"claim {claim_id} has no matching coupon"
    for coupon_id in sale.db.coupons_without_claim:
        yield f"coupon {coupon_id} is assigned without a claim"


CHECKS = (
    _held_twice,
    _over_issued,
    _over_limit,
    _sold_out_early,
    _disagreements,
    _unanswered,
    _counters,
    _consistency,
)


def shoppers_summary(sale: Sale) -> dict[str, Any]:
    journeys = sale.journeys.values()
    outcomes = Counter(str(j.get("outcome")) for j in journeys)
    doubles = [j for j in journeys if j.get("double_click")]
    return {
        "expected": sale.shoppers,
        "seen": len(sale.seen),
        "finished_journey": len(sale.journeys),
        "got_a_code": outcomes.get("code", 0),
        "told_sold_out": outcomes.get("sold_out", 0),
        "error_answer": outcomes.get("error", 0),
        "no_answer": outcomes.get("unanswered", 0) + len(sale.unfinished) + sale.never_seen,
        "double_clickers": len(doubles),
        "double_click_same_code": sum(
            1 for j in doubles if j.get("double_code") and j.get("double_code") == j.get("code")
        ),
        "retried_at_least_once": sum(1 for j in journeys if (j.get("attempts") or 0) > 1),
        "most_attempts": max((int(j.get("attempts") or 0) for j in journeys), default=0),
    }


def audit_sale(
    records: Sequence[dict[str, Any]],
    truth: Truth,
    counters: Mapping[str, Any],
    *,
    shoppers: int,
    max_per_user: int,
) -> tuple[list[Check], dict[str, Any]]:
    """Every invariant of the sale, from the records, the documents and the counters; and the
    shoppers' outcomes."""
    sale = Sale(records, truth, counters, shoppers, max_per_user)
    return [check(sale) for check in CHECKS], shoppers_summary(sale)


def targets(
    options: Options,
    figures: Mapping[str, Any],
    shoppers: Mapping[str, Any],
    truth: Truth,
    violations: int,
) -> list[dict[str, Any]]:
    expected_codes = min(options.codes, options.shoppers * options.max_per_user)
    answered = shoppers["got_a_code"] + shoppers["told_sold_out"]
    p95 = ((figures.get("latency_ms") or {}).get("claim") or {}).get("p95")
    sale = figures.get("sale_seconds")
    rows = [
        {
            "name": "every shopper answered",
            "goal": f"{options.shoppers:,}",
            "value": f"{answered:,}",
            "met": answered == options.shoppers,
        },
        {
            "name": "all codes issued",
            "goal": f"{expected_codes:,}",
            "value": f"{truth.audit.assigned:,}",
            "met": truth.audit.assigned == expected_codes,
        },
        {"name": "zero violations", "goal": "0", "value": str(violations), "met": violations == 0},
        {
            "name": "claim latency p95 (every POST /claims response)",
            "goal": f"< {options.p95_target_ms:g} ms",
            "value": f"{p95} ms",
            "met": p95 is not None and p95 < options.p95_target_ms,
        },
    ]
    if options.pattern == "burst":
        rows.append(
            {
                "name": "whole sale answered (first request → last shopper's answer)",
                "goal": f"< {options.sale_target_seconds:g} s",
                "value": f"{sale} s",
                "met": sale is not None and sale < options.sale_target_seconds,
            }
        )
    return rows
