"""The commit-msg check: CONTRIBUTING.md's commit style, as git records the message."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.tools import commit_message

BODY = "\n\nThe reason, wrapped at about 72 columns.\n"


@pytest.mark.parametrize(
    "message",
    [
        "Split the claim path by what each step holds" + BODY,
        "# Please enter the commit message\nMerge branch 'w4-docs'\n",
        "Subject" + BODY + "# comment\n" + commit_message.SCISSORS + "\ndiff --git a/x b/x\n",
        "x" * 72 + BODY,
    ],
)
def test_a_message_in_the_style_passes(message: str) -> None:
    assert commit_message.problems(message) == []


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ("x" * 73 + BODY, "73 characters"),
        ("Add the thing." + BODY, "period"),
        ("Add the thing\nwith no blank line\n", "blank line"),
        ("Add the thing\n", "body is missing"),
        ("Add the thing\n\n# only a comment\n", "body is missing"),
        ("\n# nothing\n", "empty"),
    ],
)
def test_a_message_out_of_style_is_refused(message: str, problem: str) -> None:
    found = commit_message.problems(message)
    assert len(found) == 1
    assert problem in found[0]


def test_the_command_exits_non_zero_on_a_bad_message(tmp_path: Path) -> None:
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text("Fix\n", encoding="utf-8")
    assert commit_message.main([str(message)]) == 1
    message.write_text("Fix the sweep's grace" + BODY, encoding="utf-8")
    assert commit_message.main([str(message)]) == 0
