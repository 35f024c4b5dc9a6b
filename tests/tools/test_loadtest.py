"""Tests for the flash-sale load test (scripts/loadtest: the scripts/load_test package, its
shoppers' client, audit and report).

The emulator tests read one `--floor` run, made exactly as a person would: a local stack of its
own on free ports, then codedrop's sale (a campaign through admin_api, codes through the bucket
and import_codes, the shoppers at once, the audit against Firestore) and the floor's beside it.
They assert invariants, never timings. The size is what the invariants need, no more: twice as
many shoppers as codes (the pool runs out and half are told SOLD_OUT), a fifth of them
double-clicking, and 16 threads with two connections each against one claim_api process (up to
32 claims in flight, so claims contend and are retried); 60 codes keep the announcements (low
stock, sold out) within the 5% the count_usage pushes per claim may exceed one. Starting the
stack is most of the time; each sale takes seconds.
The other tests feed the audit made-up sales to show that it catches each violation.
"""

from __future__ import annotations

import io
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devkit.audit import AuditReport
from devkit.emulators import EmulatorUnavailable, check_prerequisites
from scripts.load_test import report
from scripts.load_test.audit import Truth, audit_sale
from scripts.load_test.cli import print_summary
from tests.support.processes import Finished, env_for_a_stack_of_its_own, run_module

REPO = Path(__file__).resolve().parents[2]
# The --floor run takes about 90 s on a busy two-core machine, a minute of it starting the stack;
# the rest is headroom for a loaded CI machine. Exceeding it fails the test.
TIMEOUT = 300


def _load_test(*args: str) -> Finished:
    """`python -m scripts.load_test --free-ports ARGS`: a stack of its own and a sale on it."""
    try:
        check_prerequisites()
    except EmulatorUnavailable as exc:
        pytest.fail(f"the load test cannot run here: {exc}", pytrace=False)
    env = env_for_a_stack_of_its_own()
    # One claim_api process starts faster; a few hundred shoppers need no more.
    env["CODEDROP_CLAIM_API_WORKERS"] = "1"
    return run_module(
        "scripts.load_test",
        ["--free-ports", *args],
        env=env,
        timeout=TIMEOUT,
        stop_with=signal.SIGINT,  # it stops its stack on the way out
    )


SHOPPERS, CODES = 120, 60


@dataclass(frozen=True)
class FloorRun:
    """The module's one `--floor` run: its stack sold once as codedrop and once as the floor."""

    finished: Finished
    report: Path  # the report directory; the codedrop sale's own report in 1-codedrop/
    floor_json: Path  # --floor-json


@pytest.fixture(scope="module")
def floor_run(tmp_path_factory: pytest.TempPathFactory) -> FloorRun:
    """One stack for both emulator tests: starting it is most of their time, and codedrop's side
    of `--floor` is the load test's own sale (campaign, codes through the bucket, full audit and
    report), so the small sale is read from there."""
    directory = tmp_path_factory.mktemp("loadtest")
    out, floor_json = directory / "report", directory / "floor.json"
    finished = _load_test(
        *("--floor", "--shoppers", str(SHOPPERS), "--codes", str(CODES), "--pattern", "burst"),
        *("--double-click-share", "0.2", "--threads", "16"),
        *("--report-dir", str(out), "--floor-json", str(floor_json)),
    )
    return FloorRun(finished, out, floor_json)


@pytest.mark.emulator
@pytest.mark.timeout(2 * TIMEOUT)  # a whole stack, two sales and their audits
@pytest.mark.xdist_group("loadtest-stack")  # one worker makes the module's one run
def test_small_sale_has_no_violation_and_issues_every_code(floor_run: FloorRun) -> None:
    out = floor_run.report / "1-codedrop"
    output = floor_run.finished.stdout + floor_run.finished.stderr

    assert floor_run.finished.returncode == 0, output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["violations"] == 0, output
    assert [c["name"] for c in summary["audit"] if c["count"]] == [], output
    assert summary["database"]["codes_total"] == CODES
    assert summary["database"]["assigned"] == CODES
    assert summary["database"]["unassigned"] == 0
    shoppers = summary["shoppers"]
    assert shoppers["finished_journey"] == SHOPPERS
    assert shoppers["got_a_code"] == CODES
    assert shoppers["told_sold_out"] == SHOPPERS - CODES
    assert shoppers["double_clickers"] > 0
    assert summary["counters"]["settled"] is True
    assert summary["counters"]["stats"]["claimed"] == CODES
    # Every response was recorded, and the page is there with its charts.
    records = report.load_records(out / "responses.jsonl")
    assert sum(1 for r in records if r["kind"] == "journey") == SHOPPERS
    assert sum(1 for r in records if r["kind"] == "claim" and r["status"] == 201) >= 1
    page = (out / "report.html").read_text()
    assert "Pool draining" in page
    assert "<svg" in page
    # What ./scripts/loadtest prints of it without --floor: the shoppers, each check passed.
    printed = io.StringIO()
    print_summary(summary, printed)
    text = printed.getvalue()
    assert f"shoppers {SHOPPERS}: code {CODES}, SOLD_OUT {SHOPPERS - CODES}, error 0," in text
    assert text.count("\n  ok   ") == len(summary["audit"]), text


