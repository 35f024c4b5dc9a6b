"""Who used the machine's cores during the sale: the shoppers' client, each function and emulator
of the stack, the load test itself and the rest of the machine, sampled every second with
psutil."""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import psutil

CPU_INTERVAL = 1.0
REST = "rest of the machine"
# The shoppers' client (scripts/load_test/shoppers.py), by this name in the figures and its log.
CLIENT = "threads"
# The functions Pub/Sub pushes the sale's events to: they work on after the last answer.
EVENT_FUNCTIONS = ("count_usage", "deliver_webhooks")
SALE = "sale"
# An event function at rest: under this share of a core for QUIET_SAMPLES samples in a row.
QUIET_PERCENT = 5.0
QUIET_SAMPLES = 2


def _classify(cmdline: Sequence[str]) -> str:
    """A stack process's component: a function by its --target, else by its command line."""
    if "--target" in cmdline:
        index = cmdline.index("--target")
        if index + 1 < len(cmdline):
            return cmdline[index + 1]
    joined = " ".join(cmdline)
    for needle, name in (
        ("firestore", "firestore emulator"),
        ("pubsub", "pubsub emulator"),
        ("storage", "storage emulator"),
        ("scripts.localstack", "local stack + bucket notifier"),
    ):
        if needle in joined:
            return name
    return "stack (other)"


