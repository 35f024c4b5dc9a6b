"""What count_usage does with an event, and what operators read back: stats and reports."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from google.cloud import firestore

from shared.campaigns import store as campaign_store
from shared.campaigns.models import CampaignRecord, CampaignStats
from shared.errors import CampaignNotFound
from shared.events import models as events
from shared.events.bus import EventBus
from shared.usage.counters import CounterTotals, ShardedCounters, minute_key
from shared.usage.models import ReportGranularity, ReportPoint, UsageReport

log = logging.getLogger(__name__)

# How often one instance recomputes a campaign's exact stock after claims; close to the
# threshold it checks after every claim.
STOCK_CHECK_SECONDS = 0.5
STOCK_CHECK_MARGIN = 64
REMAINING_CACHE_SECONDS = 1.0


class UsageService:
    def __init__(
        self,
        *,
        db: firestore.Client,
        counters: ShardedCounters,
        bus: EventBus,
        clock: Callable[[], datetime],
    ) -> None:
        self._db = db
        self._counters = counters
        self._bus = bus
        self._clock = clock
        self._last_check: dict[str, tuple[float, int]] = {}
        self._taken_cache: dict[str, tuple[int, float]] = {}  # claimed - released
        self._lock = threading.Lock()

    def handle(self, event: events.Event) -> None:
        applied = self._counters.apply(event)
        log.info(
            "event applied" if applied else "event already applied",
            extra={"event_id": event.event_id, "type": event.type.value},
        )
        if isinstance(event, events.CouponClaimed | events.CodesImported):
            try:
                self.check_stock(event.campaign_id)
            except CampaignNotFound:
                # Nothing to announce for a campaign that is gone; retrying would not help.
                log.warning("event for an unknown campaign", extra={"event_id": event.event_id})

    def check_stock(self, campaign_id: str, *, force: bool = False) -> int | None:
        """Announce low stock and sold out (once each per pool size); returns remaining."""
        with self._lock:
            last = self._last_check.get(campaign_id)
        now_mono = time.monotonic()
        if (
            not force
            and last is not None
            and now_mono - last[0] < STOCK_CHECK_SECONDS
            and last[1] > STOCK_CHECK_MARGIN
        ):
            return None
        campaign = campaign_store.get_campaign(self._db, campaign_id=campaign_id)
        remaining = _free(campaign, self._counters.totals(campaign_id))
        with self._lock:
            self._last_check[campaign_id] = (
                now_mono,
                remaining - (campaign.low_stock_threshold or 0),
            )
        now = self._clock()
        threshold = campaign.low_stock_threshold
        if threshold is not None and campaign.codes_total and remaining <= threshold:
            self._bus.announce_once(
                events.low_stock(
                    campaign_id=campaign_id,
                    codes_total=campaign.codes_total,
                    remaining=max(remaining, 0),
                    threshold=threshold,
                    now=now,
                ),
                now=now,
            )
        if campaign.codes_total and remaining <= 0:
            self._bus.announce_once(
                events.sold_out(campaign_id=campaign_id, codes_total=campaign.codes_total, now=now),
                now=now,
            )
        return remaining

    # --- reading ------------------------------------------------------------------------------
    def stats(self, campaign: CampaignRecord, *, now: datetime) -> CampaignStats:
        totals = self._counters.totals(campaign.campaign_id)
        remaining = 0 if campaign.sold_out else max(_free(campaign, totals), 0)
        # The last 60 s: this minute so far plus the part of the previous minute still inside.
        this_minute = totals.claimed_by_minute.get(minute_key(now), 0)
        previous = totals.claimed_by_minute.get(minute_key(now - timedelta(minutes=1)), 0)
        elapsed = now.second + now.microsecond / 1e6
        last_minute = round(this_minute + previous * (60 - elapsed) / 60)
        projected = None
        if remaining > 0 and last_minute > 0:
            projected = now + timedelta(seconds=remaining * 60 / last_minute)
        return CampaignStats(
            codes_total=campaign.codes_total,
            claimed=totals.claimed,
            remaining=remaining,
            # Events may arrive out of order: a release counted before its hold reads -1 here.
            held=max(totals.held, 0),
            redeemed=totals.redeemed,
            released=totals.released,
            claims_last_minute=last_minute,
            projected_sold_out_at=projected,
        )

    def remaining(self, campaign: CampaignRecord) -> int:
        """Codes left, from the counters; cached briefly per instance, so a landing page
        polling the campaign does not read every shard per shopper."""
        if campaign.sold_out:
            return 0
        now = time.monotonic()
        with self._lock:
            cached = self._taken_cache.get(campaign.campaign_id)
        if cached is None or now - cached[1] > REMAINING_CACHE_SECONDS:
            totals = self._counters.totals(campaign.campaign_id)
            cached = (totals.claimed - totals.released, now)
            with self._lock:
                self._taken_cache[campaign.campaign_id] = cached
        return max(campaign.codes_total - cached[0], 0)

    def report(self, campaign: CampaignRecord, *, granularity: ReportGranularity) -> UsageReport:
        totals = self._counters.totals(campaign.campaign_id)
        columns = {
            "claimed": totals.claimed_by_hour,
            "imported": totals.imported_by_hour,
            "redeemed": totals.redeemed_by_hour,
            "released": totals.released_by_hour,
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
            series=[ReportPoint(period_start=at, **periods[at]) for at in sorted(periods)],
        )


def _free(campaign: CampaignRecord, totals: CounterTotals) -> int:
    """Codes nobody holds: every code, less every claim, plus every hold given back."""
    return campaign.codes_total - totals.claimed + totals.released


def period_start(hour: str, granularity: ReportGranularity) -> datetime:
    """The start of the report period holding the hour `YYYYMMDDHH` (UTC)."""
    at = datetime.strptime(hour, "%Y%m%d%H").replace(tzinfo=UTC)
    if granularity is ReportGranularity.HOUR:
        return at
    day = at.replace(hour=0)
    if granularity is ReportGranularity.DAY:
        return day
    return day - timedelta(days=day.weekday())  # the Monday of its ISO week
