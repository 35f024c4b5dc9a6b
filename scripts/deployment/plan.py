"""A deploy is a plan: a list of steps, each one command, run in order until one fails.

With --dry-run the plan is printed instead: each step's purpose as a `#` comment, then its
command on one line; nothing runs. A step is a gcloud command (run without a shell), or a shell
line where no gcloud command exists (REST calls with gcloud's credentials, firebase-tools).

A plan can be re-run at any point, and a first run survives what a new project answers while it
settles:
- a create step first asks whether the resource is there (`unless`, a describe that prints it),
  and a create that finds it anyway (another deployer, or a describe that lagged) is success:
  the real texts are in EXISTS;
- what services answer while a new project settles (TRANSIENT: an agent not created yet, IAM
  not propagated, Firestore's admin contention) is retried with backoff, for minutes, since
  Eventarc's agent can take that long after its API is enabled.
"""

from __future__ import annotations

import logging
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

LOG = logging.getLogger("codedrop.deploy")

# What create verbs answer when the resource is there already (a re-run of the plan): gcloud's
# ALREADY_EXISTS and "... already exists" (topics, service accounts, secrets, scheduler jobs,
# databases, indexes), and Cloud Storage's own text for a bucket the caller owns (409, which
# must not be taken for "already there" in general: contention is a 409 too).
EXISTS = re.compile(
    r"already exists|ALREADY_EXISTS|you already own it|You already own this bucket",
    re.IGNORECASE,
)
# Answers that mean "not yet", each seen on first deploys to new projects.
TRANSIENT = re.compile(
    "|".join(
        (
            # Eventarc's service agent needs minutes after eventarc.googleapis.com is enabled.
            r"Permission denied while using the Eventarc Service Agent",
            # The storage trigger's check, before the Cloud Storage agent's binding propagated.
            r"unable to publish to Cloud Pub/Sub",
            # Firestore's admin API on many field or index updates in a row (409 ABORTED).
            r"too much contention",
            r"cross-transaction contention",
            r"underlying data changed",
            # Two IAM read-modify-writes of one policy at once.
            r"concurrent policy changes",
            # A service account (ours, or a Google agent just created) not yet visible to IAM.
            r"Service account \S+ does not exist",
            r"does not exist within project",
            # A build account's new roles not yet propagated.
            r"missing permission on the build service account",
            r"HTTP(?:Error| Error:) (?:429|503)",
            r"\bUNAVAILABLE\b",
        )
    ),
    re.IGNORECASE,
)
# Waits between attempts, seconds: about nine minutes in all.
BACKOFF = (5.0, 10.0, 20.0, 40.0, 60.0, 90.0, 120.0, 180.0)


@dataclass(frozen=True)
class Lookup:
    """A value that only an earlier step makes known (a function's URI), and the command that
    prints it. Where `marker` appears in a step's arguments, the step runs with the command's
    output in its place, and the printed plan shows `$(command)` there."""

    marker: str
    command: tuple[str, ...]


@dataclass(frozen=True)
class Step:
    """One command of a deploy; `what` names it in the log ("function claim_api")."""

    what: str
    command: Sequence[str] | str  # arguments, or a shell line
    exists_ok: bool = False  # a create: finding the resource there already is success
    stdin: Callable[[], bytes] | None = None  # what the command reads (a secret's value)
    unless: Sequence[str] | str | None = None  # skip when this command prints something
    when: Sequence[str] | None = None  # run only when this command prints something
    lookups: tuple[Lookup, ...] = ()

    @property
    def line(self) -> str:
        if not self.lookups or isinstance(self.command, str):
            return _line(self.command)
        return " ".join(self._shell_word(arg) for arg in self.command)

    def _shell_word(self, arg: str) -> str:
        found = [lookup for lookup in self.lookups if lookup.marker in arg]
        if not found:
            return shlex.quote(arg)
        for lookup in found:
            arg = arg.replace(lookup.marker, f"$({shlex.join(lookup.command)})")
        return f'"{arg}"'

    @property
    def argv(self) -> list[str]:
        return _argv(self.command)


def _line(command: Sequence[str] | str) -> str:
    return command if isinstance(command, str) else shlex.join(command)


def _argv(command: Sequence[str] | str) -> list[str]:
    if isinstance(command, str):
        return ["bash", "-o", "pipefail", "-c", command]
    return list(command)


def print_plan(steps: Sequence[Step]) -> None:
    for step in steps:
        sys.stdout.write(f"# {step.what}\n{step.line}\n")


def _present(step: Step) -> bool:
    if step.unless is None:
        return False
    probe = subprocess.run(
        _argv(step.unless), capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )
    return probe.returncode == 0 and bool(probe.stdout.strip())


def _resolved(step: Step) -> tuple[list[str] | None, str]:
    """The step's arguments with each lookup's output in place (None, and why, if one failed)."""
    argv = step.argv
    for lookup in step.lookups:
        found = subprocess.run(
            list(lookup.command),
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        value = found.stdout.strip()
        if found.returncode != 0 or not value:
            return None, found.stderr or f"{shlex.join(lookup.command)} printed nothing\n"
        argv = [arg.replace(lookup.marker, value) for arg in argv]
    return argv, ""


def _attempt(step: Step) -> tuple[int, str]:
    argv, errors = _resolved(step)
    if argv is None:
        return 1, errors
    result = subprocess.run(
        argv,
        input=step.stdin() if step.stdin is not None else b"",
        stdout=None,
        stderr=subprocess.PIPE,
        check=False,
    )
    return result.returncode, result.stderr.decode(errors="replace")


def _run(step: Step, sleep: Callable[[float], None]) -> int:
    if _present(step):
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
    waits = iter(BACKOFF)
    while True:
        returncode, errors = _attempt(step)
        if returncode == 0:
            return 0
        if step.exists_ok and EXISTS.search(errors):
            LOG.info("%s: already there", step.what)
            return 0
        sys.stderr.write(errors)
        wait = next(waits, None)
        if wait is None or not TRANSIENT.search(errors):
            return returncode
        LOG.warning("%s: not ready yet; again in %.0f s", step.what, wait)
        sleep(wait)


def run_plan(steps: Sequence[Step], *, sleep: Callable[[float], None] = time.sleep) -> int:
    """Run every step in order; stop at the first that fails. Returns the exit status."""
    missing = sorted({s.argv[0] for s in steps if shutil.which(s.argv[0]) is None})
    if missing:
        LOG.error("not on PATH: %s (gcloud comes with the Google Cloud SDK)", ", ".join(missing))
        return 1
    for step in steps:
        LOG.info("%s: %s", step.what, step.line)
        returncode = _run(step, sleep)
        if returncode != 0:
            LOG.error("%s failed (exit %d); stopping", step.what, returncode)
            return 1
    LOG.info("done: %d steps", len(steps))
    return 0
