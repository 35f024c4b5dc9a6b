"""Usage models: reports, and the reconciliation of counters with the documents."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, computed_field

from shared.types import RequestBody, UtcTime


class ReportGranularity(StrEnum):
    HOUR = "hour"
    DAY = "day"
    WEEK = "week"  # ISO weeks: each period starts on a Monday, 00:00 UTC


class ReportPoint(BaseModel):
    period_start: UtcTime
    claimed: int
    imported: int
    redeemed: int
    released: int
    reversed: int


class UsageReport(BaseModel):
    campaign_id: str
    granularity: ReportGranularity
    claimed: int
    imported: int
    redeemed: int
    released: int
    reversed: int
    series: list[ReportPoint]


class CounterCheck(BaseModel):
    counted: int  # from the coupon documents
    counters: int  # what the sharded counters said before any repair

    @computed_field  # type: ignore[prop-decorator]
    @property
    def difference(self) -> int:
        return self.counted - self.counters


class ReconciliationReport(BaseModel):
    campaign_id: str
    checked_at: UtcTime
    repaired: bool
    # Codes not free now (coupons assigned) against the counters' claimed - released - returned
    # + voided_available; redeemed: coupons redeemed now against redemptions - reversals.
    claimed: CounterCheck
    imported: CounterCheck
    redeemed: CounterCheck
    held: CounterCheck
    hours_differing: int


class ReconcileRequest(RequestBody):
    repair: bool = True


class BurnDownPoint(BaseModel):
    minute: UtcTime  # the minute's start
    claimed: int  # claims in that minute
    remaining: int  # codes left at its end (later releases and imports not taken back)


class LiveCounters(BaseModel):
    """A sale as the console shows it, refreshed every couple of seconds."""

    campaign_id: str
    status: str
    at: UtcTime
    codes_total: int
    remaining: int
    claimed: int
    held: int
    redeemed: int
    released: int
    waiting_room_enabled: bool
    queue_depth: int | None  # null without a waiting room
    admitted_per_second: float | None
    claims_per_minute: int  # over the last 60 s
    seconds_to_sell_out: float | None  # at the last minute's pace; null when nothing sells
    projected_sold_out_at: UtcTime | None
    series: list[BurnDownPoint]  # the last hour, a point a minute, oldest first
