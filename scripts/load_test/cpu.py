"""Who used the machine's cores during the sale: the shoppers' client (locust or threads), each
function and emulator of the stack, the load test itself and the rest of the machine, sampled
every second with psutil."""

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
    """Samples CPU time per component every second: the shoppers' client (locust and its
    workers, or the threads client) under `client_name`, each function
    and emulator of the stack, this process, and the rest of the machine.

    The stack is the process tree of the local stack we started, or, for a running stack, the
    trees of the processes listening on its ports."""

    def __init__(self, *, stack_pid: int | None, stack_ports: Sequence[int], cores: int) -> None:
        super().__init__(name="cpu-sampler", daemon=True)
        self.stack_pid = stack_pid
        self.stack_ports = set(stack_ports)
        self.stack_roots: list[int] = []
        self.cores = cores
        self.client_pid: int | None = None
        self.client_name = "locust"
        self._stop_event = threading.Event()
        self.series: defaultdict[str, list[float]] = defaultdict(list)
        self.totals: defaultdict[str, float] = defaultdict(float)
        self.seconds = 0.0
        self.samples: list[float] = []  # the length of each interval

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

        tree(self.client_pid, self.client_name)
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
        self.stack_roots = self._find_roots()
        previous, previous_busy = self._snapshot()
        previous_at = time.monotonic()
        while not self._stop_event.wait(CPU_INTERVAL):
            current, busy = self._snapshot()
            now = time.monotonic()
            # Walking the process trees takes time too: divide by the interval measured.
            interval, previous_at = now - previous_at, now
            known = 0.0
            for name in sorted((set(current) | set(self.series)) - {REST}):
                delta = max(
                    0.0, current.get(name, 0.0) - previous.get(name, current.get(name, 0.0))
                )
                known += delta
                self.totals[name] += delta
                if name not in self.series:
                    self.series[name] = [0.0] * len(self.samples)
                self.series[name].append(round(delta / interval * 100, 1))
            rest = max(0.0, busy - previous_busy - known)
            self.totals[REST] += rest
            self.series[REST].append(round(rest / interval * 100, 1))
            self.samples.append(interval)
            self.seconds += interval
            previous, previous_busy = current, busy

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)

    def summary(self, shoppers: int) -> dict[str, Any]:
        if self.seconds <= 0:
            return {"note": "the run was too short for a CPU sample"}
        ordered = sorted(self.totals, key=lambda n: -self.totals[n])
        components = {
            name: {
                "cpu_seconds": round(self.totals[name], 1),
                "mean_percent": round(self.totals[name] / self.seconds * 100, 1),
                "machine_share": round(self.totals[name] / (self.seconds * self.cores) * 100, 1),
                "ms_per_shopper": round(self.totals[name] * 1000 / max(shoppers, 1), 2),
            }
            for name in ordered
        }
        busy = sum(self.totals.values())
        return {
            "cores": self.cores,
            "interval_seconds": CPU_INTERVAL,
            "seconds": self.seconds,
            "machine_busy_percent": round(busy / (self.seconds * self.cores) * 100, 1),
            "components": components,
            "series": {name: self.series[name] for name in ordered},
            "note": "sampled every second while the shoppers ran; 'rest of the machine' is "
            "everything else on this host (other sessions included)",
        }
