"""The parent side of a benchmark's phases run in child processes (scripts/bench/phases.py): a
child's answer becomes a row, a failed or short child a problem, and the rows a table and
verdicts."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from scripts.bench import harness, imports, phases
from scripts.bench.phases import ChildSpec
from shared.events import models as events


@dataclass(kw_only=True)
class Scripted(imports.Bench):
    """The import benchmark with its children's answers given instead of run."""

    answers: list[tuple[dict[str, Any], int]] = field(default_factory=list)

    def child(self, spec: ChildSpec) -> tuple[dict[str, Any], int, harness.Phase]:
        answer, code = self.answers.pop(0)
        return answer, code, harness.Phase(emulator_cpu_seconds=0.5, load=(1.0, 2.0))


def scripted(*answers: tuple[dict[str, Any], int]) -> Scripted:
    return Scripted(
        args=argparse.Namespace(rows=2000, json=None, warmup_docs=0),
        emulators=cast(harness.Emulators, None),  # never used: no child is started
        answers=list(answers),
    )


def spec(kind: str, rows: int, committers: int = 4) -> ChildSpec:
    return ChildSpec(
        kind=kind, label=kind, campaign_id="c", rows=rows, log_level=20, committers=committers
    )


def answer(written: int, seconds: float, peak_kib: int, writes: int) -> dict[str, Any]:
    return {
        "written": written,
        "elapsed_seconds": seconds,
        "cpu_seconds": seconds / 2,
        "peak_rss_kib": peak_kib,
        "rss_before_kib": 1024,
        "rss_max_kib": 3072,
        "rpcs": {"documents_written": writes},
        "detail": {"state": "done"},
    }


def test_a_childs_answer_becomes_a_row_with_the_emulators_cpu_and_the_load() -> None:
    bench = scripted((answer(1000, 2.0, 102_400, 1005), 0))

    phase = bench.run("import 1k", spec(imports.IMPORT, 1000))

    assert bench.phases == [phase]
    assert bench.problems == []
    assert (phase.written, phase.per_second, phase.cpu_seconds) == (1000, 500.0, 1.0)
    assert (phase.peak_rss_kib, phase.rss_growth_kib) == (102_400, 2048)
    assert phase.documents_written == 1005
    assert (phase.emulator_cpu_seconds, phase.load, phase.committers) == (0.5, (1.0, 2.0), 4)
    assert phase.detail == {"state": "done", "rss_before_kib": 1024}
    assert phase.error is None


def test_a_failed_or_short_child_is_a_problem_and_a_missed_target() -> None:
    bench = scripted(
        ({"error": "RuntimeError: boom", "after": 1.5}, 1),
        ({}, -9),
        (answer(1999, 2.0, 1024, 1999), 0),
    )

    failed = bench.run("import 1k", spec(imports.IMPORT, 1000))
    killed = bench.run("ceiling batch x4", spec(imports.CEILING, 2000))
    short = bench.run("import 2k", spec(imports.IMPORT, 2000))

    assert (failed.error, failed.elapsed_seconds, failed.written) == ("RuntimeError: boom", 1.5, 0)
    assert killed.error == "child exited with code -9 and no result"
    assert short.error is None
    assert bench.problems == [
        "import 1k: FAILED after 1.5 s: RuntimeError: boom",
        "ceiling batch x4: FAILED after 0.0 s: child exited with code -9 and no result",
        "import 2k: wrote 1999 of 2000",
    ]
    assert imports.verdicts(bench, 4) == [
        ("import 1k failed", None, "completes", False),
        ("ceiling batch x4 failed", None, "completes", False),
        ("importer codes/s", 999.5, ">= 10,000", False),
    ]


def test_the_table_and_the_verdicts_as_printed() -> None:
    bench = scripted(
        (answer(1000, 2.0, 102_400, 1005), 0),
        (answer(2000, 2.0, 107_520, 2010), 0),
        (answer(2000, 1.0, 51_200, 2000), 0),
    )
    bench.run("import 1k", spec(imports.IMPORT, 1000))
    bench.run("import 2k", spec(imports.IMPORT, 2000))
    bench.run("ceiling batch x4", spec(imports.CEILING, 2000))

    table = imports.render_table(bench.phases).splitlines()
    verdicts = phases.render_verdicts(imports.verdicts(bench, 4)).splitlines()

    assert [column.strip() for column in table[0].split("  ") if column] == [
        "phase", "rows", "par", "seconds", "per s", "writes/doc", "peak RSS MiB",
        "RSS growth MiB", "CPU µs/doc", "emulator µs/doc", "load",
    ]  # fmt: skip
    assert table[3].split() == [
        "import", "2k", "2,000", "4", "2.0", "1,000", "1.005", "105.0", "2.0", "500", "250",
        "1.0>2.0",
    ]  # fmt: skip
    assert verdicts == [
        "peak RSS 2k / 1k           1.05  target <= 1.10    met",
        "RSS growth 2k / 1k         1.00  target info",
        "importer codes/s          1,000  target >= 10,000  MISSED",
        "importer / ceiling x4      0.50  target >= 0.80    MISSED",
    ]


def test_sizes_and_per_row_figures_as_shown() -> None:
    assert phases.count(1_000_000) == "1M"
    assert phases.count(100_000) == "100k"
    assert phases.count(1500) == "1500"
    assert phases.per(None, 10) == "-"
    assert phases.per(5, 0) == "-"
    assert phases.per(0.0012, 1000, scale=1e6, digits=0) == "1"


def test_the_memory_publisher_keeps_a_batch_messages_claims_as_events() -> None:
    """The benches read what a sale published as events (the holds bench counts them again):
    a `coupon.claimed.batch` message is its claims, not one event of an unknown type."""
    claims = [
        events.CouponClaimed(
            event_id=f"claimed.sale.c{n}",
            campaign_id="sale",
            occurred_at=datetime(2026, 11, 28, tzinfo=UTC),
            coupon_id=f"p{n}",
            user_id=f"u{n}",
            claim_id=f"c{n}",
        )
        for n in range(3)
    ]
    publisher = harness.MemoryPublisher()

    publisher.publish("topic", events.encode_batch(claims[:2]), type=events.CLAIMED_BATCH)
    publisher.publish("topic", events.encode_event(claims[2]), type="coupon.claimed")

    assert [events.event_from_dict(e) for e in publisher.events] == claims
