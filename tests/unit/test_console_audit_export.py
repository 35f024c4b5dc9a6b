"""The audit log's and the export's pure parts: how an edit is named and shown, and how a
value becomes a CSV cell no spreadsheet runs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from google.api_core import exceptions as gexc

from shared.audit.models import Actor, AuditAction, AuditContext
from shared.campaigns.models import CampaignRecord, audited
from shared.campaigns.store import update_action
from shared.control.exports import ExportKind, cell, claim_row, coupon_row, documents

AT = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("after", "action"),
    [
        ({"paused": True}, AuditAction.PAUSE),
        ({"paused": False}, AuditAction.RESUME),
        ({"paused": True, "title": "x"}, AuditAction.UPDATE),
        ({"title": "x"}, AuditAction.UPDATE),
        ({}, AuditAction.UPDATE),
    ],
)
def test_a_pause_or_resume_alone_is_named_so(after: dict[str, object], action: AuditAction) -> None:
    assert update_action({}, after) is action


def test_an_entry_keeps_the_time_as_a_time_and_the_rest_as_json() -> None:
    context = AuditContext(actor=Actor(uid="u1", email="a@b.example"), at=AT)
    record = CampaignRecord(
        campaign_id="c", title="Drop", starts_at=AT, ends_at=AT, created_at=AT, updated_at=AT
    )

    entry = context.entry(
        AuditAction.CREATE, campaign_id="c", target="c", after=audited(record), version=1
    )
    fields = entry.fields()

    assert fields["at"] == AT
    assert fields["actor"] == {"uid": "u1", "email": "a@b.example"}
    assert fields["after"]["starts_at"] == "2026-11-27T12:00:00Z"
    assert fields["after"]["title"] == "Drop"
    assert "created_at" not in fields["after"]  # what an admin edits, nothing else
    assert fields["action"] == "create"
    assert len(entry.entry_id) == 20


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ('=HYPERLINK("http://x")', '\'=HYPERLINK("http://x")'),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tTAB", "'\tTAB"),
        ("SAFE-1", "SAFE-1"),
        (None, ""),
        (AT, "2026-11-27T12:00:00.000Z"),
        (3, "3"),
    ],
)
def test_a_cell_is_never_a_formula(value: object, shown: str) -> None:
    assert cell(value) == shown


def test_rows_follow_their_columns() -> None:
    claim = {"user_id": "=u", "code": "C1", "claimed_at": AT, "order_id": None}
    coupon = {
        "code": "C1",
        "state": "redeemed",
        "assigned_to": "u",
        "assigned_at": AT,
        "redeemed_at": AT,
        "order_id": "o-1",
    }

    assert claim_row(claim, "k1") == ["k1", "'=u", "C1", "claimed", AT_TEXT, "", "", ""]
    assert coupon_row(coupon, ExportKind.REDEMPTIONS) == ["C1", "o-1", "u", AT_TEXT, AT_TEXT]
    assert coupon_row(coupon, ExportKind.CODES) == ["C1", "redeemed", "u", AT_TEXT, AT_TEXT, "o-1"]
    assert coupon_row({"code": "C2", "assigned": True}, ExportKind.CODES)[1] == "claimed"


AT_TEXT = "2026-11-27T12:00:00.000Z"


class FakeQuery:
    """Just what `documents` asks of a query: documents in id order, a cursor and a limit; its
    stream breaks once, after `break_after` documents, if told to."""

    def __init__(self, ids: list[str], broken: list[int], after: str = "", limit: int = 0) -> None:
        self.ids, self.broken, self.after, self.size = ids, broken, after, limit

    def order_by(self, field: str) -> FakeQuery:
        assert field == "__name__"
        return self

    def start_after(self, last: SimpleNamespace) -> FakeQuery:
        return type(self)(self.ids, self.broken, last.id, self.size)

    def limit(self, size: int) -> FakeQuery:
        return type(self)(self.ids, self.broken, self.after, size)

    def stream(self) -> Iterator[SimpleNamespace]:
        page = [i for i in sorted(self.ids) if i > self.after][: self.size]
        for n, doc_id in enumerate(page):
            if self.broken and n == self.broken[0]:
                self.broken.pop()
                raise gexc.ServiceUnavailable("stream reset")  # type: ignore[no-untyped-call]
            yield SimpleNamespace(id=doc_id)


def test_documents_come_page_after_page_and_a_broken_stream_is_taken_up_where_it_stopped() -> None:
    ids = [f"d{n:03d}" for n in range(25)]

    whole = [s.id for s in documents(FakeQuery(ids, []), page_size=10)]  # type: ignore[arg-type]
    resumed = [s.id for s in documents(FakeQuery(ids, [3]), page_size=10)]  # type: ignore[arg-type]

    assert whole == ids
    assert resumed == ids


def test_a_stream_that_keeps_breaking_fails_the_job() -> None:
    class Broken(FakeQuery):
        def stream(self) -> Iterator[SimpleNamespace]:
            raise gexc.ServiceUnavailable("down")  # type: ignore[no-untyped-call]
            yield  # a generator

    with pytest.raises(gexc.ServiceUnavailable):
        list(documents(Broken(["a"], []), page_size=10))  # type: ignore[arg-type]
