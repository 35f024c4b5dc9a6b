"""Figures the benchmarks and the load test share: percentiles, CPU time and memory of processes.

Percentiles are `statistics.quantiles` with the inclusive method (linear interpolation between
closest ranks, numpy's default), everywhere. CPU time and RSS come from psutil.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

import psutil


def percentiles(values: Iterable[float], points: Sequence[int] = (50, 95, 99)) -> dict[int, float]:
    """The given percentiles (0-100) of the values; empty when there are none."""
    data = list(values)
    if len(data) < 2:
        return {p: float(data[0]) for p in points} if data else {}
    cuts = [min(data), *statistics.quantiles(data, n=100, method="inclusive"), max(data)]
    return {p: cuts[p] for p in points}


def latency_summary(values: Iterable[float], digits: int = 1) -> dict[str, float | int | None]:
    """Count, p50/p95/p99, max and mean of latencies (ms), rounded; None where there are none."""
    data = list(values)
    cuts = percentiles(data)
    if not data:
        return {"count": 0, "p50": None, "p95": None, "p99": None, "max": None, "mean": None}
    return {
        "count": len(data),
        **{f"p{p}": round(v, digits) for p, v in cuts.items()},
        "max": round(max(data), digits),
        "mean": round(statistics.fmean(data), digits),
    }


def per(numerator: float | None, denominator: float | None) -> float | None:
    """A ratio, or None when there is nothing to divide by."""
    return numerator / denominator if numerator is not None and denominator else None


def cpu_seconds(pid: int | None = None, *, tree: bool = True) -> float | None:
    """User + system CPU time of a process (this one by default) and, with `tree`, of its
    descendants (an emulator's launcher script and its JVM); None if the process is gone."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)] if tree else [root]
    except psutil.Error:
        return None
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue  # ended meanwhile
        total += times.user + times.system
    return total


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of a process (this one by default)."""
    return int(psutil.Process(pid).memory_info().rss)


def peak_rss_bytes() -> int:
    """This process's own highest resident set size so far (Linux's VmHWM).

    Not `ru_maxrss`: a child started by a process inherits its parent's RSS at the exec, so
    a benchmark's child would report its parent's memory as its own. psutil has no peak on Linux.
    """
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status (not Linux?)")
