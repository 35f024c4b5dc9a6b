"""Recipient lists and the candidate supply of an assignment job (pure logic, no emulator)."""

from __future__ import annotations

import io
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from shared.assignments.recipients import (
    MissingRecipientColumn,
    RecipientReader,
    RecipientRow,
    recipient_problem,
    result_cell,
)
from shared.assignments.service import ASSIGNMENT_PATH, result_name
from shared.assignments.supply import CandidateSupply
from shared.claims.identity import IdentityKind, identity_key
from shared.coupons.store import Candidate
from shared.intake.csv_rows import InvalidRow, NotUtf8Error

READ_AT = datetime(2026, 1, 1, tzinfo=UTC)


def read(text: str | bytes, kind: IdentityKind = IdentityKind.EMAIL) -> RecipientReader:
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return RecipientReader(io.BytesIO(raw), kind=kind)


def test_the_header_names_the_recipient_column_anywhere_and_the_rest_is_carried() -> None:
    reader = read('\ufeffFirst name,Recipient,tier\r\nAnn,Ann@Shop.Example,"gold, vip"\r\n\r\n')

    rows = list(reader)

    assert reader.columns == ("First name", "tier")
    assert rows == [
        RecipientRow(
            line=2,
            recipient="Ann@Shop.Example",
            identity="ann@shop.example",
            key=identity_key(IdentityKind.EMAIL, "ann@shop.example"),
            carried=("Ann", "gold, vip"),
        )
    ]


def test_one_column_needs_no_header_but_several_do() -> None:
    assert [r.line for r in read("a@x.example\nb@x.example\n")] == [1, 2]
    with pytest.raises(MissingRecipientColumn, match="line 1"):
        list(read("email,name\na@x.example,A\n"))


def test_short_rows_are_padded_and_extra_cells_are_invalid() -> None:
    rows = list(read("recipient,a,b\nx@y.example,1\nz@y.example,1,2,3\nw@y.example,1,2,,\n"))

    assert rows[0] == RecipientRow(
        2, "x@y.example", "x@y.example", identity_key(IdentityKind.EMAIL, "x@y.example"), ("1", "")
    )
    assert rows[1] == InvalidRow(3, "4 cells, but the header names 3 columns", "z@y.example")
    assert isinstance(rows[2], RecipientRow)  # empty trailing cells are nothing to lose


@pytest.mark.parametrize(
    ("kind", "value", "problem"),
    [
        (IdentityKind.EMAIL, "", "empty recipient"),
        (IdentityKind.EMAIL, "no-at-sign", "not an email address"),
        (IdentityKind.EMAIL, "a@nodot", "not an email address"),
        (IdentityKind.EMAIL, "a b@x.example", "not an email address"),
        (
            IdentityKind.EMAIL,
            "a@x.example\u200b",
            "control or invisible character in the recipient",
        ),
        (IdentityKind.EMAIL, "ann@shop.example", None),
        (IdentityKind.PHONE, "5550100123", "not a phone number in international format"),
        (IdentityKind.PHONE, "+1 555 CALL NOW", "not a phone number in international format"),
        (IdentityKind.PHONE, "+1 (555) 010-0123", None),
        (IdentityKind.UID, "a b", "whitespace inside the customer id"),
        (IdentityKind.UID, "x" * 129, "customer id longer than 128 characters"),
        (IdentityKind.UID, "=cmd|' /C calc'!A0", "whitespace inside the customer id"),
        (IdentityKind.UID, "uid-42", None),
    ],
)
def test_recipients_are_checked_for_the_campaigns_identity(
    kind: IdentityKind, value: str, problem: str | None
) -> None:
    found = recipient_problem(kind, value)
    assert (found is None) if problem is None else (found or "").startswith(problem)


def test_a_phone_number_is_written_back_in_e164_and_keyed_like_the_token_claim() -> None:
    (row,) = read("recipient\n+44 20 7946 0958\n", IdentityKind.PHONE)

    assert isinstance(row, RecipientRow)
    assert row.recipient == row.identity == "+442079460958"
    assert row.key == identity_key(IdentityKind.PHONE, "+442079460958")


def test_non_utf8_stops_at_its_line_after_the_rows_before() -> None:
    reader = read(b"recipient\na@x.example\n\xff@x.example\n")
    seen: list[RecipientRow | InvalidRow] = []
    with pytest.raises(NotUtf8Error, match="line 3"):
        seen.extend(reader)
    assert [r.line for r in seen] == [2]


