"""The load test's figures and its report: a self-contained HTML page and a JSON summary.

The load test (scripts/load_test/cli.py) calls `analyse` on the recorded responses (one JSONL
line per response, see scripts/load_test/shoppers.py) and `write_report` with the finished
summary. Run on its own, this module re-renders the page of an earlier run and can export its
main chart as PNG:

    .venv/bin/python -m scripts.load_test.report reports/loadtest-<stamp>/summary.json \\
        [--html OUT.html] [--png docs/loadtest-chart.png]

The charts (scripts/load_test/charts.py, matplotlib) are inlined as SVG: requests per second,
claim latency percentiles per second, claim answers by status per second, the pool draining
(codes left per second, from the claims' timestamps in the database) and CPU by component.
"""

from __future__ import annotations

import argparse
import html
import itertools
import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devkit.measure import latency_summary, percentiles
from scripts.load_test import charts
from scripts.load_test.charts import STATUS_GROUPS

Record = dict[str, Any]

CLAIM_KINDS = ("claim", "double_click")


# --- reading the records ----------------------------------------------------------------------


def load_records(path: Path) -> list[Record]:
    """Every complete JSON line of the file (a line cut by a crash is skipped)."""
    records: list[Record] = []
    if not path.exists():
        return records
    with path.open("rb") as handle:
        for raw in handle:
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def status_group(status: int) -> str:
    """The chart's group of a claim answer's HTTP status."""
    labels = {201: 0, 200: 1, 410: 2, 503: 3, 429: 4, 0: 5}
    return STATUS_GROUPS[labels.get(status, 6)][0]


# --- figures and series -----------------------------------------------------------------------


def analyse(
    records: Sequence[Record], *, claimed_at: Sequence[float], codes_total: int
) -> dict[str, Any]:
    """Figures of the run and its per-second series.

    claimed_at: the claim documents' timestamps (epoch seconds) from the database, for the pool
    draining; codes_total: the pool's size before the sale.
    """
    requests = [r for r in records if r.get("kind") != "journey"]
    journeys = [r for r in records if r.get("kind") == "journey"]
    if not requests:
        return {"requests": 0, "series": {"seconds": []}}
    t0 = min(float(r["t"]) for r in requests)
    ends = [float(r["t"]) + float(r["ms"]) / 1000 for r in requests]
    t_end = max(ends)
    claims = [r for r in requests if r.get("kind") in CLAIM_KINDS]

    by_kind = Counter(str(r.get("kind")) for r in requests)
    by_status = Counter(str(r.get("status")) for r in claims)
    latency = {
        "all": latency_summary(float(r["ms"]) for r in requests),
        "claim": latency_summary(float(r["ms"]) for r in claims),
        **{
            kind: latency_summary(float(r["ms"]) for r in requests if r.get("kind") == kind)
            for kind in ("campaign", "me")
        },
    }
    answered = [
        j for j in journeys if j.get("outcome") in ("code", "sold_out") and j.get("answered_at")
    ]
    time_to_answer = [
        (float(j["answered_at"]) - float(j["first_claim_at"])) * 1000
        for j in answered
        if j.get("first_claim_at")
    ]
    latency["time_to_answer"] = latency_summary(time_to_answer)
    latency["journey"] = latency_summary(float(j["ms"]) for j in journeys)
    last_answer = max((float(j["answered_at"]) for j in answered), default=None)
    first_arrival = min((float(j["t"]) for j in journeys), default=t0)
    last_arrival = max((float(j["t"]) for j in journeys), default=t0)
    new_codes = sorted(float(r["t"]) + float(r["ms"]) / 1000 for r in claims if r["status"] == 201)

    seconds = math.floor(t_end - t0) + 1
    series = _series(
        requests,
        claims,
        journeys,
        t0=t0,
        seconds=seconds,
        claimed_at=claimed_at,
        codes_total=codes_total,
    )
    peak = max(series["requests"]["all"], default=0)
    return {
        "requests": len(requests),
        "by_kind": dict(by_kind),
        "claim_status": dict(sorted(by_status.items())),
        "latency_ms": latency,
        "first_request_at": _iso(t0),
        "last_response_at": _iso(t_end),
        "run_seconds": round(t_end - t0, 2),
        "arrival_seconds": round(last_arrival - first_arrival, 2),
        "sale_seconds": round(last_answer - t0, 2) if last_answer is not None else None,
        "last_new_code_seconds": round(new_codes[-1] - t0, 2) if new_codes else None,
        "mean_rps": round(len(requests) / max(t_end - t0, 1e-9), 1),
        "peak_rps": peak,
        "t0": t0,
        "series": series,
    }


def _per_second(times: Iterable[float], second: Callable[[float], int], seconds: int) -> list[int]:
    counts = [0] * seconds
    for at in times:
        counts[second(at)] += 1
    return counts


