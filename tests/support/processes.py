"""Running one of the project's commands from a test, as a user would, and stopping it cleanly
if it hangs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.stack import ROOT


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str


def env_for_a_stack_of_its_own() -> dict[str, str]:
    """This environment without what points at other emulators or tunes other servers (the
    suite's fixtures may have set those in this process), for a command that starts its own."""
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("CODEDROP_")
        and not name.endswith("_EMULATOR_HOST")
        and name not in ("GOOGLE_CLOUD_PROJECT", "WORKERS", "THREADS")
    }


def run_module(
    module: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout: float,
    stop_with: signal.Signals = signal.SIGTERM,
    cwd: Path = ROOT,
) -> Finished:
    """`python -m module args` to the end. Past `timeout`, `stop_with` lets it stop what it
    started (its children live in process groups of their own), and the test fails."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(stop_with)
        stdout, stderr = process.communicate(timeout=90)
        pytest.fail(f"{module} did not finish in {timeout} s\n{stdout}\n{stderr}")
    return Finished(process.returncode, stdout, stderr)
