"""The command of a page generated from the code or from measurements (docs/api.md,
docs/benchmarks.md): write it, or with --check only say whether the page on disk is current."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def main(
    argv: Sequence[str] | None,
    *,
    module: str,
    doc: str | None,
    page: Path,
    render: Callable[[], str],
) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc)
    parser.add_argument("--check", action="store_true", help="only check the page is current")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not page.exists() or page.read_text(encoding="utf-8") != text:
            print(f"{page} is stale: run python -m {module}", file=sys.stderr)
            return 1
        return 0
    page.write_text(text, encoding="utf-8")
    return 0
