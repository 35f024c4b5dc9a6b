"""The load test's figures and its report: a self-contained HTML page and a JSON summary.

scripts/loadtest.py calls `analyse` on the recorded responses (one JSONL line per response, see
scripts/locustfile.py) and `write_report` with the finished summary. Run on its own, this module
re-renders the page of an earlier run and can export its main chart as PNG:

    .venv/bin/python scripts/loadtest_report.py reports/loadtest-<stamp>/summary.json \\
        [--html OUT.html] [--png docs/loadtest-chart.png]

The charts are hand-written inline SVG (no plotting dependency): requests per second, claim
latency percentiles per second, claim answers by status per second, the pool draining (codes
left per second, from the claims' timestamps in the database) and CPU by component. The PNG is
the SVG rendered by `rsvg-convert` (Debian: librsvg2-bin), else by headless Chromium.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

Record = dict[str, Any]

CLAIM_KINDS = ("claim", "double_click")
# Claim answers, in stacking order, with their chart colours.
STATUS_GROUPS: tuple[tuple[str, str], ...] = (
    ("201 new code", "#2e7d32"),
    ("200 already held", "#81c784"),
    ("410 sold out", "#546e7a"),
    ("503 contended", "#ef6c00"),
    ("429 waiting room", "#8e24aa"),
    ("no response (connection dropped)", "#ffb300"),
    ("other status", "#c62828"),
)
KIND_COLOURS = {
    "all": "#263238",
    "campaign": "#1e88e5",
    "claim": "#2e7d32",
    "double_click": "#8e24aa",
    "me": "#ef6c00",
}
PERCENTILE_COLOURS = {"p50": "#1e88e5", "p95": "#ef6c00", "p99": "#c62828"}
CPU_COLOURS = (
    "#1e88e5",
    "#2e7d32",
    "#ef6c00",
    "#8e24aa",
    "#00838f",
    "#6d4c41",
    "#c0ca33",
    "#d81b60",
    "#546e7a",
    "#9e9e9e",
)
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"


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
    labels = {201: 0, 200: 1, 410: 2, 503: 3, 429: 4, 0: 5}
    return STATUS_GROUPS[labels.get(status, 6)][0]


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence (q in 0..100)."""
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def latency_summary(values: Iterable[float]) -> dict[str, float | int | None]:
    ordered = sorted(values)
    if not ordered:
        return {"count": 0, "p50": None, "p95": None, "p99": None, "max": None, "mean": None}
    return {
        "count": len(ordered),
        "p50": round(percentile(ordered, 50), 1),
        "p95": round(percentile(ordered, 95), 1),
        "p99": round(percentile(ordered, 99), 1),
        "max": round(ordered[-1], 1),
        "mean": round(sum(ordered) / len(ordered), 1),
    }


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

    kinds = ("campaign", "claim", "double_click", "me")
    rps: dict[str, list[int]] = {k: [0] * seconds for k in ("all", *kinds)}
    for r in requests:
        s = second(float(r["t"]))
        rps["all"][s] += 1
        if r.get("kind") in rps:
            rps[str(r["kind"])][s] += 1

    buckets: defaultdict[int, list[float]] = defaultdict(list)
    for r in claims:
        buckets[second(float(r["t"]))].append(float(r["ms"]))
    lat: dict[str, list[float | None]] = {p: [None] * seconds for p in ("p50", "p95", "p99")}
    for s, values in buckets.items():
        values.sort()
        for p in lat:
            lat[p][s] = round(percentile(values, float(p[1:])), 1)

    answers: dict[str, list[int]] = {label: [0] * seconds for label, _ in STATUS_GROUPS}
    for r in claims:
        end = float(r["t"]) + float(r["ms"]) / 1000
        answers[status_group(int(r["status"]))][second(end)] += 1

    claimed_per_second = [0] * seconds
    for at in claimed_at:
        claimed_per_second[second(at)] += 1
    remaining: list[int] = []
    left = codes_total
    for count in claimed_per_second:
        left -= count
        remaining.append(left)

    answered_per_second = [0] * seconds
    for j in journeys:
        if j.get("outcome") in ("code", "sold_out") and j.get("answered_at"):
            answered_per_second[second(float(j["answered_at"]))] += 1
    answered_total: list[int] = []
    total = 0
    for count in answered_per_second:
        total += count
        answered_total.append(total)

    return {
        "seconds": list(range(seconds)),
        "requests": rps,
        "claim_latency_ms": lat,
        "claim_answers": answers,
        "remaining": remaining,
        "shoppers_answered": answered_total,
    }


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