def test_result_cells_are_safe_in_a_spreadsheet_but_phone_numbers_keep_their_plus() -> None:
    assert result_cell("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert result_cell("-5") == "'-5"
    assert result_cell("+15550100123") == "+15550100123"
    assert result_cell("+1 555 0100") == "'+1 555 0100"
    assert result_cell("plain") == "plain"


def test_results_are_never_lists_again() -> None:
    assert result_name("assignments/c1/may.csv") == "assignments/c1/may.result.csv"
    assert result_name("assignments/c1/MAY.CSV") == "assignments/c1/MAY.result.csv"
    assert ASSIGNMENT_PATH.match("assignments/c1/may.csv")
    assert ASSIGNMENT_PATH.match("assignments/c1/May.Result.CSV") is None
    assert ASSIGNMENT_PATH.match("assignments/c1/may.result.csv.asg-1.partial") is None
    assert ASSIGNMENT_PATH.match("assignments/may.csv") is None


# --- the supply ----------------------------------------------------------------------------


class FakePool:
    """Unassigned coupons answering find_unassigned's queries, counting them."""

    def __init__(self, count: int, seed: int = 3) -> None:
        rng = random.Random(seed)
        self.free = {f"c{i}": rng.random() for i in range(count)}
        self.lock = threading.Lock()
        self.queries: list[tuple[float | None, float | None, int]] = []

    def fetch(
        self, low: float | None, inclusive: bool, high: float | None, limit: int
    ) -> list[Candidate]:
        with self.lock:
            self.queries.append((low, high, limit))
            hits = sorted(
                (rf, cid)
                for cid, rf in self.free.items()
                if (low is None or (rf >= low if inclusive else rf > low))
                and (high is None or rf < high)
            )[:limit]
        return [Candidate(coupon_id=c, code=c, random_float=rf, read_at=READ_AT) for rf, c in hits]

    def take(self, candidates: list[Candidate]) -> None:
        with self.lock:
            for c in candidates:
                del self.free[c.coupon_id]


def test_the_supply_walks_the_pool_once_from_its_start_with_growing_pages() -> None:
    pool = FakePool(1000)
    supply = CandidateSupply(fetch=pool.fetch, start=0.6, first_page=10, page_size=160)
    handed: list[Candidate] = []

    while batch := supply.take(25):
        pool.take(batch)
        supply.settle(batch)
        handed += batch

    assert len(handed) == len({c.coupon_id for c in handed}) == 1000
    assert supply.exhausted
    limits = [limit for _, _, limit in pool.queries]
    assert limits[:5] == [10, 20, 40, 80, 160]
    assert max(limits) == 160
    first_lows = [low for low, _, _ in pool.queries[:3]]
    assert first_lows[0] == 0.6
    assert all(low is not None and low >= 0.6 for low in first_lows)
    assert pool.queries[-1][:2] == (None, None)  # the final look over the whole pool


def test_parallel_takers_never_get_the_same_candidate_and_given_back_ones_come_first() -> None:
    pool = FakePool(3000)
    supply = CandidateSupply(fetch=pool.fetch, start=0.2, first_page=50, page_size=400)
    first = supply.take(5)
    supply.give_back(first[:2])
    assert supply.take(2) == first[:2]
    pool.take(first)
    supply.settle(first)

    def drain(_: int) -> list[str]:
        got: list[str] = []
        while batch := supply.take(7):
            pool.take(batch)
            supply.settle(batch)
            got += [c.coupon_id for c in batch]
        return got

    with ThreadPoolExecutor(4) as executor:
        results = list(executor.map(drain, range(4)))
    everything = [cid for r in results for cid in r] + [c.coupon_id for c in first]
    assert len(everything) == len(set(everything)) == 3000


def test_codes_released_behind_the_walk_are_found_by_the_final_look() -> None:
    pool = FakePool(30)
    supply = CandidateSupply(fetch=pool.fetch, start=0.5, first_page=100, page_size=100)
    everything = supply.take(30)
    pool.take(everything)
    supply.settle(everything)
    pool.free["late"] = 0.01  # released, or imported into a range the walk has passed

    late = supply.take(5)
    assert [c.coupon_id for c in late] == ["late"]
    pool.take(late)
    supply.settle(late)
    assert supply.take(5) == []


def test_the_pool_is_empty_only_once_no_candidate_is_out_with_a_batch() -> None:
    pool = FakePool(3)
    supply = CandidateSupply(fetch=pool.fetch, start=0.5, first_page=10, page_size=10)
    held = supply.take(3)
    answers: list[list[Candidate]] = []
    waiter = threading.Thread(target=lambda: answers.append(supply.take(3)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()  # three codes are out: one may come back

    supply.give_back(held[:1])  # that batch's recipient turned out to hold a code already
    pool.take(held[1:])
    supply.settle(held[1:])
    waiter.join(5)

    assert answers == [held[:1]]


def test_a_failed_query_reaches_a_taker() -> None:
    def fetch(
        low: float | None, inclusive: bool, high: float | None, limit: int
    ) -> list[Candidate]:
        raise ConnectionError("database unavailable")

    supply = CandidateSupply(fetch=fetch, start=0.5, first_page=10, page_size=10)
    with pytest.raises(ConnectionError):
        supply.take(3)
