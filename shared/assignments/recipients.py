"""Reading a recipient list, one row at a time (never the whole file in memory).

The file is a CSV whose header names a `recipient` column (any case, any position); the other
columns are carried through to the result. A file of one column may omit the header. Lines are
read as code files are (shared/intake/csv_rows.line_cells): every line is one row, a line that is
not UTF-8, too long or badly quoted is an invalid row, and line numbers are an editor's.

A recipient is what the campaign's per-user limit counts (its `identity`): a customer id (the
Firebase uid a shopper signs in with), an email address, or a phone number in international
format. Each row carries the identity's canonical form and key (shared/claims/identity.py, the
same functions the claim path keys shoppers with), so two spellings of one person are one
recipient.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from shared.claims.identity import (
    E164_PATTERN,
    EmailCanonicalization,
    IdentityKind,
    canonical,
    canonical_phone,
    identity_key,
)
from shared.errors import IdentityInvalid
from shared.intake.csv_rows import InvalidRow, line_cells, report_value, spreadsheet_safe

RECIPIENT_COLUMN = "recipient"
MAX_EMAIL_LENGTH = 254  # RFC 5321's limit for a path
MAX_UID_LENGTH = 128  # Firebase Auth's limit for a uid
_EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s.]+(\.[^@\s.]+)+$")
_E164 = re.compile(E164_PATTERN, re.ASCII)
_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class MissingRecipientColumn(ValueError):
    def __init__(self, line: int) -> None:
        super().__init__(
            f"line {line}: the header must name a `{RECIPIENT_COLUMN}` column (a file of one "
            "column may have no header)"
        )
        self.line = line


@dataclass(frozen=True, slots=True)
class RecipientRow:
    line: int
    recipient: str  # as the result file shows it: as written, a phone number in E.164
    identity: str  # the canonical form the per-user limit counts
    key: str  # identity_key(kind, recipient): the recipient's claim slots
    carried: tuple[str, ...]


def recipient_problem(kind: IdentityKind, value: str) -> str | None:
    """Why `value` (stripped) cannot be a recipient of this kind, or None."""
    if not value:
        return "empty recipient"
    if _ASCII_CONTROL.search(value) if value.isascii() else _invisible(value):
        return "control or invisible character in the recipient"
    if kind is IdentityKind.EMAIL:
        if len(value) > MAX_EMAIL_LENGTH or not _EMAIL.match(value):
            return "not an email address"
    elif kind is IdentityKind.PHONE:
        try:
            canonical_phone(value)
        except IdentityInvalid:
            return "not a phone number in international format (+, country code, 7-15 digits 0-9)"
    else:
        if len(value) > MAX_UID_LENGTH:
            return f"customer id longer than {MAX_UID_LENGTH} characters"
        if any(ch.isspace() for ch in value):
            return "whitespace inside the customer id"
    return None


def _invisible(value: str) -> bool:
    return any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") for ch in value)


def result_cell(value: str) -> str:
    """A cell of the result file: safe in a spreadsheet. A phone number in E.164 is left as it
    is: `+` and digits can run nothing, and an SMS tool needs the `+`."""
    return value if _E164.match(value) else spreadsheet_safe(value)


class RecipientReader:
    """Iterates the rows of a recipient list as RecipientRow or InvalidRow; blank lines and the
    header are skipped. `columns` (the carried columns' names) is known once the first row has
    been read. Raises MissingRecipientColumn when the header names no recipient column."""

    def __init__(
        self,
        chunks: Iterable[bytes],
        *,
        kind: IdentityKind,
        email_rule: EmailCanonicalization = EmailCanonicalization.MAILBOX,
    ) -> None:
        self._chunks = chunks
        self._kind = kind
        self._email_rule = email_rule
        self.columns: tuple[str, ...] = ()
        self._column: int | None = None
        self._carried: tuple[int, ...] = ()

    def __iter__(self) -> Iterator[RecipientRow | InvalidRow]:
        for line, cells in line_cells(self._chunks):
            if isinstance(cells, InvalidRow):
                yield cells
                continue
            if self._column is None and self._header(cells, line):
                continue
            yield self._row(cells, line)

    def _header(self, cells: list[str], line: int) -> bool:
        """Learn the layout from the first row; True if it was a header."""
        names = [cell.strip() for cell in cells]
        lowered = [name.lower() for name in names]
        if RECIPIENT_COLUMN in lowered:
            self._column = lowered.index(RECIPIENT_COLUMN)
            self._carried = tuple(i for i in range(len(names)) if i != self._column)
            self.columns = tuple(names[i] for i in self._carried)
            return True
        if len(cells) == 1:
            self._column = 0  # one column and no header: every row is a recipient
            return False
        raise MissingRecipientColumn(line)

    def _row(self, cells: list[str], line: int) -> RecipientRow | InvalidRow:
        column = self._column or 0
        value = cells[column].strip() if column < len(cells) else ""
        width = len(self._carried) + 1
        if any(cell.strip() for cell in cells[width:]):
            return InvalidRow(
                line=line,
                reason=f"{len(cells)} cells, but the header names {width} columns",
                value=report_value(value),
            )
        problem = recipient_problem(self._kind, value)
        if problem is not None:
            return InvalidRow(line=line, reason=problem, value=report_value(value))
        try:
            identity = canonical(self._kind, value, email_rule=self._email_rule)
        except IdentityInvalid as exc:
            return InvalidRow(line=line, reason=exc.message, value=report_value(value))
        return RecipientRow(
            line=line,
            recipient=identity if self._kind is IdentityKind.PHONE else value,
            identity=identity,
            key=identity_key(self._kind, value, email_rule=self._email_rule),
            carried=tuple(cells[i] if i < len(cells) else "" for i in self._carried),
        )
