"""A deploy is a plan: a list of steps, each one command, run in order until one fails.

With --dry-run the plan is printed instead, one command per line, and nothing runs. A step is a
gcloud command (run without a shell), or a shell line where no gcloud command exists (the
Firestore rules release, through the REST API with gcloud's credentials).
"""

from __future__ import annotations

import logging
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

LOG = logging.getLogger("codedrop.deploy")

# What create verbs answer when the resource is there already (a re-run of the plan).
ALREADY_EXISTS = re.compile(r"already exists|ALREADY_EXISTS|status=\[?409", re.IGNORECASE)


@dataclass(frozen=True)
class Step:
    """One command of a deploy; `what` names it in the log ("function claim_api")."""

    what: str
    command: Sequence[str] | str  # arguments, or a shell line
    exists_ok: bool = False  # a create: finding the resource there already is success
    stdin: Callable[[], bytes] | None = None  # what the command reads (a secret's value)
    unless: Sequence[str] | None = None  # skip when this command prints something
    when: Sequence[str] | None = None  # run only when this command prints something

    @property
    def line(self) -> str:
        return self.command if isinstance(self.command, str) else shlex.join(self.command)

    @property
    def argv(self) -> list[str]:
        if isinstance(self.command, str):
            return ["bash", "-o", "pipefail", "-c", self.command]
        return list(self.command)


def print_plan(steps: Sequence[Step]) -> None:
    for step in steps:
        sys.stdout.write(step.line + "\n")


def _run(step: Step) -> int:
    if step.unless is not None:
        probe = subprocess.run(
            list(step.unless), capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
        )
        if probe.returncode == 0 and probe.stdout.strip():
            LOG.info("%s: already there", step.what)
            return 0
    if step.when is not None:
        probe = subprocess.run(
            list(step.when), capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
        )
        if probe.returncode != 0:
            sys.stderr.write(probe.stderr)
            return probe.returncode
        if not probe.stdout.strip():
            LOG.info("%s: nothing to do", step.what)
            return 0
    result = subprocess.run(
        step.argv,
        input=step.stdin() if step.stdin is not None else b"",
        stdout=None,
        stderr=subprocess.PIPE,
        check=False,
    )
    errors = result.stderr.decode(errors="replace")
    if result.returncode != 0 and step.exists_ok and ALREADY_EXISTS.search(errors):
        LOG.info("%s: already there", step.what)
        return 0
    sys.stderr.write(errors)
    return result.returncode


def run_plan(steps: Sequence[Step]) -> int:
    """Run every step in order; stop at the first that fails. Returns the exit status."""
    missing = sorted({s.argv[0] for s in steps if shutil.which(s.argv[0]) is None})
    if missing:
        LOG.error("not on PATH: %s (gcloud comes with the Google Cloud SDK)", ", ".join(missing))
        return 1
    for step in steps:
        LOG.info("%s: %s", step.what, step.line)
        returncode = _run(step)
        if returncode != 0:
            LOG.error("%s failed (exit %d); stopping", step.what, returncode)
            return 1
    LOG.info("done: %d steps", len(steps))
    return 0