@pytest.mark.emulator
@pytest.mark.timeout(2 * TIMEOUT)
@pytest.mark.xdist_group("loadtest-stack")
def test_the_floor_comparison_runs_both_sides_and_counts_their_operations(
    floor_run: FloorRun,
) -> None:
    """--floor: codedrop and the floor on one stack, each audited, side by side; a campaign
    without webhooks shows no webhook invocation, and every code sold one counted event."""
    output = floor_run.finished.stdout + floor_run.finished.stderr

    assert floor_run.finished.returncode == 0, output
    comparison = json.loads(floor_run.floor_json.read_text())
    assert comparison == json.loads((floor_run.report / "floor.json").read_text())
    codedrop, floor = comparison["runs"]
    assert (codedrop["side"], floor["side"]) == ("codedrop", "floor")
    assert codedrop["violations"] == floor["violations"] == 0, output
    assert codedrop["claim_status"].get("201") == floor["claim_status"].get("201") == CODES
    # At most one push a claim and the announcements (low stock, sold out): concurrent claims
    # share a message, each claim's event carried once.
    assert 0 < codedrop["per_claim"]["invocations"]["count_usage"] <= 1.05
    assert "deliver_webhooks" not in codedrop["per_claim"]["invocations"]
    assert codedrop["per_claim"]["pubsub_events_published"] >= 1.0
    per_claim = codedrop["per_claim"]
    assert per_claim["pubsub_messages_published"] <= per_claim["pubsub_events_published"]
    assert floor["per_claim"]["pubsub_messages_published"] == 0
    assert floor["per_claim"]["firestore_documents_written"] >= 1.0
    assert comparison["codedrop / floor"]["wall time (sale answered in)"] > 0
    assert comparison["machine"]["nproc"] == os.cpu_count()


# --- the audit catches each violation ---------------------------------------------------------

T0 = 1_800_000_000.0


