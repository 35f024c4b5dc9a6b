"""What every operator command in scripts/ shares: its parser."""

from __future__ import annotations

import argparse


def parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of `scripts/{name}`: its module docstring as the help, line breaks kept."""
    return argparse.ArgumentParser(
        prog=f"scripts/{name}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
