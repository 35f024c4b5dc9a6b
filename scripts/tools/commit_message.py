"""Check a commit message against the project's style (CONTRIBUTING.md, "Commits"): a subject
of at most 72 characters without a trailing period, a blank line, then a body that says why.
Git's commit-msg hook runs it through .pre-commit-config.yaml:
`python -m scripts.tools.commit_message .git/COMMIT_EDITMSG`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

MAX_SUBJECT = 72
# Below this line git drops the rest of the message (`git commit --verbose`).
SCISSORS = "# ------------------------ >8 ------------------------"
# Messages git or a rebase writes: their subject is checked, their body is not required.
GENERATED = ("Merge ", "Revert ", "fixup! ", "squash! ", "amend! ")


def problems(message: str) -> list[str]:
    """What is wrong with `message` as git would record it (comment lines dropped)."""
    kept = message.split(SCISSORS, 1)[0]
    lines = [line.rstrip() for line in kept.splitlines() if not line.startswith("#")]
    while lines and not lines[0]:
        lines.pop(0)
    if not lines:
        return ["the message is empty"]
    subject, rest = lines[0], lines[1:]
    found = []
    if len(subject) > MAX_SUBJECT:
        found.append(f"the subject has {len(subject)} characters; at most {MAX_SUBJECT}")
    if subject.endswith("."):
        found.append("the subject ends with a period")
    if rest and rest[0]:
        found.append("a blank line must separate the subject from the body")
    if not any(rest) and not subject.startswith(GENERATED):
        found.append("the body is missing: say why, after a blank line")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.tools.commit_message", description=__doc__
    )
    parser.add_argument("message_file", type=Path, help="the file git wrote the message to")
    args = parser.parse_args(argv)
    found = problems(args.message_file.read_text(encoding="utf-8"))
    for problem in found:
        print(f"commit message: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
