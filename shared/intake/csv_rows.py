"""Parsing marketers' CSV files of codes, one row at a time (never the whole file in memory).

Accepted: UTF-8 with or without BOM, CRLF or LF, an optional header row naming a `code` column
(other columns ignored), quoted fields, blank lines, spaces around codes. Line numbers are those
a text editor shows, so the report can point at the row to fix.
"""

from __future__ import annotations

import csv
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

MAX_CODE_LENGTH = 64
# A spreadsheet executes a cell starting with one of these as a formula (CSV injection).
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


class NotUtf8Error(ValueError):
    def __init__(self, line: int) -> None:
        super().__init__(f"line {line} is not valid UTF-8; save the file as UTF-8 and upload again")
        self.line = line


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
    """Text for a CSV export or report that no spreadsheet will run as a formula."""
    return "'" + value if value.startswith(FORMULA_PREFIXES) else value


def report_value(value: str, limit: int = 80) -> str:
    """A row's value as a report may show it: invisible characters spelled out, shortened,
    and never a formula a spreadsheet would run."""
    visible = "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in value
    )
    if len(visible) > limit:
        visible = visible[: limit - 1] + "…"
    return spreadsheet_safe(visible)


def decoded_lines(raw_lines: Iterable[bytes]) -> Iterator[str]:
    """Decode line by line so a broken byte is reported with its line number, and everything
    before it has already been handed on."""
    for number, raw in enumerate(raw_lines, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise NotUtf8Error(number) from None
        if number == 1:
            text = text.removeprefix("\ufeff")
        yield text


def parse_rows(raw_lines: Iterable[bytes]) -> Iterator[CodeRow | InvalidRow]:
    """Rows of the file as codes or invalid rows; blank lines and the header are skipped."""
    lines = decoded_lines(raw_lines)
    # Not strict: a space after a closing quote ("ABC" ,) is what spreadsheets let through.
    reader = csv.reader(lines)
    column: int | None = None
    while True:
        line = reader.line_num + 1  # where the row starts; a quoted field may span lines
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield InvalidRow(line=line, reason=f"malformed CSV: {exc}")
            continue
        if not any(cell.strip() for cell in cells):
            continue  # blank line
        if column is None:
            names = [cell.strip().lower() for cell in cells]
            if "code" in names:
                column = names.index("code")
                continue  # the header row
            column = 0
        if column >= len(cells):
            yield InvalidRow(line=line, reason="no value in the code column")
            continue
        code = cells[column].strip()
        reason = invalid_reason(code)
        if reason:
            yield InvalidRow(line=line, reason=reason, value=report_value(code))
        else:
            yield CodeRow(line=line, code=code)
