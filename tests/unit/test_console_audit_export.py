"""The audit log's and the export's pure parts: how an edit is named and shown, and how a
value becomes a CSV cell no spreadsheet runs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.audit.models import Actor, AuditAction, AuditContext
from shared.campaigns.models import CampaignRecord, audited
from shared.campaigns.store import update_action
from shared.control.exports import ExportKind, cell, claim_row, coupon_row

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