# --- SVG --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Box:
    x: float
    y: float
    w: float
    h: float


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def nice_max(value: float) -> tuple[float, float]:
    """An axis maximum ≥ value and its tick step (1, 2 or 5 times a power of ten; 4-5 ticks)."""
    if value <= 0 or math.isnan(value):
        return 1.0, 0.25
    raw = value / 4
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        step = factor * power
        if step * 4 >= value:
            return step * math.ceil(value / step), step
    return value, value / 4  # unreachable


def _fmt(value: float) -> str:
    if abs(value) >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


class Panel:
    """One chart: axes and grid in a box, then lines or stacked bars on it."""

    LEFT, RIGHT, TOP, BOTTOM = 58.0, 14.0, 40.0, 34.0

    def __init__(
        self,
        box: Box,
        *,
        title: str,
        x_max: float,
        y_max: float,
        y_label: str,
        x_label: str = "seconds since the first request",
    ) -> None:
        self.box = box
        self.title = title
        self.x_max = max(x_max, 1.0)
        self.y_max, self.y_step = nice_max(y_max)
        self.y_label = y_label
        self.x_label = x_label
        self.parts: list[str] = []
        self.legend: list[tuple[str, str]] = []
        self.plot = Box(
            box.x + self.LEFT,
            box.y + self.TOP,
            box.w - self.LEFT - self.RIGHT,
            box.h - self.TOP - self.BOTTOM,
        )

    def px(self, x: float) -> float:
        return self.plot.x + x / self.x_max * self.plot.w

    def py(self, y: float) -> float:
        return self.plot.y + self.plot.h - y / self.y_max * self.plot.h

    def _axes(self) -> str:
        p = self.plot
        out = [
            f'<text x="{self.box.x + 4:.1f}" y="{self.box.y + 16:.1f}" font-size="14" '
            f'font-weight="bold">{_esc(self.title)}</text>',
            f'<rect x="{p.x:.1f}" y="{p.y:.1f}" width="{p.w:.1f}" height="{p.h:.1f}" '
            'fill="#fafafa" stroke="#cfd8dc"/>',
        ]
        ticks = round(self.y_max / self.y_step)
        for i in range(ticks + 1):
            value = i * self.y_step
            y = self.py(value)
            out.append(
                f'<line x1="{p.x:.1f}" x2="{p.x + p.w:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                'stroke="#e0e0e0"/>'
            )
            out.append(
                f'<text x="{p.x - 6:.1f}" y="{y + 4:.1f}" font-size="11" '
                f'text-anchor="end">{_fmt(value)}</text>'
            )
        x_max, x_step = nice_max(self.x_max)
        del x_max
        value = 0.0
        while value <= self.x_max + 1e-9:
            x = self.px(value)
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{p.y + p.h:.1f}" y2="{p.y + p.h + 4:.1f}" '
                'stroke="#90a4ae"/>'
            )
            out.append(
                f'<text x="{x:.1f}" y="{p.y + p.h + 16:.1f}" font-size="11" '
                f'text-anchor="middle">{_fmt(value)}</text>'
            )
            value += x_step
        out.append(
            f'<text x="{p.x + p.w / 2:.1f}" y="{self.box.y + self.box.h - 4:.1f}" '
            f'font-size="11" fill="#546e7a" text-anchor="middle">{_esc(self.x_label)}</text>'
        )
        cx, cy = self.box.x + 12, p.y + p.h / 2
        out.append(
            f'<text x="{cx:.1f}" y="{cy:.1f}" font-size="11" fill="#546e7a" '
            f'text-anchor="middle" transform="rotate(-90 {cx:.1f} {cy:.1f})">'
            f"{_esc(self.y_label)}</text>"
        )
        return "\n".join(out)

    def _legend(self) -> str:
        out: list[str] = []
        x = self.plot.x
        y = self.box.y + 30
        for label, colour in self.legend:
            out.append(
                f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" fill="{colour}"/>'
            )
            out.append(f'<text x="{x + 14:.1f}" y="{y:.1f}" font-size="11">{_esc(label)}</text>')
            x += 24 + 6.4 * len(label)
        return "\n".join(out)

    def line(
        self, values: Sequence[float | None], *, label: str, colour: str, width: float = 1.8
    ) -> None:
        """A line through the per-second values (None leaves a gap)."""
        self.legend.append((label, colour))
        segment: list[str] = []
        segments: list[list[str]] = []
        for i, value in enumerate(values):
            if value is None:
                if segment:
                    segments.append(segment)
                    segment = []
                continue
            segment.append(f"{self.px(i + 0.5):.1f},{self.py(min(value, self.y_max)):.1f}")
        if segment:
            segments.append(segment)
        for points in segments:
            if len(points) == 1:
                x, y = points[0].split(",")
                self.parts.append(f'<circle cx="{x}" cy="{y}" r="2" fill="{colour}"/>')
            else:
                self.parts.append(
                    f'<polyline fill="none" stroke="{colour}" stroke-width="{width}" '
                    f'stroke-linejoin="round" points="{" ".join(points)}"/>'
                )

    def stacked_bars(self, layers: Sequence[tuple[str, str, Sequence[int]]]) -> None:
        n = max((len(v) for _, _, v in layers), default=0)
        width = self.plot.w / self.x_max * 0.85
        base = [0] * n
        for label, colour, values in layers:
            if not any(values):
                continue
            self.legend.append((label, colour))
            for i, value in enumerate(values):
                if not value:
                    continue
                top, bottom = self.py(base[i] + value), self.py(base[i])
                self.parts.append(
                    f'<rect x="{self.px(i) + width * 0.08:.1f}" y="{top:.1f}" '
                    f'width="{width:.1f}" height="{max(bottom - top, 0.5):.1f}" '
                    f'fill="{colour}"/>'
                )
                base[i] += value

    def stacked_areas(self, layers: Sequence[tuple[str, str, Sequence[float]]]) -> None:
        n = max((len(v) for _, _, v in layers), default=0)
        base = [0.0] * n
        for label, colour, values in layers:
            if not any(values):
                continue
            self.legend.append((label, colour))
            top = [base[i] + values[i] for i in range(n)]
            upper = [
                f"{self.px(i + 0.5):.1f},{self.py(min(top[i], self.y_max)):.1f}" for i in range(n)
            ]
            lower = [
                f"{self.px(i + 0.5):.1f},{self.py(min(base[i], self.y_max)):.1f}"
                for i in reversed(range(n))
            ]
            self.parts.append(
                f'<polygon fill="{colour}" fill-opacity="0.85" stroke="none" '
                f'points="{" ".join(upper + lower)}"/>'
            )
            base = top

    def reference(self, value: float, label: str, colour: str = "#c62828") -> None:
        if value > self.y_max:
            return
        y = self.py(value)
        p = self.plot
        self.parts.append(
            f'<line x1="{p.x:.1f}" x2="{p.x + p.w:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="{colour}" stroke-dasharray="6 4"/>'
        )
        self.parts.append(
            f'<text x="{p.x + p.w - 4:.1f}" y="{y - 4:.1f}" font-size="11" fill="{colour}" '
            f'text-anchor="end">{_esc(label)}</text>'
        )

    def svg(self) -> str:
        return "\n".join([self._axes(), *self.parts, self._legend()])


