"""The command of pages generated from the code or from measurements (docs/api.md,
docs/benchmarks.md, the README's performance paragraph): write them, or with --check only say
whether the pages on disk are current."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def main(
    argv: Sequence[str] | None,
    *,
    module: str,
    doc: str | None,
    pages: Mapping[Path, Callable[[], str]],
) -> int:
    """`pages`: each page and what renders its whole text."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc)
    parser.add_argument("--check", action="store_true", help="only check the pages are current")
    args = parser.parse_args(argv)
    stale = 0
    for page, render in pages.items():
        text = render()
        if not args.check:
            page.write_text(text, encoding="utf-8")
        elif not page.exists() or page.read_text(encoding="utf-8") != text:
            print(f"{page} is stale: run python -m {module}", file=sys.stderr)
            stale = 1
    return stale


def replace_between(text: str, begin: str, end: str, inner: str) -> str:
    """`text` with what stands between the marker lines `begin` and `end` replaced by `inner`."""
    head, found, rest = text.partition(begin + "\n")
    _, found_end, tail = rest.partition(end)
    if not found or not found_end:
        raise ValueError(f"the markers {begin!r} and {end!r} are missing")
    return f"{head}{begin}\n{inner}{end}{tail}"
