"""docs/benchmarks.md is generated from the benchmarks' JSON (scripts/bench/report.py)."""

from __future__ import annotations

import json
from pathlib import Path

from scripts.bench import report


def test_the_page_is_what_the_json_files_say() -> None:
    assert report.main(["--check"]) == 0


def test_a_run_is_shown_with_its_command_date_commit_and_machine(tmp_path: Path) -> None:
    figures = tmp_path / "claims.json"
    figures.write_text(
        json.dumps(
            {
                "command": "python -m scripts.bench.claims --processes 2",
                "measured_at": "2026-11-27T12:00:00+00:00",
                "commit": "abc123",
                "machine": {"cpus": 2, "cpu_model": "x", "memory_gib": 24, "load_average": [1]},
                "ratio": 0.61234,
                "runs": [{"instances": 2, "seconds": 7.4, "reads": {"per_code": 2.24}}],
            }
        )
    )

    page = report.render([figures])

    assert "## claims" in page
    assert "`python -m scripts.bench.claims --processes 2`" in page
    assert "2026-11-27T12:00:00+00:00, commit `abc123`" in page
    assert "| ratio | 0.6123 |" in page
    assert "| instances | seconds | reads.per_code |" in page
    assert "| 2 | 7.4 | 2.24 |" in page


def test_the_readme_quotes_the_floor_ratios_of_the_run_it_names() -> None:
    comparison = {
        "scenario": {"shoppers": 10000, "codes": 5000},
        "codedrop / floor": {
            "wall time (sale answered in)": 1.914,
            "CPU per shopper, the service's processes, counting included": 1.987,
        },
        "started_at": "2026-11-28T03:40:00+00:00",
        "commit": "0123456789abcdef",
        "machine": {"nproc": 2},
    }

    paragraph = " ".join(report.performance(comparison, "docs/bench/x.json").split())

    assert "**1.91x the floor's wall time and 1.99x its CPU per shopper**" in paragraph
    assert "`docs/bench/x.json`, 2026-11-28, commit 0123456789ab, 2 cores" in paragraph