def _svg(width: float, height: float, body: str, *, title: str = "") -> str:
    heading = ""
    if title:
        heading = f'<text x="16" y="26" font-size="17" font-weight="bold">{_esc(title)}</text>\n'
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{FONT}" fill="#263238">\n'
        f'<rect width="100%" height="100%" fill="#ffffff"/>\n{heading}{body}\n</svg>'
    )


def _ms_max(lat: Mapping[str, Sequence[float | None]]) -> float:
    values = [v for series in lat.values() for v in series if v is not None]
    return max(values, default=1.0)


def overview_svg(summary: Mapping[str, Any], *, width: float = 1280, height: float = 820) -> str:
    """The main chart: four panels (requests/s, claim latency, answers by status, pool)."""
    figures = summary.get("figures") or {}
    series = figures.get("series") or {}
    seconds = series.get("seconds") or []
    x_max = float(len(seconds) or 1)
    top = 44.0
    w, h = (width - 24) / 2, (height - top - 8) / 2
    boxes = [
        Box(12, top, w, h),
        Box(12 + w, top, w, h),
        Box(12, top + h, w, h),
        Box(12 + w, top + h, w, h),
    ]
    requests = series.get("requests") or {}
    rps = Panel(
        boxes[0],
        title="Requests per second",
        x_max=x_max,
        y_max=max(requests.get("all") or [1]),
        y_label="requests / s (by start)",
    )
    for kind in ("all", "campaign", "claim", "double_click", "me"):
        values = requests.get(kind)
        if values and any(values):
            label = {"all": "all", "double_click": "double click", "me": "claims/me"}.get(
                kind, kind
            )
            rps.line(
                values, label=label, colour=KIND_COLOURS[kind], width=2.4 if kind == "all" else 1.5
            )

    lat_series = series.get("claim_latency_ms") or {}
    latency = Panel(
        boxes[1],
        title="Claim latency percentiles (requests started that second)",
        x_max=x_max,
        y_max=max(_ms_max(lat_series), 1000.0 * 1.1),
        y_label="milliseconds",
    )
    latency.reference(1000, "1 s target for p95")
    for p in ("p50", "p95", "p99"):
        if p in lat_series:
            latency.line(lat_series[p], label=p, colour=PERCENTILE_COLOURS[p])

    answers_series = series.get("claim_answers") or {}
    stacked = [
        (label, colour, answers_series.get(label) or [0] * len(seconds))
        for label, colour in STATUS_GROUPS
    ]
    peak = max((sum(col) for col in zip(*(v for _, _, v in stacked), strict=False)), default=1)
    answers = Panel(
        boxes[2],
        title="Claim answers per second, by status",
        x_max=x_max,
        y_max=peak,
        y_label="answers / s (by arrival)",
    )
    answers.stacked_bars(stacked)

    scenario = summary.get("scenario") or {}
    codes = int(scenario.get("codes") or 0)
    pool = Panel(
        boxes[3],
        title="Pool draining: codes left (database claim times)",
        x_max=x_max,
        y_max=max(codes, max(series.get("shoppers_answered") or [0]), 1),
        y_label="codes / shoppers",
    )
    pool.line(series.get("remaining") or [], label="codes left", colour="#2e7d32", width=2.4)
    pool.line(
        series.get("shoppers_answered") or [],
        label="shoppers answered (cumulative)",
        colour="#1e88e5",
    )
    body = "\n".join(panel.svg() for panel in (rps, latency, answers, pool))
    return _svg(width, height, body, title=_headline(summary))


