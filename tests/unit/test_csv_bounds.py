"""The CSV reader never swallows rows and never holds more than a line's limit, whatever the
file (findings 2 and 3 of the hostile test)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from shared.intake.csv_rows import MAX_LINE_BYTES, CodeRow, InvalidRow, lines_of, parse_rows
from tests.support.stack import ROOT

UNTERMINATED = "unterminated quote (a quoted field must end on its line)"
OVERLONG = f"line longer than {MAX_LINE_BYTES} bytes"


def chunked(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_a_stray_quote_costs_one_row_of_twenty_thousand() -> None:
    """Finding 2: `"Q0000002` on line 3 once swallowed the 14,563 lines after it."""
    lines = [f"Q{n:07d}" for n in range(20_000)]
    lines[2] = '"Q0000002'
    data = ("\n".join(lines) + "\n").encode()

    rows = list(parse_rows(chunked(data, 1 << 20)))

    assert len(rows) == 20_000
    assert rows[2] == InvalidRow(3, UNTERMINATED, '"Q0000002')
    assert [r for r in rows if isinstance(r, InvalidRow)] == [rows[2]]
    assert rows[-1] == CodeRow(20_000, "Q0019999")


def test_an_overlong_line_is_one_invalid_row_and_the_next_is_read() -> None:
    data = b"code\nA-1\n" + b"x" * (3 * MAX_LINE_BYTES) + b"\r\nA-2\r\n" + b"y" * MAX_LINE_BYTES

    rows = list(parse_rows(chunked(data, 1000)))

    assert rows == [
        CodeRow(2, "A-1"),
        InvalidRow(3, OVERLONG),
        CodeRow(4, "A-2"),
        # Exactly at the limit: kept and read (and too long for a code).
        InvalidRow(5, "code longer than 64 characters", "y" * 79 + "…"),
    ]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 4096, 1 << 20])
def test_lines_are_the_same_whatever_the_chunk_size(size: int) -> None:
    data = b'\xef\xbb\xbfcode\r\nA\n\n"B" ,x\r\n' + b"z" * (MAX_LINE_BYTES + 1) + b"\nC"

    assert list(lines_of(chunked(data, size))) == list(lines_of([data]))
    assert [r.line for r in parse_rows(chunked(data, size))] == [2, 4, 5, 6]


def test_every_line_is_one_row_or_none() -> None:
    """Blank lines (line 7 holds only empty cells) and the header are not rows; every other
    line is exactly one row."""
    text = 'code\n\nOK-1\n"open\nclosed"\n"OK-2"\n,\n"a""b"\nNUL\x00X\n   \nLAST'

    rows = list(parse_rows([text.encode()]))

    assert [(r.line, type(r).__name__) for r in rows] == [
        (3, "CodeRow"),
        (4, "InvalidRow"),
        (5, "InvalidRow"),
        (6, "CodeRow"),
        (8, "CodeRow"),
        (9, "InvalidRow"),
        (11, "CodeRow"),
    ]


# Runs in a child process, so nothing else in this interpreter shares its allocations.
_MEASURE = textwrap.dedent(
    """
    import json, sys, time, tracemalloc
    from shared.intake.csv_rows import parse_rows

    size = int(sys.argv[1])
    chunk = b"A" * (1 << 20)

    def huge_file():
        # One line of `size` bytes, generated a chunk at a time, then two short rows.
        for _ in range(size // len(chunk)):
            yield chunk
        yield b"\\nGOOD-1\\nGOOD-2\\n"

    tracemalloc.start()
    started = time.perf_counter()
    rows = [(r.line, getattr(r, "code", None) or r.reason) for r in parse_rows(huge_file())]
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    print(json.dumps({"rows": rows, "peak": peak, "seconds": elapsed}))
    """
)


def test_a_huge_one_line_file_is_read_in_bounded_memory() -> None:
    """Finding 3: memory once grew with the line (150 MB read one byte per call: 380 MB)."""
    size = 50 * (1 << 20)
    started = time.monotonic()

    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(size)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )

    measured = json.loads(result.stdout)
    assert measured["rows"] == [[1, OVERLONG], [2, "GOOD-1"], [3, "GOOD-2"]]
    # A few lines' worth, not the line: the chunks themselves are the caller's (one buffer here).
    assert measured["peak"] < 8 * MAX_LINE_BYTES, measured
    assert time.monotonic() - started < 10
