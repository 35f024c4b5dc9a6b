"""The live view of a sale: counters, the waiting room and a burn-down, never a read per claim.

One view costs the campaign document, the counters' config and shards (1 + shards reads) and
the room's heartbeats (one read per instance that served the room, at least one): about four
reads for a campaign on one counter shard and one claim_api instance. A view is kept for
LIVE_CACHE_SECONDS per admin_api instance, so every console watching the sale through that
instance shares it: a console refreshing every 2 s costs ~30 views a minute, and a hundred of
them no more than one view a second (60 a minute) per instance."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import InitVar, dataclass
from datetime import datetime

from google.cloud import firestore

from shared.cache import RecentReads
from shared.campaigns import store as campaign_store
from shared.usage.models import LiveCounters
from shared.usage.reading import UsageReader, burn_down, stats_of
from shared.waiting_room.service import WaitingRoomService

LIVE_CACHE_SECONDS = 1.0


@dataclass(kw_only=True, eq=False)
class LiveService:
    db: firestore.Client
    usage: UsageReader
    room: WaitingRoomService
    clock: Callable[[], datetime]
    cache_seconds: InitVar[float] = LIVE_CACHE_SECONDS

    def __post_init__(self, cache_seconds: float) -> None:
        self._views: RecentReads[str, LiveCounters] = RecentReads(max_age=cache_seconds)

    def view(self, campaign_id: str) -> LiveCounters:
        """The sale now, as read at most `cache_seconds` ago by this instance."""
        return self._views.get(campaign_id, lambda: self._read(campaign_id))

    def _read(self, campaign_id: str) -> LiveCounters:
        campaign = campaign_store.get_campaign(self.db, campaign_id=campaign_id)
        now = self.clock()
        totals = self.usage.recent_totals(campaign_id)
        stats = stats_of(campaign, totals, now=now)
        room = self.room.observe(campaign_id) if campaign.waiting_room_enabled else None
        seconds_left = (
            (stats.projected_sold_out_at - now).total_seconds()
            if stats.projected_sold_out_at is not None
            else None
        )
        return LiveCounters(
            campaign_id=campaign_id,
            status=campaign.status_at(now).value,
            at=now,
            codes_total=stats.codes_total,
            remaining=stats.remaining,
            claimed=stats.claimed,
            held=stats.held,
            redeemed=stats.redeemed,
            released=stats.released,
            waiting_room_enabled=campaign.waiting_room_enabled,
            queue_depth=room.queue_depth if room is not None else None,
            admitted_per_second=round(room.admitted_per_second, 2) if room is not None else None,
            claims_per_minute=stats.claims_last_minute,
            seconds_to_sell_out=round(seconds_left, 1) if seconds_left is not None else None,
            projected_sold_out_at=stats.projected_sold_out_at,
            series=burn_down(campaign, totals, remaining=stats.remaining, now=now),
        )