def _headline(summary: Mapping[str, Any]) -> str:
    s = summary.get("scenario") or {}
    f = summary.get("figures") or {}
    verdict = "no violations" if summary.get("violations") == 0 else "VIOLATIONS"
    pattern = s.get("pattern")
    if pattern == "ramp":
        pattern = f"ramp over {s.get('ramp_seconds'):g} s"
    p95 = ((f.get("latency_ms") or {}).get("claim") or {}).get("p95")
    sale = f.get("sale_seconds")
    return (
        f"codedrop flash sale: {s.get('shoppers', 0):,} shoppers, {s.get('codes', 0):,} codes, "
        f"{pattern}; answered in {sale if sale is not None else '?'} s, claim p95 "
        f"{p95 if p95 is not None else '?'} ms, {verdict}"
    )


REST = "rest of the machine"
SMALL_SHARE = 2.0  # components under this mean % of one core are drawn together


def cpu_svg(summary: Mapping[str, Any], *, width: float = 1280, height: float = 360) -> str | None:
    cpu = summary.get("cpu") or {}
    samples = cpu.get("series") or {}
    components = cpu.get("components") or {}
    names = [n for n in components if samples.get(n) and n != REST]
    if not names:
        return None
    n = max(len(v) for v in samples.values())

    def padded(name: str) -> list[float]:
        values = [float(v) for v in samples.get(name) or []]
        return values + [0.0] * (n - len(values))

    big = [m for m in names if (components[m].get("mean_percent") or 0) >= SMALL_SHARE]
    small = [m for m in names if m not in big]
    layers = [(m, CPU_COLOURS[i % len(CPU_COLOURS)], padded(m)) for i, m in enumerate(big)]
    if small:
        summed = [sum(column) for column in zip(*(padded(m) for m in small), strict=True)]
        layers.append((f"{len(small)} others of ours", "#6d4c41", summed))
    if samples.get(REST):
        layers.append((REST + " (other sessions)", "#b0bec5", padded(REST)))
    cores = int(cpu.get("cores") or 1)
    panel = Panel(
        Box(12, 10, width - 24, height - 16),
        title=f"CPU by component during the run (100 % = one core; {cores} cores)",
        x_max=float(n),  # one sample per second
        y_max=cores * 100,
        y_label="% of one core",
        x_label="seconds since locust started",
    )
    panel.stacked_areas(layers)
    panel.reference(cores * 100, f"{cores} cores", colour="#263238")
    return _svg(width, height, panel.svg())