class CpuSampler(threading.Thread):
    """Samples CPU time per component every second: the shoppers' client (`client_pid`, as
    CLIENT), each function and emulator of the stack, this process, and the rest of the machine.

    The stack is the process tree of the local stack we started, or, for a running stack, the
    trees of the processes listening on its ports."""

    def __init__(
        self,
        *,
        stack_pid: int | None,
        stack_ports: Sequence[int],
        cores: int,
        also: Sequence[int] = (),
    ) -> None:
        super().__init__(name="cpu-sampler", daemon=True)
        self.stack_pid = stack_pid
        self.also = list(also)  # more roots of the stack's processes (the load test's floor)
        self.stack_ports = set(stack_ports)
        self.stack_roots: list[int] = []
        self.cores = cores
        self.client_pid: int | None = None
        self._stop_event = threading.Event()
        self.series: defaultdict[str, list[float]] = defaultdict(list)
        self.totals: defaultdict[str, float] = defaultdict(float)
        self.seconds = 0.0
        self.samples: list[float] = []  # the length of each interval
        self.marks: dict[str, tuple[dict[str, float], float, int]] = {}
        self._sampled = threading.Condition()

    def _find_roots(self) -> list[int]:
        if self.stack_pid is not None:
            return [self.stack_pid]
        roots: set[int] = set()
        try:
            listening = psutil.net_connections(kind="tcp")
        except (psutil.Error, OSError):
            return []
        for conn in listening:
            port = getattr(conn.laddr, "port", None)  # laddr is () for some sockets
            if conn.status != "LISTEN" or conn.pid is None or port not in self.stack_ports:
                continue
            try:
                process = psutil.Process(conn.pid)
                # A gunicorn worker's master, a Java emulator's launcher script: go up while
                # the parent is the same program.
                while (parent := process.parent()) is not None and parent.pid != 1:
                    if parent.cmdline()[-3:] != process.cmdline()[-3:]:
                        break
                    process = parent
            except psutil.Error:
                continue
            roots.add(process.pid)
        return sorted(roots)

    def _snapshot(self) -> tuple[dict[str, float], float]:
        usage: defaultdict[str, float] = defaultdict(float)

        def tree(pid: int | None, name: str | None) -> None:
            if pid is None:
                return
            try:
                root = psutil.Process(pid)
                processes = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
            for process in processes:
                try:
                    times = process.cpu_times()
                    label = name or _classify(process.cmdline())
                except psutil.Error:
                    continue
                usage[label] += times.user + times.system

        tree(self.client_pid, CLIENT)
        for root in self.stack_roots:
            tree(root, None)
        own = psutil.Process(os.getpid()).cpu_times()
        usage["loadtest (this script)"] += own.user + own.system
        machine = psutil.cpu_times()
        # guest time is already counted in user time; idle and iowait are not work.
        busy = sum(
            getattr(machine, name, 0.0)
            for name in ("user", "nice", "system", "irq", "softirq", "steal")
        )
        return dict(usage), busy

    def run(self) -> None:
        self.stack_roots = self._find_roots() + self.also
        previous, previous_busy = self._snapshot()
        previous_at = time.monotonic()
        while not self._stop_event.wait(CPU_INTERVAL):
            current, busy = self._snapshot()
            now = time.monotonic()
            # Walking the process trees takes time too: divide by the interval measured.
            interval, previous_at = now - previous_at, now
            with self._sampled:
                self._add(current, previous, busy - previous_busy, interval)
                self._sampled.notify_all()
            previous, previous_busy = current, busy

    def _add(
        self, current: dict[str, float], previous: dict[str, float], busy: float, interval: float
    ) -> None:
        known = 0.0
        for name in sorted((set(current) | set(self.series)) - {REST}):
            delta = max(0.0, current.get(name, 0.0) - previous.get(name, current.get(name, 0.0)))
            known += delta
            self.totals[name] += delta
            if name not in self.series:
                self.series[name] = [0.0] * len(self.samples)
            self.series[name].append(round(delta / interval * 100, 1))
        rest = max(0.0, busy - known)
        self.totals[REST] += rest
        self.series[REST].append(round(rest / interval * 100, 1))
        self.samples.append(interval)
        self.seconds += interval

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)

    def mark(self, name: str) -> None:
        """Remember the totals so far, for summary(upto=name)."""
        with self._sampled:
            self.marks[name] = (dict(self.totals), self.seconds, len(self.samples))

    def wait_quiet(self, names: Sequence[str], *, timeout: float) -> float:
        """Until each of these components (those present) has used under QUIET_PERCENT of a
        core for QUIET_SAMPLES samples in a row, or `timeout` seconds; the seconds waited."""
        started = time.monotonic()
        with self._sampled:
            while time.monotonic() - started < timeout and self.is_alive():
                recent = [
                    self.series[name][-QUIET_SAMPLES:] for name in names if name in self.series
                ]
                if (
                    all(len(r) == QUIET_SAMPLES and max(r) < QUIET_PERCENT for r in recent)
                    and len(self.samples) - self.marks.get(SALE, ({}, 0.0, 0))[2] >= QUIET_SAMPLES
                ):
                    break
                self._sampled.wait(CPU_INTERVAL)
        return time.monotonic() - started

    def summary(self, shoppers: int, *, upto: str | None = None) -> dict[str, Any]:
        """CPU by component over the whole sampling, or up to the mark `upto`."""
        with self._sampled:
            totals, seconds, count = (
                self.marks[upto] if upto else (dict(self.totals), self.seconds, len(self.samples))
            )
        if seconds <= 0:
            return {"note": "the run was too short for a CPU sample"}
        ordered = sorted(totals, key=lambda n: -totals[n])
        components = {
            name: {
                "cpu_seconds": round(totals[name], 1),
                "mean_percent": round(totals[name] / seconds * 100, 1),
                "machine_share": round(totals[name] / (seconds * self.cores) * 100, 1),
                "ms_per_shopper": round(totals[name] * 1000 / max(shoppers, 1), 2),
            }
            for name in ordered
        }
        busy = sum(totals.values())
        return {
            "cores": self.cores,
            "interval_seconds": CPU_INTERVAL,
            "seconds": seconds,
            "machine_busy_percent": round(busy / (seconds * self.cores) * 100, 1),
            "components": components,
            "series": {name: self.series[name][:count] for name in ordered},
            "note": (
                "sampled every second while the shoppers ran"
                if upto
                else "sampled every second from the first shopper until the event functions rested"
            )
            + "; 'rest of the machine' is everything else on this host (other sessions included)",
        }
