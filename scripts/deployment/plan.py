"""A deploy is a plan: a list of steps, each one command, run in order until one fails.

With --dry-run the plan is printed instead, one shell-quoted command per line, and nothing runs.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

LOG = logging.getLogger("codedrop.deploy")


@dataclass(frozen=True)
class Step:
    """One command of a deploy; `what` names it in the log ("function claim_api")."""

    what: str
    command: Sequence[str]


def print_plan(steps: Sequence[Step]) -> None:
    for step in steps:
        sys.stdout.write(shlex.join(step.command) + "\n")


def run_plan(steps: Sequence[Step]) -> int:
    """Run every step in order; stop at the first that fails. Returns the exit status."""
    missing = sorted({s.command[0] for s in steps if shutil.which(s.command[0]) is None})
    if missing:
        LOG.error("not on PATH: %s (gcloud comes with the Google Cloud SDK)", ", ".join(missing))
        return 1
    for step in steps:
        LOG.info("%s: %s", step.what, shlex.join(step.command))
        returncode = subprocess.run(step.command, check=False).returncode
        if returncode != 0:
            LOG.error("%s failed (%s exit %d); stopping", step.what, step.command[0], returncode)
            return 1
    LOG.info("done: %s", ", ".join(step.what for step in steps))
    return 0
