"""The sale's pace and projected sell-out time shown in stats (shared/usage/reading.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.usage.counters import minute_key
from shared.usage.reading import claims_last_minute, projected_sold_out_at

NOW = datetime(2026, 11, 27, 12, 0, 15, tzinfo=UTC)  # 15 s into the minute


def test_the_last_minute_takes_the_part_of_the_previous_minute_still_inside() -> None:
    by_minute = {
        minute_key(NOW): 30,
        minute_key(NOW - timedelta(minutes=1)): 80,  # 45 of its 60 s are inside: 60 claims
        minute_key(NOW - timedelta(minutes=2)): 1_000,  # outside the window
    }

    assert claims_last_minute(by_minute, now=NOW) == 30 + 60


def test_at_a_minutes_start_the_whole_previous_minute_counts() -> None:
    start = NOW.replace(second=0)
    by_minute = {minute_key(start - timedelta(minutes=1)): 120}

    assert claims_last_minute(by_minute, now=start) == 120
    assert claims_last_minute({}, now=start) == 0


def test_sell_out_is_projected_at_the_last_minutes_pace() -> None:
    # 900 codes left at 90 claims a minute: ten minutes from now.
    assert projected_sold_out_at(900, 90, now=NOW) == NOW + timedelta(minutes=10)
    assert projected_sold_out_at(1, 120, now=NOW) == NOW + timedelta(seconds=0.5)


def test_no_projection_without_codes_or_without_claims() -> None:
    assert projected_sold_out_at(0, 90, now=NOW) is None
    assert projected_sold_out_at(900, 0, now=NOW) is None
