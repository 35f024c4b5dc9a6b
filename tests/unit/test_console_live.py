"""The live view's arithmetic: the waiting room's queue and admission rate from heartbeats, and
the burn-down from the per-minute counters."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from shared.campaigns.models import CampaignRecord
from shared.usage.counters import CounterTotals, minute_key
from shared.usage.reading import burn_down
from shared.waiting_room.admission import RoomShare
from shared.waiting_room.service import observe

NOW = datetime(2026, 11, 27, 12, 30, 20, tzinfo=UTC)


def _share(*, tickets: tuple[int, ...], admitted: tuple[int, ...], first_tick: int) -> RoomShare:
    return RoomShare(
        published_at=float(first_tick + len(admitted)),
        first_slot=0,
        before=5,
        tickets=tickets,
        first_tick=first_tick,
        admitted=admitted,
        base_tick=first_tick,
        base_passed=10.0,
        since=0,
        settled=True,
    )


def test_the_queue_is_what_was_issued_and_not_passed_and_the_rate_the_last_full_ticks() -> None:
    # Two instances: 5 + 100 and 5 + 40 tickets; 10 passed before the base tick, then 2 and 3 a
    # tick for 10 ticks.
    a = _share(tickets=(50, 50), admitted=(2,) * 10, first_tick=100)
    b = _share(tickets=(40,), admitted=(3,) * 10, first_tick=100)

    seen = observe([a, b], live=2, now=110.5, tick=1.0)

    assert seen.queue_depth == 150 - (10 + 50)
    assert seen.admitted_per_second == 5.0
    assert seen.instances == 2


def test_more_admissions_than_tickets_is_no_queue() -> None:
    # Shoppers let straight in while the room was open count as admitted too.
    a = _share(tickets=(1,), admitted=(4,) * 10, first_tick=100)

    seen = observe([a], live=1, now=110.5, tick=1.0)

    assert seen.queue_depth == 0
    assert seen.admitted_per_second == 4.0


def test_no_heartbeat_is_an_empty_room() -> None:
    seen = observe([], live=0, now=1.0, tick=1.0)

    assert (seen.queue_depth, seen.admitted_per_second, seen.instances) == (0, 0.0, 0)


def _campaign(starts_at: datetime) -> CampaignRecord:
    return CampaignRecord(
        campaign_id="c",
        title="t",
        starts_at=starts_at,
        ends_at=starts_at + timedelta(days=1),
        codes_total=100,
        created_at=starts_at,
        updated_at=starts_at,
    )


def test_the_burn_down_has_a_point_a_minute_from_the_start_ending_at_what_is_left() -> None:
    start = NOW - timedelta(minutes=3, seconds=5)  # 12:27:15
    totals = CounterTotals(
        claimed=30,
        claimed_by_minute=Counter(
            {minute_key(start): 10, minute_key(NOW - timedelta(minutes=1)): 15, minute_key(NOW): 5}
        ),
    )

    points = burn_down(_campaign(start), totals, remaining=70, now=NOW)

    assert [p.minute.strftime("%H:%M") for p in points] == ["12:27", "12:28", "12:29", "12:30"]
    assert [p.claimed for p in points] == [10, 0, 15, 5]
    assert [p.remaining for p in points] == [90, 90, 75, 70]


def test_the_burn_down_keeps_the_last_hour_and_is_empty_before_the_start() -> None:
    long_ago = _campaign(NOW - timedelta(days=2))
    later = _campaign(NOW + timedelta(minutes=5))

    assert len(burn_down(long_ago, CounterTotals(), remaining=100, now=NOW)) == 61
    assert burn_down(later, CounterTotals(), remaining=100, now=NOW) == []