def _claim(shopper: str, status: int, *, at: float, code: str | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {
        "t": T0 + at,
        "shopper": shopper,
        "kind": "claim",
        "ms": 50.0,
        "attempt": 1,
        "status": status,
    }
    if code:
        record["code"] = code
    return record


def _journey(shopper: str, outcome: str, *, at: float, code: str | None = None) -> dict[str, Any]:
    return {
        "t": T0 + at,
        "shopper": shopper,
        "kind": "journey",
        "ms": 100.0,
        "outcome": outcome,
        "status": {"code": 201, "sold_out": 410}.get(outcome, 0),
        "code": code,
        "attempts": 1,
        "first_claim_at": T0 + at,
        "answered_at": T0 + at + 0.05,
        "double_click": False,
    }


def _truth(codes_by_user: dict[str, list[str]], *, codes_total: int, **lists: list[str]) -> Truth:
    claims = sum(len(c) for c in codes_by_user.values())
    audit = AuditReport(
        campaign_id="c",
        codes_total=codes_total,
        assigned=min(claims, codes_total),
        unassigned=max(codes_total - claims, 0),
        claims=claims,
        shoppers=len(codes_by_user),
        max_per_user=1,
    )
    for name, offenders in lists.items():  # the invariants this case breaks
        setattr(audit, name, offenders)
    return Truth(audit=audit, codes_by_user=codes_by_user, claimed_at=[])


def _violations(
    records: list[dict[str, Any]], truth: Truth, *, shoppers: int, claimed: int
) -> dict[str, int]:
    counters = {
        "stats": {"claimed": claimed, "codes_total": truth.audit.codes_total},
        "seconds_to_settle": 0.1,
    }
    checks, _ = audit_sale(records, truth, counters, shoppers=shoppers, max_per_user=1)
    return {c.name: c.count for c in checks if c.count}


def test_a_clean_sale_passes() -> None:
    records = [
        _claim("a", 201, at=0.0, code="X1"),
        _journey("a", "code", at=0.0, code="X1"),
        _claim("b", 410, at=0.5),
        _journey("b", "sold_out", at=0.5),
    ]
    truth = _truth({"a": ["X1"]}, codes_total=1)
    assert _violations(records, truth, shoppers=2, claimed=1) == {}


def test_one_code_answered_to_two_shoppers_is_caught() -> None:
    records = [
        _claim("a", 201, at=0.0, code="X1"),
        _claim("b", 201, at=0.1, code="X1"),
        _journey("a", "code", at=0.0, code="X1"),
        _journey("b", "code", at=0.1, code="X1"),
    ]
    truth = _truth({"a": ["X1"]}, codes_total=2)
    found = _violations(records, truth, shoppers=2, claimed=1)
    assert found["codes_held_twice"] == 1
    assert found["responses_disagree_with_db"] == 1  # b holds nothing in the database


def test_sold_out_while_a_code_was_left_is_caught() -> None:
    records = [
        _claim("a", 410, at=0.0),
        _journey("a", "sold_out", at=0.0),
    ]
    truth = _truth({}, codes_total=1)  # the one code is still unassigned
    assert _violations(records, truth, shoppers=1, claimed=0) == {
        "sold_out_while_codes_remained": 1
    }


def test_sold_out_before_a_later_request_got_a_code_is_caught() -> None:
    records = [
        _claim("a", 410, at=0.0),
        _claim("b", 201, at=1.0, code="X1"),
        _journey("a", "sold_out", at=0.0),
        _journey("b", "code", at=1.0, code="X1"),
    ]
    truth = _truth({"b": ["X1"]}, codes_total=1)
    assert _violations(records, truth, shoppers=2, claimed=1) == {
        "sold_out_while_codes_remained": 1
    }


def test_over_issue_and_a_shopper_over_the_limit_are_caught() -> None:
    records = [
        _claim("a", 201, at=0.0, code="X1"),
        _claim("a", 201, at=0.0, code="X2"),
        _journey("a", "code", at=0.0, code="X1"),
    ]
    truth = _truth({"a": ["X1", "X2"]}, codes_total=1, shoppers_over_limit=["a"])
    found = _violations(records, truth, shoppers=1, claimed=2)
    assert found["over_issued"] == 1
    assert found["shoppers_over_limit"] == 1


def test_unanswered_and_missing_shoppers_are_caught() -> None:
    records = [
        _claim("a", 503, at=0.0),
        _journey("a", "unanswered", at=0.0),
        {**_claim("b", 200, at=0.0), "kind": "campaign"},  # opened the page, then the run ended
    ]
    truth = _truth({}, codes_total=0)
    found = _violations(records, truth, shoppers=3, claimed=0)
    # a gave up, b never finished, the third never sent anything
    assert found == {"shoppers_without_answer": 3}


def test_a_read_back_that_differs_and_counters_that_lag_are_caught() -> None:
    records = [
        _claim("a", 201, at=0.0, code="X1"),
        {**_claim("a", 200, at=0.1), "kind": "me", "codes": ["X9"]},
        _journey("a", "code", at=0.0, code="X1"),
    ]
    truth = _truth({"a": ["X1"]}, codes_total=1)
    found = _violations(records, truth, shoppers=1, claimed=0)
    assert found == {"responses_disagree_with_db": 1, "counters_disagree": 1}


# --- figures and the page ---------------------------------------------------------------------


def test_figures_and_series_come_from_the_records() -> None:
    records = [
        {**_claim("a", 503, at=0.0), "ms": 100.0},
        {**_claim("a", 201, at=1.2, code="X1"), "ms": 300.0, "attempt": 2},
        {**_claim("b", 410, at=1.4), "ms": 200.0},
        _journey("a", "code", at=0.0, code="X1"),
        _journey("b", "sold_out", at=1.4),
    ]
    figures = report.analyse(records, claimed_at=[T0 + 1.4], codes_total=1)
    assert figures["requests"] == 3
    assert figures["claim_status"] == {"201": 1, "410": 1, "503": 1}
    assert figures["latency_ms"]["claim"]["p50"] == 200.0
    assert figures["latency_ms"]["claim"]["max"] == 300.0
    series = figures["series"]
    assert series["seconds"] == [0, 1]
    assert series["requests"]["all"] == [1, 2]
    assert series["remaining"] == [1, 0]
    assert series["claim_answers"]["503 contended"] == [1, 0]
    assert series["claim_answers"]["201 new code"] == [0, 1]
    assert series["shoppers_answered"][-1] == 2


def test_the_page_is_self_contained(tmp_path: Path) -> None:
    records = [_claim("a", 201, at=0.0, code="X1"), _journey("a", "code", at=0.0, code="X1")]
    summary = {
        "scenario": {"shoppers": 1, "codes": 1, "pattern": "burst", "campaign_id": "c"},
        "figures": report.analyse(records, claimed_at=[T0], codes_total=1),
        "violations": 0,
        "audit": [{"name": "x", "title": "x", "description": "<b>", "count": 0, "examples": []}],
        "targets": [],
        "cpu": {"cores": 2, "components": {"threads": {}}, "series": {"threads": [10.0, 20.0]}},
    }
    json_path, html_path = report.write_report(summary, tmp_path)
    page = html_path.read_text()
    assert json.loads(json_path.read_text())["violations"] == 0
    assert page.count("<svg") == 2  # the overview and the CPU chart
    assert "&lt;b&gt;" in page  # text is escaped
    assert "<script" not in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
