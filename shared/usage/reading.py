"""What operators and landing pages read back from the counters: codes left, stats, reports,
the burn-down."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from shared.cache import RecentReads
from shared.campaigns.models import CampaignRecord, CampaignStats
from shared.usage.counters import CounterTotals, ShardedCounters, minute_key
from shared.usage.models import BurnDownPoint, ReportGranularity, ReportPoint, UsageReport

# Consoles (the campaign list, the live view) read the counters through a per-instance cache
# this old at most: a hundred consoles refreshing every 2 s cost the reads of one.
CONSOLE_CACHE_SECONDS = 1.0


def claims_last_minute(claimed_by_minute: Mapping[str, int], *, now: datetime) -> int:
    """Claims in the 60 s before `now`: this minute so far, plus the previous minute's claims
    weighted by the part of it still inside the window (spread evenly over that minute)."""
    this_minute = claimed_by_minute.get(minute_key(now), 0)
    previous = claimed_by_minute.get(minute_key(now - timedelta(minutes=1)), 0)
    elapsed = now.second + now.microsecond / 1e6
    return round(this_minute + previous * (60 - elapsed) / 60)


def projected_sold_out_at(remaining: int, last_minute: int, *, now: datetime) -> datetime | None:
    """When the codes left run out at the last minute's pace; None without codes or pace."""
    if remaining <= 0 or last_minute <= 0:
        return None
    return now + timedelta(seconds=remaining * 60 / last_minute)


class UsageReader:
    def __init__(self, *, counters: ShardedCounters, stock_cache_seconds: float = 1.0) -> None:
        self._counters = counters
        # codes not free (CounterTotals.taken), by campaign
        self._taken: RecentReads[str, int] = RecentReads(max_age=stock_cache_seconds)
        self._console_totals: RecentReads[str, CounterTotals] = RecentReads(
            max_age=CONSOLE_CACHE_SECONDS
        )

    def stats(self, campaign: CampaignRecord, *, now: datetime) -> CampaignStats:
        return stats_of(campaign, self._counters.totals(campaign.campaign_id), now=now)

    def recent_totals(self, campaign_id: str) -> CounterTotals:
        """The counters as read at most CONSOLE_CACHE_SECONDS ago by this instance."""
        return self._console_totals.get(campaign_id, lambda: self._counters.totals(campaign_id))

    def recent_stats(self, campaign: CampaignRecord, *, now: datetime) -> CampaignStats:
        """Stats for consoles, from recent_totals (one read of the shards per campaign and
        instance a second, however many consoles look)."""
        return stats_of(campaign, self.recent_totals(campaign.campaign_id), now=now)

    def remaining(self, campaign: CampaignRecord) -> int:
        """Codes left, from the counters; cached briefly per instance, so a landing page
        polling the campaign does not read every shard per shopper."""
        if campaign.sold_out:
            return 0

        def taken() -> int:
            return self._counters.totals(campaign.campaign_id).taken

        return max(campaign.codes_total - self._taken.get(campaign.campaign_id, taken), 0)

    def report(self, campaign: CampaignRecord, *, granularity: ReportGranularity) -> UsageReport:
        totals = self._counters.totals(campaign.campaign_id)
        columns = {
            "claimed": totals.claimed_by_hour,
            "imported": totals.imported_by_hour,
            "redeemed": totals.redeemed_by_hour,
            "released": totals.released_by_hour,
            "reversed": totals.reversed_by_hour,
        }
        periods: dict[datetime, dict[str, int]] = {}
        for column, by_hour in columns.items():
            for key, value in by_hour.items():
                start = period_start(key, granularity)
                point = periods.setdefault(start, dict.fromkeys(columns, 0))
                point[column] += value
        return UsageReport(
            campaign_id=campaign.campaign_id,
            granularity=granularity,
            claimed=totals.claimed,
            imported=totals.imported,
            redeemed=totals.redeemed,
            released=totals.released,
            reversed=totals.reversed,
            series=[ReportPoint(period_start=at, **periods[at]) for at in sorted(periods)],
        )


def stats_of(campaign: CampaignRecord, totals: CounterTotals, *, now: datetime) -> CampaignStats:
    """A campaign's stats from its counters' totals."""
    remaining = 0 if campaign.sold_out else max(totals.free(campaign.codes_total), 0)
    last_minute = claims_last_minute(totals.claimed_by_minute, now=now)
    projected = projected_sold_out_at(remaining, last_minute, now=now)
    return CampaignStats(
        codes_total=campaign.codes_total,
        claimed=totals.claimed,
        remaining=remaining,
        # Events may arrive out of order: a release counted before its hold reads -1 here.
        held=max(totals.held, 0),
        redeemed=totals.redeemed,
        released=totals.released,
        reversed=totals.reversed,
        voided=totals.voided,
        claims_last_minute=last_minute,
        projected_sold_out_at=projected,
    )


BURN_DOWN_MINUTES = 60


def burn_down(
    campaign: CampaignRecord, totals: CounterTotals, *, remaining: int, now: datetime
) -> list[BurnDownPoint]:
    """Claims a minute over the last hour of the sale (from its start), and the codes left at
    the end of each minute: what is left now plus what was claimed after it."""
    start = max(campaign.starts_at, now - timedelta(minutes=BURN_DOWN_MINUTES))
    if start > now:
        return []
    first = start.replace(second=0, microsecond=0)
    minutes = [
        first + timedelta(minutes=n) for n in range(int((now - first).total_seconds() // 60) + 1)
    ]
    claimed = [totals.claimed_by_minute.get(minute_key(m), 0) for m in minutes]
    points: list[BurnDownPoint] = []
    left = remaining
    for minute, count in zip(reversed(minutes), reversed(claimed), strict=True):
        points.append(BurnDownPoint(minute=minute, claimed=count, remaining=left))
        left += count
    return points[::-1]


def period_start(hour: str, granularity: ReportGranularity) -> datetime:
    """The start of the report period holding the hour `YYYYMMDDHH` (UTC)."""
    at = datetime.strptime(hour, "%Y%m%d%H").replace(tzinfo=UTC)
    if granularity is ReportGranularity.HOUR:
        return at
    day = at.replace(hour=0)
    if granularity is ReportGranularity.DAY:
        return day
    return day - timedelta(days=day.weekday())  # the Monday of its ISO week