def _series(
    requests: Sequence[Record],
    claims: Sequence[Record],
    journeys: Sequence[Record],
    *,
    t0: float,
    seconds: int,
    claimed_at: Sequence[float],
    codes_total: int,
) -> dict[str, Any]:
    def second(at: float) -> int:
        return min(max(int(at - t0), 0), seconds - 1)

    rps = {"all": _per_second((float(r["t"]) for r in requests), second, seconds)}
    for kind in ("campaign", "claim", "double_click", "me"):
        started = (float(r["t"]) for r in requests if r.get("kind") == kind)
        rps[kind] = _per_second(started, second, seconds)

    buckets: defaultdict[int, list[float]] = defaultdict(list)
    for r in claims:
        buckets[second(float(r["t"]))].append(float(r["ms"]))
    lat: dict[str, list[float | None]] = {p: [None] * seconds for p in ("p50", "p95", "p99")}
    for s, values in buckets.items():
        for p, value in percentiles(values).items():
            lat[f"p{p}"][s] = round(value, 1)

    answers = {
        label: _per_second(
            (
                float(r["t"]) + float(r["ms"]) / 1000
                for r in claims
                if status_group(r["status"]) == label
            ),
            second,
            seconds,
        )
        for label, _ in STATUS_GROUPS
    }
    claimed = _per_second(claimed_at, second, seconds)
    answered = _per_second(
        (
            float(j["answered_at"])
            for j in journeys
            if j.get("outcome") in ("code", "sold_out") and j.get("answered_at")
        ),
        second,
        seconds,
    )
    return {
        "seconds": list(range(seconds)),
        "requests": rps,
        "claim_latency_ms": lat,
        "claim_answers": answers,
        "remaining": [codes_total - n for n in itertools.accumulate(claimed)],
        "shoppers_answered": list(itertools.accumulate(answered)),
    }


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


# --- HTML -------------------------------------------------------------------------------------


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


CSS = """
body { font-family: DejaVu Sans, Helvetica, Arial, sans-serif; color: #263238; margin: 24px;
       max-width: 1320px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 28px; }
.verdict { display: inline-block; padding: 4px 10px; border-radius: 4px; color: #fff;
           font-weight: bold; }
.ok { background: #2e7d32; } .bad { background: #c62828; } .warn { background: #ef6c00; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #cfd8dc; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eceff1; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.violation td { background: #ffebee; } tr.pass td { background: #f1f8e9; }
code, .mono { font-family: DejaVu Sans Mono, monospace; font-size: 12px; }
.muted { color: #607d8b; font-size: 12px; }
svg { max-width: 100%; height: auto; border: 1px solid #eceff1; }
"""


def _table(
    header: Sequence[str], rows: Iterable[Sequence[object]], classes: Sequence[str] = ()
) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if i < len(classes) and classes[i] else ""
        cells = "".join(
            f'<td class="num">{_esc(_num(c))}</td>'
            if isinstance(c, int | float) and not isinstance(c, bool)
            else f"<td>{c if isinstance(c, Markup) else _esc(c)}</td>"
            for c in row
        )
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


class Markup(str):
    """Text already escaped for HTML."""


def _num(value: float) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.1f}" if abs(value) < 1e6 else f"{value:,.0f}"


def _latency_rows(latency: Mapping[str, Any]) -> list[list[object]]:
    names = {
        "claim": "POST claims (every attempt)",
        "campaign": "GET campaign",
        "me": "GET claims/me",
        "all": "all requests",
        "time_to_answer": "shopper: first claim sent → final answer (retries included)",
        "journey": "shopper: whole journey",
    }
    rows: list[list[object]] = []
    for key, label in names.items():
        lat = latency.get(key) or {}
        rows.append(
            [label, lat.get("count", 0)]
            + [lat.get(p) if lat.get(p) is not None else "-" for p in ("p50", "p95", "p99", "max")]
        )
    return rows