# --- HTML -------------------------------------------------------------------------------------

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
        overview_svg(summary),
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
    chart = cpu_svg(summary)
    if chart:
        parts.append("<h2>Where the CPU went</h2>")
        parts.append(chart)
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


# --- PNG --------------------------------------------------------------------------------------


class PngUnavailable(RuntimeError):
    """Neither rsvg-convert nor Chromium is installed."""


def export_png(svg: str, out: Path, *, width: int = 1600) -> str:
    """Render the SVG to a PNG file; returns the tool used."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="codedrop-chart-") as tmp:
        source = Path(tmp) / "chart.svg"
        source.write_text(svg)
        rsvg = shutil.which("rsvg-convert")
        if rsvg:
            subprocess.run(
                [rsvg, "-w", str(width), "-b", "white", "-o", str(out), str(source)],
                check=True,
                timeout=60,
            )
            return "rsvg-convert"
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium:
            size = _svg_size(svg)
            page = Path(tmp) / "chart.html"
            page.write_text(
                "<html><body style='margin:0'>" + svg + "</body></html>", encoding="utf-8"
            )
            subprocess.run(
                [
                    chromium,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--hide-scrollbars",
                    f"--window-size={size[0]},{size[1]}",
                    f"--screenshot={out}",
                    page.as_uri(),
                ],
                check=True,
                timeout=120,
                capture_output=True,
            )
            return "chromium"
    raise PngUnavailable(
        "no SVG renderer: install librsvg2-bin (rsvg-convert) or chromium to export a PNG"
    )


def _svg_size(svg: str) -> tuple[int, int]:
    import re

    match = re.search(r'width="(\d+)" height="(\d+)"', svg)
    return (int(match.group(1)), int(match.group(2))) if match else (1280, 820)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/loadtest_report.py",
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
        try:
            tool = export_png(overview_svg(summary), args.png)
        except PngUnavailable as exc:
            print(f"loadtest_report: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {args.png} ({tool})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
