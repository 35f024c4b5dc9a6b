"""CSV parsing and code validation (pure logic, no emulator)."""

from __future__ import annotations

import io

import pytest

from shared.codes import CODE_ALPHABET, legacy_format
from shared.intake.csv_rows import (
    MAX_CODE_LENGTH,
    CodeRow,
    InvalidRow,
    invalid_reason,
    parse_rows,
    report_value,
    spreadsheet_safe,
)
from shared.intake.generator import generate_codes


def rows(text: str | bytes) -> list[CodeRow | InvalidRow]:
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return list(parse_rows(io.BytesIO(raw)))


def test_header_with_other_columns_bom_crlf_quotes_blanks_and_spaces() -> None:
    text = '\ufeffid,Code,note\r\n1,ABC,x\r\n\r\n2,"DEF" ,"a, b"\r\n3,  GHI  ,\r\n'

    assert rows(text) == [CodeRow(2, "ABC"), CodeRow(4, "DEF"), CodeRow(5, "GHI")]


def test_without_header_the_first_column_is_the_code() -> None:
    assert rows("AAA\nBBB,ignored\n") == [CodeRow(1, "AAA"), CodeRow(2, "BBB")]


def test_invalid_rows_keep_their_line_numbers() -> None:
    text = "code\nOK1\n,other\nA B\nTAB\tX\n" + "Z" * (MAX_CODE_LENGTH + 1) + "\nZERO\u200bWIDTH\n"

    result = rows(text)

    assert result == [
        CodeRow(2, "OK1"),
        InvalidRow(3, "empty code", ""),
        InvalidRow(4, "whitespace inside the code", "A B"),
        InvalidRow(5, "whitespace inside the code", "TAB\\tX"),
        InvalidRow(
            6, f"code longer than {MAX_CODE_LENGTH} characters", "Z" * (MAX_CODE_LENGTH + 1)
        ),
        InvalidRow(7, "control or invisible character in the code", "ZERO\\u200bWIDTH"),
    ]


def test_a_quoted_field_never_spans_lines_and_costs_only_its_own_lines() -> None:
    # A code cannot hold a line break, so both halves are invalid rows; the next row is read.
    unterminated = "unterminated quote (a quoted field must end on its line)"
    assert rows('code\n"MULTI\nLINE"\nNEXT\n') == [
        InvalidRow(2, unterminated, '"MULTI'),
        InvalidRow(3, unterminated, 'LINE"'),
        CodeRow(4, "NEXT"),
    ]


def test_missing_code_column_in_a_short_row() -> None:
    assert rows("id,code\n1\n2,X\n") == [
        InvalidRow(2, "no value in the code column"),
        CodeRow(3, "X"),
    ]


def test_formula_like_codes_are_kept_as_text_but_escaped_for_spreadsheets() -> None:
    assert rows("=SUM(A1)\n@cmd\n") == [CodeRow(1, "=SUM(A1)"), CodeRow(2, "@cmd")]
    # An invalid row's value in the job report never reaches a spreadsheet as a formula.
    assert rows("=1+2 x\n") == [InvalidRow(1, "whitespace inside the code", "'=1+2 x")]
    assert spreadsheet_safe("=SUM(A1)") == "'=SUM(A1)"
    assert spreadsheet_safe("-1+2") == "'-1+2"
    assert spreadsheet_safe("SAFE-1") == "SAFE-1"


def test_a_non_utf8_line_is_an_invalid_row_and_the_rows_after_it_are_read() -> None:
    assert rows(b"A1\nA2\nCaf\xe9\nA4\n") == [
        CodeRow(1, "A1"),
        CodeRow(2, "A2"),
        InvalidRow(3, "not valid UTF-8; save the file as UTF-8"),
        CodeRow(4, "A4"),
    ]


def test_report_values_are_shortened_and_spell_out_invisible_characters() -> None:
    assert report_value("x" * 100) == "x" * 79 + "…"
    assert report_value("a\x00b") == "a\\x00b"
    assert report_value("+cmd|' /C calc'!A0") == "'+cmd|' /C calc'!A0"


@pytest.mark.parametrize("code", ["ABC-123", "x" * MAX_CODE_LENGTH, "ÄÖÜ-ß"])
def test_valid_codes(code: str) -> None:
    assert invalid_reason(code) is None


def test_generated_codes_use_the_unambiguous_alphabet() -> None:
    codes = list(generate_codes(5000, code_format=legacy_format(length=12, prefix="BF-")))

    assert len(codes) == 5000
    assert all(c.startswith("BF-") and len(c) == 15 for c in codes)
    assert set("".join(c[3:] for c in codes)) <= set(CODE_ALPHABET)
    assert not set("0O1IL") & set("".join(c[3:] for c in codes))
    # 60,000 random characters: every one of the 31 letters shows up.
    assert set("".join(c[3:] for c in codes)) == set(CODE_ALPHABET)
    assert len(set(codes)) == len(codes)
