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