def render_html(summary: Mapping[str, Any]) -> str:
    scenario = summary.get("scenario") or {}
    figures = summary.get("figures") or {}
    violations = int(summary.get("violations") or 0)
    targets = summary.get("targets") or []
    missed = [t for t in targets if not t.get("met")]
    if violations:
        verdict = f'<span class="verdict bad">{violations:,} violations</span>'
    elif missed:
        verdict = f'<span class="verdict warn">no violations; {len(missed)} target(s) missed</span>'
    else:
        verdict = '<span class="verdict ok">no violations; every target met</span>'

    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>codedrop load test {_esc(summary.get('started_at', ''))}</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>codedrop flash-sale load test</h1>",
        f"<p>{verdict} <span class=muted>started {_esc(summary.get('started_at', ''))} · "
        f"campaign <code>{_esc(scenario.get('campaign_id', ''))}</code> · "
        f"{_esc(summary.get('host', ''))}</span></p>",
        charts.inline_svg(charts.overview_figure(summary)),
        "<h2>Audit (truth read back from Firestore and the API)</h2>",
    ]
    checks = summary.get("audit") or []
    parts.append(
        _table(
            ["check", "violations", "what it means", "examples"],
            (
                [
                    c.get("title"),
                    c.get("count", 0),
                    c.get("description", ""),
                    Markup("<br>".join(f"<code>{_esc(e)}</code>" for e in c.get("examples", []))),
                ]
                for c in checks
            ),
            ["violation" if c.get("count") else "pass" for c in checks],
        )
    )
    db = summary.get("database") or {}
    parts.append(
        "<p class=muted>Database after the sale: "
        + ", ".join(
            f"{k.replace('_', ' ')} {_num(v)}"
            for k, v in db.items()
            if isinstance(v, int) and not isinstance(v, bool)
        )
        + "</p>"
    )
    parts.append("<h2>Targets</h2>")
    parts.append(
        _table(
            ["target", "goal", "measured", "met"],
            (
                [t.get("name"), t.get("goal"), t.get("value"), "yes" if t.get("met") else "NO"]
                for t in targets
            ),
            ["pass" if t.get("met") else "violation" for t in targets],
        )
    )
    shoppers = summary.get("shoppers") or {}
    parts.append("<h2>Shoppers and answers</h2>")
    parts.append(
        _table(
            ["shoppers", "count"],
            [[k.replace("_", " "), v] for k, v in shoppers.items()],
        )
    )
    parts.append(
        _table(
            ["claim answers (every attempt)", "count"],
            [
                [f"{k}: {status_group(int(k))}" if k.isdigit() else k, v]
                for k, v in (figures.get("claim_status") or {}).items()
            ]
            + [["requests by kind: " + k, v] for k, v in (figures.get("by_kind") or {}).items()],
        )
    )
    parts.append("<h2>Latency (ms)</h2>")
    parts.append(
        _table(
            ["what", "count", "p50", "p95", "p99", "max"],
            _latency_rows(figures.get("latency_ms") or {}),
        )
    )
    parts.append(
        _table(
            ["time", "seconds"],
            [
                ["first request → last shopper answered", figures.get("sale_seconds", "-")],
                ["first request → last new code issued", figures.get("last_new_code_seconds", "-")],
                ["first → last shopper arrival", figures.get("arrival_seconds", "-")],
                ["first request → last response", figures.get("run_seconds", "-")],
                ["mean requests per second", figures.get("mean_rps", "-")],
                ["peak requests per second", figures.get("peak_rps", "-")],
            ],
        )
    )
    cpu = summary.get("cpu") or {}
    cpu_chart = charts.cpu_figure(summary)
    if cpu_chart is not None:
        parts.append("<h2>Where the CPU went</h2>")
        parts.append(charts.inline_svg(cpu_chart))
        parts.append(
            _table(
                [
                    "component",
                    "CPU seconds",
                    "mean % of one core",
                    "share of machine %",
                    "CPU ms per shopper",
                ],
                (
                    [
                        name,
                        c.get("cpu_seconds"),
                        c.get("mean_percent"),
                        c.get("machine_share"),
                        c.get("ms_per_shopper", "-"),
                    ]
                    for name, c in (cpu.get("components") or {}).items()
                ),
            )
        )
        if cpu.get("note"):
            parts.append(f"<p class=muted>{_esc(cpu['note'])}</p>")
    counters = summary.get("counters") or {}
    if counters:
        parts.append("<h2>Usage counters after they settled</h2>")
        parts.append(f"<pre class=mono>{_esc(json.dumps(counters, indent=2, default=str))}</pre>")
    parts.append("<h2>Settings</h2>")
    parts.append(
        _table(["setting", "value"], [[k, json.dumps(v, default=str)] for k, v in scenario.items()])
    )
    files = summary.get("files") or {}
    if files:
        parts.append(
            "<p class=muted>Files: "
            + ", ".join(f'<a href="{_esc(v)}">{_esc(k)}</a>' for k, v in files.items())
            + "</p>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(summary: Mapping[str, Any], directory: Path) -> tuple[Path, Path]:
    """summary.json and report.html in directory."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / "summary.json"
    json_path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    html_path = directory / "report.html"
    html_path.write_text(render_html(summary))
    return json_path, html_path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.load_test.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("summary", type=Path, help="summary.json of a load test run")
    parser.add_argument("--html", type=Path, help="write the page here (default: beside it)")
    parser.add_argument("--png", type=Path, help="export the main chart as PNG here")
    args = parser.parse_args(argv)
    summary = json.loads(args.summary.read_text())
    out = args.html or args.summary.with_name("report.html")
    out.write_text(render_html(summary))
    print(f"wrote {out}")
    if args.png:
        charts.save_png(charts.overview_figure(summary), args.png)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
