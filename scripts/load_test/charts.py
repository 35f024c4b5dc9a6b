"""The load test's charts, drawn with matplotlib: the overview (requests per second, claim
latency percentiles, claim answers by status, the pool draining) and CPU by component. Each is
rendered as SVG to inline in the HTML report, or as PNG for the README."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.typing import RcKeyType

# Claim answers, in stacking order, with their colours.
STATUS_GROUPS: tuple[tuple[str, str], ...] = (
    ("201 new code", "#2e7d32"),
    ("200 already held", "#81c784"),
    ("410 sold out", "#546e7a"),
    ("503 contended", "#ef6c00"),
    ("429 waiting room", "#8e24aa"),
    ("no response (connection dropped)", "#ffb300"),
    ("other status", "#c62828"),
)
KINDS = {  # request kind: label, colour
    "all": ("all", "#263238"),
    "campaign": ("campaign", "#1e88e5"),
    "claim": ("claim", "#2e7d32"),
    "double_click": ("double click", "#8e24aa"),
    "me": ("claims/me", "#ef6c00"),
}
PERCENTILE_COLOURS = {"p50": "#1e88e5", "p95": "#ef6c00", "p99": "#c62828"}
CPU_COLOURS = ("#1e88e5", "#2e7d32", "#ef6c00", "#8e24aa", "#00838f", "#6d4c41", "#c0ca33")
REST = "rest of the machine"
SMALL_SHARE = 2.0  # components under this mean % of one core are drawn together
DEFAULT_P95_TARGET_MS = 1000.0
# No creator, date or RDF block: the page stays the same for the same run, and links nowhere.
NO_METADATA = {"Creator": None, "Date": None, "Format": None, "Type": None}
SINCE = "seconds since the first request"
STYLE: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "font.size": 9,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
}


def headline(summary: Mapping[str, Any]) -> str:
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


def _gaps(values: Sequence[float | None]) -> list[float]:
    """None (no request that second) leaves a gap in a line."""
    return [math.nan if v is None else float(v) for v in values]


def _finish(ax: Axes, title: str, y_label: str, *, seconds: int, x_label: str = SINCE) -> None:
    ax.set_title(title, loc="left")
    ax.set_xlim(0, max(seconds, 1))  # every panel on the same time axis
    ax.set_ylabel(y_label)
    ax.set_xlabel(x_label)
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", color="#e0e0e0")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8, framealpha=0.8)


@dataclass(frozen=True)
class Run:
    """What the overview's panels draw: the per-second series of analyse()."""

    series: Mapping[str, Any]
    x: list[float]  # the middle of each second since the first request
    p95_target_ms: float


def _requests(ax: Axes, run: Run) -> None:
    requests = run.series.get("requests") or {}
    for kind, (label, colour) in KINDS.items():
        values = requests.get(kind)
        if values and any(values):
            width = 2.2 if kind == "all" else 1.4
            ax.plot(run.x, values, label=label, color=colour, linewidth=width)


def _latency(ax: Axes, run: Run) -> None:
    latency = run.series.get("claim_latency_ms") or {}
    target = run.p95_target_ms
    ax.axhline(target, color="#c62828", linestyle="--", label=f"p95 target ({target:g} ms)")
    for p, colour in PERCENTILE_COLOURS.items():
        if p in latency:
            ax.plot(run.x, _gaps(latency[p]), label=p, color=colour, linewidth=1.6)


def _answers(ax: Axes, run: Run) -> None:
    answers = run.series.get("claim_answers") or {}
    base = [0] * len(run.x)
    for label, colour in STATUS_GROUPS:
        values = answers.get(label) or [0] * len(run.x)
        if any(values):
            ax.bar(run.x, values, width=0.85, bottom=base, color=colour, label=label)
            base = [b + v for b, v in zip(base, values, strict=True)]


def _pool(ax: Axes, run: Run) -> None:
    left, answered = run.series.get("remaining") or [], run.series.get("shoppers_answered") or []
    ax.plot(run.x, left, label="codes left", color="#2e7d32", linewidth=2.2)
    ax.plot(run.x, answered, label="shoppers answered (cumulative)", color="#1e88e5")


# The overview's panels, left to right and top to bottom: how to draw, title, y axis.
PANELS: tuple[tuple[Callable[[Axes, Run], None], str, str], ...] = (
    (_requests, "Requests per second", "requests / s (by start)"),
    (_latency, "Claim latency percentiles (requests started that second)", "milliseconds"),
    (_answers, "Claim answers per second, by status", "answers / s (by arrival)"),
    (_pool, "Pool draining: codes left (database claim times)", "codes / shoppers"),
)


def overview_figure(summary: Mapping[str, Any]) -> Figure:
    """The main chart: four panels (requests/s, claim latency, answers by status, pool)."""
    series = (summary.get("figures") or {}).get("series") or {}
    target = (summary.get("scenario") or {}).get("p95_target_ms") or DEFAULT_P95_TARGET_MS
    run = Run(series, [second + 0.5 for second in series.get("seconds") or []], float(target))
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(12.8, 8.2), layout="constrained")
        for ax, (draw, title, y_label) in zip(figure.subplots(2, 2).flat, PANELS, strict=True):
            draw(ax, run)
            _finish(ax, title, y_label, seconds=len(run.x))
        figure.suptitle(headline(summary), x=0.01, ha="left", fontweight="bold", fontsize=12)
    return figure


def _cpu_layers(cpu: Mapping[str, Any]) -> list[tuple[str, str, list[float]]]:
    """The components worth a layer of their own, the small ones summed, the rest last."""
    samples = cpu.get("series") or {}
    components = cpu.get("components") or {}
    names = [n for n in components if samples.get(n) and n != REST]
    if not names:
        return []
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
    return layers


def cpu_figure(summary: Mapping[str, Any]) -> Figure | None:
    """CPU by component, stacked, one sample per second; None without CPU figures."""
    cpu = summary.get("cpu") or {}
    layers = _cpu_layers(cpu)
    if not layers:
        return None
    cores = int(cpu.get("cores") or 1)
    x = [second + 0.5 for second in range(len(layers[0][2]))]
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(12.8, 3.6), layout="constrained")
        ax = figure.subplots()
        ax.stackplot(
            x,
            *(values for _, _, values in layers),
            labels=[label for label, _, _ in layers],
            colors=[colour for _, colour, _ in layers],
            alpha=0.85,
        )
        ax.axhline(
            cores * 100, color="#263238", linestyle="--", linewidth=1, label=f"{cores} cores"
        )
        title = f"CPU by component during the run (100 % = one core; {cores} cores)"
        _finish(
            ax, title, "% of one core", seconds=len(x), x_label="seconds since the shoppers started"
        )
    return figure


def inline_svg(figure: Figure) -> str:
    """The figure as an <svg> element for an HTML page: no XML prolog, and SVG 2's `href`
    (the HTML parser needs no XLink namespace for it)."""
    buffer = io.StringIO()
    with matplotlib.rc_context(STYLE):
        figure.savefig(buffer, format="svg", metadata=NO_METADATA)
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    return text.replace(' xmlns:xlink="http://www.w3.org/1999/xlink"', "").replace(
        "xlink:href", "href"
    )


def save_png(figure: Figure, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="png", dpi=125, facecolor="white")
