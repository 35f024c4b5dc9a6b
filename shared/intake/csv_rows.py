"""Parsing marketers' CSV files of codes, one row at a time, in bounded memory.

Accepted: UTF-8 with or without BOM, CRLF or LF, an optional header row naming a `code` column
(other columns ignored), quoted fields, blank lines, spaces around codes. Line numbers are those
a text editor shows, so the report can point at the row to fix.

Every line is one row, and every row ends as a code or an invalid row: a field never spans lines
(a code cannot hold a line break anyway), so a stray quote costs its own line and nothing after
it; a line longer than MAX_LINE_BYTES is consumed without being kept and reported; a line that is
not UTF-8 is reported and the next one is read.
"""

from __future__ import annotations

import csv
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

MAX_CODE_LENGTH = 64
# A row holds a code of at most 64 characters and perhaps a note or two; nothing longer is kept.
MAX_LINE_BYTES = 8 * 1024
# A spreadsheet executes a cell starting with one of these as a formula (CSV injection).
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True, slots=True)
class OverlongLine:
    """A line longer than the limit: consumed, counted, never kept."""

    size: int


@dataclass(frozen=True, slots=True)
class CodeRow:
    line: int
    code: str


@dataclass(frozen=True, slots=True)
class InvalidRow:
    line: int
    reason: str
    value: str = ""  # what the row held, for the report (see report_value)


def invalid_reason(code: str) -> str | None:
    """Why `code` (already stripped of surrounding spaces) cannot be a coupon code, or None."""
    if not code:
        return "empty code"
    if len(code) > MAX_CODE_LENGTH:
        return f"code longer than {MAX_CODE_LENGTH} characters"
    for char in code:
        if char.isspace():
            return "whitespace inside the code"
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            return "control or invisible character in the code"
    return None


def spreadsheet_safe(value: str) -> str:
    """Text for a CSV export or report that no spreadsheet will run as a formula. Spreadsheets
    skip leading spaces and read full-width forms (U+FF1D, U+FF0B) as their ASCII selves, so the
    cell is judged as NFKC-normalised text without its leading spaces and invisible
    characters."""
    head = unicodedata.normalize("NFKC", value)
    start = 0
    while start < len(head) and (
        head[start].isspace() or unicodedata.category(head[start]) == "Cf"
    ):
        start += 1
    if value.startswith(FORMULA_PREFIXES) or head[start:].startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def report_value(value: str, limit: int = 80) -> str:
    """A row's value as a report may show it: invisible characters spelled out, shortened,
    and never a formula a spreadsheet would run."""
    visible = "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in value
    )
    if len(visible) > limit:
        visible = visible[: limit - 1] + "…"
    return spreadsheet_safe(visible)


def lines_of(
    chunks: Iterable[bytes], *, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[bytes | OverlongLine]:
    """The lines of a byte stream read in chunks of any size (LF ends a line; a CR before it is
    dropped). At most `max_line_bytes` of a line are ever held, whatever its length."""
    pending = bytearray()
    skipped: int | None = None  # bytes of an overlong line consumed so far
    for chunk in chunks:
        start = 0
        while start <= len(chunk):
            end = chunk.find(b"\n", start)
            piece = memoryview(chunk)[start : len(chunk) if end == -1 else end]
            if skipped is not None:
                skipped += len(piece)
            elif len(pending) + len(piece) > max_line_bytes:
                skipped = len(pending) + len(piece)
                pending.clear()
            else:
                pending += piece
            if end == -1:
                break
            if skipped is not None:
                yield OverlongLine(skipped)
                skipped = None
            else:
                yield bytes(pending.removesuffix(b"\r"))
                pending.clear()
            start = end + 1
    if skipped is not None:
        yield OverlongLine(skipped)
    elif pending:
        yield bytes(pending.removesuffix(b"\r"))


def _cells(number: int, raw: bytes | OverlongLine) -> list[str] | InvalidRow:
    """One line's cells, or why the line is an invalid row."""
    if isinstance(raw, OverlongLine):
        return InvalidRow(line=number, reason=f"line longer than {MAX_LINE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return InvalidRow(line=number, reason="not valid UTF-8; save the file as UTF-8")
    if number == 1:
        text = text.removeprefix("\ufeff")
    # Within one line, balanced quotes close every quoted field they open.
    if text.count('"') % 2:
        return InvalidRow(
            line=number,
            reason="unterminated quote (a quoted field must end on its line)",
            value=report_value(text),
        )
    try:
        # Not strict: a space after a closing quote ("ABC" ,) is what spreadsheets let through.
        return next(csv.reader([text]), [])
    except csv.Error as exc:
        return InvalidRow(line=number, reason=f"malformed CSV: {exc}", value=report_value(text))


def line_cells(chunks: Iterable[bytes]) -> Iterator[tuple[int, list[str] | InvalidRow]]:
    """Each non-blank line's number and cells, or the invalid row it is. Every CSV file of the
    project (codes, recipient lists) is read through this."""
    for number, raw in enumerate(lines_of(chunks), start=1):
        cells = _cells(number, raw)
        if isinstance(cells, InvalidRow) or any(cell.strip() for cell in cells):
            yield number, cells


def parse_rows(chunks: Iterable[bytes]) -> Iterator[CodeRow | InvalidRow]:
    """Rows of the file as codes or invalid rows; blank lines and the header are skipped."""
    column: int | None = None
    for number, cells in line_cells(chunks):
        if isinstance(cells, InvalidRow):
            yield cells
            continue
        if column is None:
            names = [cell.strip().lower() for cell in cells]
            if "code" in names:
                column = names.index("code")
                continue  # the header row
            column = 0
        if column >= len(cells):
            yield InvalidRow(line=number, reason="no value in the code column")
            continue
        code = cells[column].strip()
        reason = invalid_reason(code)
        if reason:
            yield InvalidRow(line=number, reason=reason, value=report_value(code))
        else:
            yield CodeRow(line=number, code=code)
