"""Recipient lists and the candidate supply of an assignment job (pure logic, no emulator)."""

from __future__ import annotations

import io
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from shared.assignments.assigner import claim_fields
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
from shared.claims.models import ClaimRecord
from shared.coupons.store import Candidate
from shared.intake.csv_rows import InvalidRow

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


def test_a_bad_line_is_an_invalid_row_and_the_lines_after_it_are_read() -> None:
    rows = list(read(b'recipient\na@x.example\n\xff@x.example\n"b@x.example\nc@x.example\n'))

    assert [(r.line, type(r).__name__) for r in rows] == [
        (2, "RecipientRow"),
        (3, "InvalidRow"),
        (4, "InvalidRow"),
        (5, "RecipientRow"),
    ]
    assert isinstance(rows[1], InvalidRow)
    assert "UTF-8" in rows[1].reason
    assert isinstance(rows[2], InvalidRow)
    assert "quote" in rows[2].reason


def test_result_cells_are_safe_in_a_spreadsheet_but_phone_numbers_keep_their_plus() -> None:
    assert result_cell("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert result_cell("-5") == "'-5"
    assert result_cell("+15550100123") == "+15550100123"
    assert result_cell("+1 555 0100") == "'+1 555 0100"
    assert result_cell("plain") == "plain"
    # Spreadsheets skip leading spaces and read full-width forms as ASCII.
    assert result_cell(" =1+1") == "' =1+1"
    assert result_cell("\uff1dHYPERLINK(1)") == "'\uff1dHYPERLINK(1)"
    assert result_cell("\u200b@SUM(A1)") == "'\u200b@SUM(A1)"
    assert result_cell(" plain") == " plain"


def test_results_are_never_lists_again() -> None:
    assert result_name("assignments/c1/may.csv") == "assignments/c1/may.result.csv"
    assert result_name("assignments/c1/MAY.CSV") == "assignments/c1/MAY.result.csv"
    assert ASSIGNMENT_PATH.match("assignments/c1/may.csv")
    assert ASSIGNMENT_PATH.match("assignments/c1/May.Result.CSV") is None
    assert ASSIGNMENT_PATH.match("assignments/c1/may.result.csv.asg-1.partial") is None
    assert ASSIGNMENT_PATH.match("assignments/may.csv") is None


def test_a_recipients_claim_is_a_claim_record_with_its_job_and_line() -> None:
    row = RecipientRow(7, "a@x.example", "a@x.example", "k", ())
    candidate = Candidate(coupon_id="c1", code="CODE-1", random_float=0.5, read_at=READ_AT)

    fields = claim_fields(campaign_id="c", row=row, candidate=candidate, now=READ_AT, job_id="j")

    record = ClaimRecord(claim_id="k-0", **fields)
    assert record.model_dump(exclude={"claim_id"}).keys() == fields.keys() - {"job_id", "line"}
    assert (record.code, record.user_id, fields["line"]) == ("CODE-1", "a@x.example", 7)


# --- the supply ----------------------------------------------------------------------------


class FakePool:
    """Unassigned coupons answering stream_unassigned's queries lazily, counting queries and
    the candidates actually read."""

    def __init__(self, count: int, seed: int = 3) -> None:
        rng = random.Random(seed)
        self.free = {f"c{i}": rng.random() for i in range(count)}
        self.lock = threading.Lock()
        self.queries: list[tuple[float | None, float | None, int]] = []
        self.read = 0

    def stream(
        self, low: float | None, inclusive: bool, high: float | None, limit: int
    ) -> Iterator[Candidate]:
        with self.lock:
            self.queries.append((low, high, limit))
            hits = sorted(
                (rf, cid)
                for cid, rf in self.free.items()
                if (low is None or (rf >= low if inclusive else rf > low))
                and (high is None or rf < high)
            )[:limit]
        for rf, cid in hits:
            with self.lock:
                self.read += 1
            yield Candidate(coupon_id=cid, code=cid, random_float=rf, read_at=READ_AT)

    def take(self, candidates: list[Candidate]) -> None:
        with self.lock:
            for c in candidates:
                del self.free[c.coupon_id]


def supply_of(
    pool: FakePool, *, start: float = 0.6, pull: int = 20, limit: int = 10_000
) -> CandidateSupply:
    return CandidateSupply(stream=pool.stream, start=start, pull=pull, query_limit=limit)


def drain(pool: FakePool, supply: CandidateSupply, count: int) -> list[Candidate]:
    handed: list[Candidate] = []
    while batch := supply.take(count):
        pool.take(batch)
        supply.settle(batch)
        handed += batch
    return handed


def test_the_supply_walks_the_pool_once_from_its_start_in_two_lazily_read_queries() -> None:
    pool = FakePool(1000)
    supply = supply_of(pool, start=0.6)

    first = supply.take(25)
    assert pool.read <= 25 + 2 * 20  # read as needed, not the whole pool
    pool.take(first)
    supply.settle(first)
    handed = first + drain(pool, supply, 25)

    assert len(handed) == len({c.coupon_id for c in handed}) == 1000
    assert supply.exhausted
    assert [(low, high) for low, high, _ in pool.queries] == [(0.6, 1.0), (0.0, 0.6), (None, None)]
    assert all(c.random_float >= 0.6 for c in first)


def test_a_query_that_reaches_its_limit_is_followed_by_the_next_from_its_floor() -> None:
    pool = FakePool(300)
    supply = supply_of(pool, start=0.0, limit=100)

    assert len(drain(pool, supply, 30)) == 300

    lows = [low or 0.0 for low, high, _ in pool.queries if high == 1.0]
    assert len(lows) == 4
    assert lows[0] == 0.0
    assert lows == sorted(lows)


def test_parallel_takers_never_get_the_same_candidate_and_given_back_ones_come_first() -> None:
    pool = FakePool(3000)
    supply = supply_of(pool, start=0.2, pull=50)
    first = supply.take(5)
    supply.give_back(first[:2])
    assert supply.take(2) == first[:2]
    pool.take(first)
    supply.settle(first)

    with ThreadPoolExecutor(4) as executor:
        results = list(executor.map(lambda _: drain(pool, supply, 7), range(4)))
    everything = [c.coupon_id for r in results for c in r] + [c.coupon_id for c in first]
    assert len(everything) == len(set(everything)) == 3000


def test_codes_released_behind_the_walk_are_found_by_the_final_look() -> None:
    pool = FakePool(30)
    supply = supply_of(pool, start=0.5, pull=100)
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
    supply = supply_of(pool, start=0.5, pull=10)
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


def test_codes_taken_elsewhere_make_the_supply_query_again_from_where_it_stands() -> None:
    pool = FakePool(500)
    supply = supply_of(pool, start=0.0, pull=40)
    batch = supply.take(20)
    assert len(pool.queries) == 1
    pool.take(batch)
    supply.settle(batch[:4])
    supply.settle(batch[4:], taken_elsewhere=16)  # the landing page got there first

    after = supply.take(20)

    assert len(pool.queries) == 2
    assert (pool.queries[1][0] or 0.0) >= batch[-1].random_float
    assert supply.metrics.flushes == 1
    assert not {c.coupon_id for c in after} & {c.coupon_id for c in batch}


def test_a_failed_query_reaches_a_taker() -> None:
    def stream(
        low: float | None, inclusive: bool, high: float | None, limit: int
    ) -> Iterator[Candidate]:
        raise ConnectionError("database unavailable")

    supply = CandidateSupply(stream=stream, start=0.5, pull=10, query_limit=10)
    with pytest.raises(ConnectionError):
        supply.take(3)


def test_closing_while_a_prefetch_reads_a_query_leaves_it_to_the_prefetch() -> None:
    """The job ends (or stops) while a prefetch is inside a query's stream: closing the stream
    then would fail ("generator already executing"); the prefetch closes it when it is done."""
    reading, release = threading.Event(), threading.Event()
    closed: list[bool] = []

    def stream(
        low: float | None, inclusive: bool, high: float | None, limit: int
    ) -> Iterator[Candidate]:
        try:
            for n in range(limit):
                if n == 15:  # the prefetch's read: the taker's 10 are out already
                    reading.set()
                    release.wait(5)
                yield Candidate(f"c{n}", f"c{n}", 0.5 + n / 1000, READ_AT)
        finally:
            closed.append(True)

    supply = CandidateSupply(stream=stream, start=0.5, pull=10, query_limit=100)
    batch = supply.take(10)  # leaves nothing in hand: a prefetch starts
    assert len(batch) == 10
    assert reading.wait(5)
    supply.close()  # no error, and the stream is left to the prefetch
    assert not closed
    release.set()
    deadline = time.monotonic() + 5
    while not closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert closed == [True]


def test_aliases_of_one_inbox_are_one_recipient_keyed_as_the_claim_path_keys_them() -> None:
    rows = list(read("recipient\njohn.doe@gmail.com\nJohnDoe+news@googlemail.com\n"))

    keys = {r.key for r in rows if isinstance(r, RecipientRow)}
    assert keys == {identity_key(IdentityKind.EMAIL, "johndoe@gmail.com")}
    assert [r.identity for r in rows if isinstance(r, RecipientRow)] == ["johndoe@gmail.com"] * 2


def test_a_phone_number_in_another_script_is_an_invalid_row() -> None:
    (row,) = read(
        "recipient\n+\u0661\u0665\u0665\u0665\u0665\u0665\u0665\u0660\u0661\u0660\u0660\n",
        IdentityKind.PHONE,
    )

    assert isinstance(row, InvalidRow)
    assert row.reason.startswith("not a phone number in international format")
