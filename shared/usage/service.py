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
from shared.usage.counters import ShardedCounters, minute_key
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
        self._claimed_cache: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def handle(self, event: events.Event) -> None:
        applied = self._counters.apply(event)
        log.info(
            "event applied" if applied else "event already applied",
            extra={"event_id": event.event_id, "type": event.type.value},
        )
        if isinstance(event, events.CouponClaimed | events.CodesAssigned | events.CodesImported):
            try:
                # A bulk assignment's event moves the stock by a batch at once: always checked.
                self.check_stock(event.campaign_id, force=isinstance(event, events.CodesAssigned))
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
        remaining = campaign.codes_total - self._counters.totals(campaign_id).claimed
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
        remaining = 0 if campaign.sold_out else max(campaign.codes_total - totals.claimed, 0)
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
            cached = self._claimed_cache.get(campaign.campaign_id)
        if cached is None or now - cached[1] > REMAINING_CACHE_SECONDS:
            cached = (self._counters.totals(campaign.campaign_id).claimed, now)
            with self._lock:
                self._claimed_cache[campaign.campaign_id] = cached
        return max(campaign.codes_total - cached[0], 0)

    def report(self, campaign: CampaignRecord, *, granularity: ReportGranularity) -> UsageReport:
        totals = self._counters.totals(campaign.campaign_id)
        width = 10 if granularity is ReportGranularity.HOUR else 8  # YYYYMMDDHH or YYYYMMDD
        claimed: dict[str, int] = {}
        imported: dict[str, int] = {}
        for key, value in totals.claimed_by_hour.items():
            claimed[key[:width]] = claimed.get(key[:width], 0) + value
        for key, value in totals.imported_by_hour.items():
            imported[key[:width]] = imported.get(key[:width], 0) + value
        fmt = "%Y%m%d%H" if granularity is ReportGranularity.HOUR else "%Y%m%d"
        points = [
            ReportPoint(
                period_start=datetime.strptime(key, fmt).replace(tzinfo=UTC),
                claimed=claimed.get(key, 0),
                imported=imported.get(key, 0),
            )
            for key in sorted(set(claimed) | set(imported))
        ]
        return UsageReport(
            campaign_id=campaign.campaign_id,
            granularity=granularity,
            claimed=totals.claimed,
            imported=totals.imported,
            series=points,
        )
