"""What count_usage does with an event, and what operators read back: stats and reports."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeGuard

from google.cloud import firestore

from shared.cache import RecentReads
from shared.campaigns import store as campaign_store
from shared.campaigns.models import CampaignRecord, CampaignStats
from shared.errors import CampaignNotFound
from shared.events import models as events
from shared.events.bus import EventBus
from shared.gcp.batched_reads import ReadCoalescer
from shared.gcp.firestore import (
    announcement_ref,
    claims_collection,
    coupons_collection,
    jobs_collection,
    released_holds_collection,
    reversals_collection,
)
from shared.usage.counters import CounterTotals, ShardedCounters, minute_key
from shared.usage.models import BurnDownPoint, ReportGranularity, ReportPoint, UsageReport

log = logging.getLogger(__name__)

# How often one instance recomputes a campaign's exact stock after claims; close to the
# threshold it checks after every claim.
STOCK_CHECK_SECONDS = 0.5
STOCK_CHECK_MARGIN = 64
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


class UsageService:
    def __init__(
        self,
        *,
        db: firestore.Client,
        counters: ShardedCounters,
        bus: EventBus,
        clock: Callable[[], datetime],
        stock_cache_seconds: float = 1.0,
    ) -> None:
        self._db = db
        self._counters = counters
        self._bus = bus
        self._clock = clock
        self._last_check: dict[str, tuple[float, int]] = {}
        # codes not free (CounterTotals.taken), by campaign
        self._taken: RecentReads[str, int] = RecentReads(max_age=stock_cache_seconds)
        self._console_totals: RecentReads[str, CounterTotals] = RecentReads(
            max_age=CONSOLE_CACHE_SECONDS
        )
        self._lock = threading.Lock()
        self._reader = ReadCoalescer(db=db)

    def handle_batch(self, batch: events.ClaimedBatch) -> None:
        """Count a batch's claims, each once if its claim backs it (verified_claims): one read
        of their claims and one commit for them all (ShardedCounters.apply_claims), and one
        check of the stock."""
        checked = self.verified_claims(batch)
        if not checked:
            return
        applied = self._counters.apply_claims(checked)
        log.info(
            "batch applied",
            extra={
                "campaign_id": batch.campaign_id,
                "claims": len(batch.claims),
                "verified": len(checked),
                "applied": applied,
            },
        )
        try:
            self.check_stock(batch.campaign_id)
        except CampaignNotFound:
            log.warning("batch for an unknown campaign", extra={"campaign_id": batch.campaign_id})

    def verified_claims(self, batch: events.ClaimedBatch) -> list[events.CouponClaimed]:
        """The batch's claims as their records state them (as `verified` checks each), read
        together in one batched read; a claim no record backs is logged and left out, the
        others stand. deliver_webhooks sends only these (the container hands it this method)."""
        c = batch.campaign_id
        refs = [claims_collection(self._db, c).document(m.claim_id) for m in batch.claims]
        snapshots = self._reader.get(refs)
        checked = []
        for member, ref in zip(batch.claims, refs, strict=True):
            snapshot = snapshots[ref.path]
            verified = self._verified_claim(
                member, (snapshot.to_dict() or {}) if snapshot.exists else None
            )
            if verified is None:
                log.warning(
                    "event not backed by its record; acknowledged, not counted",
                    extra={"event_id": member.event_id, "type": member.type.value},
                )
            else:
                checked.append(verified)
        return checked

    def handle(self, event: events.Event) -> None:
        """Count an event, once, if it is true: a claim, a redemption, a release or a finished
        import that exists as the event says. Anything else is acknowledged and logged, never
        counted."""
        checked = self.verified(event)
        if checked is None:
            return
        if isinstance(checked, events.CouponReleased):
            # A released hold's claim is counted with its release, in case the claim's own event
            # was lost (its claim document, the recovery's source, is gone): the same id as the
            # claim's event, so it is never counted twice. Claim first, so remaining never
            # overshoots in between.
            self._counters.apply(implied_claim(checked))
        applied = self._counters.apply(checked)
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

    def verified(self, event: events.Event) -> events.Event | None:
        """The event as its own record states it, or None (logged) when no record backs it.

        A coupon.claimed must name an existing claim document with the same campaign, user and
        coupon (or, for a hold since released, its released record), and carry the id derived
        from it (a second id for one claim would count it twice); coupon.redeemed must match
        the redeemed coupon (or, for a redemption since reversed, its reversal record),
        coupon.released the released record, coupon.reversed the reversal record and
        coupon.voided the voided coupon; a
        codes.imported must name a finished job of the campaign that imported exactly `count`
        codes; a codes.assigned must name the first claim of its commit, made by that job at
        the line its id names, which records the commit's `count`; an announcement (low stock,
        sold out) must be the event its campaign's announcement marker holds. One or two reads
        by reference per event, shared with concurrent deliveries. deliver_webhooks sends only
        what passes here (the container hands it this method)."""
        checked: events.Event | None
        if isinstance(event, events.CouponClaimed):
            c = event.campaign_id
            claim = self._record(claims_collection(self._db, c).document(event.claim_id))
            checked = self._verified_claim(event, claim)
        elif isinstance(event, events.CouponRedeemed):
            checked = self._verified_redemption(event)
        elif isinstance(event, events.CouponReleased):
            checked = self._verified_release(event)
        elif isinstance(event, events.CouponReversed):
            checked = self._verified_reversal(event)
        elif isinstance(event, events.CouponVoided):
            checked = self._verified_void(event)
        elif isinstance(event, events.CodesImported):
            checked = self._verified_import(event)
        elif isinstance(event, events.CodesAssigned):
            checked = self._verified_assignment(event)
        else:
            checked = self._verified_announcement(event)
        if checked is None:
            log.warning(
                "event not backed by its record; acknowledged, not counted",
                extra={"event_id": event.event_id, "type": event.type.value},
            )
        return checked

    def _verified_claim(
        self, event: events.CouponClaimed, claim: dict[str, Any] | None
    ) -> events.CouponClaimed | None:
        """`claim`: the claim document the event names, as read (None: missing)."""
        c, claim_id = event.campaign_id, event.claim_id
        if _matches(claim, event) and isinstance(claimed_at := claim.get("claimed_at"), datetime):
            hold = claim.get("expires_at") is not None
            if event.event_id == events.claimed_event_id(c, claim_id, claimed_at, hold=hold):
                # The counters' hours follow the claim itself, not what the message says.
                return event.model_copy(
                    update={"occurred_at": claimed_at, "expires_at": claim.get("expires_at")}
                )
        # A hold released since: its slot is gone, or holds a later claim.
        micros = _suffix(event.event_id, f"claimed.{c}.{claim_id}.")
        if micros is None:
            return None
        released = self._record(
            released_holds_collection(self._db, c).document(f"{claim_id}-{micros}")
        )
        if (
            _matches(released, event)
            and isinstance(claimed_at := released.get("claimed_at"), datetime)
            and event.event_id == events.claimed_event_id(c, claim_id, claimed_at, hold=True)
        ):
            return event.model_copy(
                update={"occurred_at": claimed_at, "expires_at": released.get("expires_at")}
            )
        return None

    def _verified_release(self, event: events.CouponReleased) -> events.CouponReleased | None:
        c = event.campaign_id
        micros = _suffix(event.event_id, f"released.{c}.{event.coupon_id}.")
        if micros is None:
            return None
        record = self._record(
            released_holds_collection(self._db, c).document(f"{event.claim_id}-{micros}")
        )
        if not _matches(record, event) or record.get("claim_id") != event.claim_id:
            return None
        claimed_at, expires_at, released_at = (
            record.get(k) for k in ("claimed_at", "expires_at", "released_at")
        )
        if (
            not isinstance(claimed_at, datetime)
            or not isinstance(expires_at, datetime)
            or not isinstance(released_at, datetime)
            or event.event_id != events.released_event_id(c, event.coupon_id, claimed_at)
        ):
            return None
        return event.model_copy(
            update={"occurred_at": released_at, "claimed_at": claimed_at, "expired_at": expires_at}
        )

    def _verified_redemption(self, event: events.CouponRedeemed) -> events.CouponRedeemed | None:
        c = event.campaign_id
        number = events.redemption_number(event.event_id, c, event.coupon_id)
        if number is None:
            return None
        coupon = self._record(coupons_collection(self._db, c).document(event.coupon_id))
        if (
            coupon is not None
            and coupon.get("state") == "redeemed"
            and int(coupon.get("redemptions", 1)) == number
            and _same_redemption(coupon, event)
            and isinstance(redeemed_at := coupon.get("redeemed_at"), datetime)
        ):
            was_held = coupon.get("expires_at") is not None
            return event.model_copy(update={"occurred_at": redeemed_at, "was_held": was_held})
        # Reversed since: its record keeps what the coupon no longer says.
        record = self._record(
            reversals_collection(self._db, c).document(
                events.reversal_record_id(event.coupon_id, number)
            )
        )
        if (
            record is not None
            and _same_redemption(record, event)
            and isinstance(redeemed_at := record.get("redeemed_at"), datetime)
        ):
            return event.model_copy(
                update={"occurred_at": redeemed_at, "was_held": bool(record.get("was_held"))}
            )
        return None

    def _verified_reversal(self, event: events.CouponReversed) -> events.CouponReversed | None:
        c = event.campaign_id
        number = _suffix(event.event_id, f"reversed.{c}.{event.coupon_id}.")
        if number is None:
            return None
        record = self._record(
            reversals_collection(self._db, c).document(
                events.reversal_record_id(event.coupon_id, int(number))
            )
        )
        if (
            record is None
            or not _same_redemption(record, event)
            or record.get("on_cancel") != event.on_cancel.value
            or event.event_id != events.reversed_event_id(c, event.coupon_id, int(number))
            or not isinstance(reversed_at := record.get("reversed_at"), datetime)
        ):
            return None
        return event.model_copy(update={"occurred_at": reversed_at})

    def _verified_void(self, event: events.CouponVoided) -> events.CouponVoided | None:
        c = event.campaign_id
        coupon = self._record(coupons_collection(self._db, c).document(event.coupon_id))
        if (
            event.event_id != events.voided_event_id(c, event.coupon_id)
            or coupon is None
            or coupon.get("state") != "voided"
            or coupon.get("voided_from") != event.voided_from
            or not isinstance(voided_at := coupon.get("voided_at"), datetime)
        ):
            return None
        return event.model_copy(update={"occurred_at": voided_at})

    def _verified_import(self, event: events.CodesImported) -> events.CodesImported | None:
        record = self._record(jobs_collection(self._db).document(event.job_id))
        if (
            event.event_id == f"imported.{event.job_id}"
            and record is not None
            and record.get("campaign_id") == event.campaign_id
            and record.get("state") in ("done", "failed")
            and record.get("imported") == event.count
        ):
            return event
        return None

    def _verified_assignment(self, event: events.CodesAssigned) -> events.CodesAssigned | None:
        c = event.campaign_id
        claim = self._record(claims_collection(self._db, c).document(event.claim_id))
        if (
            claim is None
            or claim.get("campaign_id") != c
            or claim.get("job_id") != event.job_id
            or claim.get(events.COMMIT_COUNT) != event.count
            or not isinstance(line := claim.get("line"), int)
            or event.event_id != events.assigned_event_id(event.job_id, line)
            or not isinstance(claimed_at := claim.get("claimed_at"), datetime)
        ):
            return None
        # The counters' hours follow the commit itself, not what the message says.
        return event.model_copy(update={"occurred_at": claimed_at})

    def _verified_announcement(
        self, event: events.CampaignLowStock | events.CampaignSoldOut
    ) -> events.Event | None:
        marker = self._record(announcement_ref(self._db, event.campaign_id, event.event_id))
        if marker is None or marker.get("type") != event.type.value:
            return None
        announced = marker.get("event")
        if announced is None:
            return event  # a marker written before markers kept their event: id and type agree
        return event if events.event_from_dict(announced) == event else None

    def _record(self, ref: firestore.DocumentReference) -> dict[str, Any] | None:
        snapshot = self._reader.get([ref])[ref.path]
        return (snapshot.to_dict() or {}) if snapshot.exists else None

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
    remaining = 0 if campaign.sold_out else max(_free(campaign, totals), 0)
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


def _matches(
    record: dict[str, Any] | None,
    event: events.CouponClaimed | events.CouponReleased,
) -> TypeGuard[dict[str, Any]]:
    return record is not None and all(
        record.get(k) == getattr(event, k) for k in ("campaign_id", "user_id", "coupon_id")
    )


def _same_redemption(
    record: dict[str, Any], event: events.CouponRedeemed | events.CouponReversed
) -> bool:
    """A coupon (or a reversal's record) names the event's order, claim and shopper."""
    return (
        record.get("order_id") == event.order_id
        and record.get("claim_id") == event.claim_id
        and record.get("assigned_to", record.get("user_id")) == event.user_id
    )


def _suffix(event_id: str, prefix: str) -> str | None:
    """The microseconds an id ends with after `prefix`, or None."""
    rest = event_id[len(prefix) :] if event_id.startswith(prefix) else ""
    return rest if rest.isdigit() else None


def implied_claim(release: events.CouponReleased) -> events.CouponClaimed:
    """The claim a (verified) release proves: the hold's own coupon.claimed, id and all."""
    return events.CouponClaimed(
        event_id=events.claimed_event_id(
            release.campaign_id, release.claim_id, release.claimed_at, hold=True
        ),
        campaign_id=release.campaign_id,
        occurred_at=release.claimed_at,
        coupon_id=release.coupon_id,
        user_id=release.user_id,
        claim_id=release.claim_id,
        expires_at=release.expired_at,
    )


def _free(campaign: CampaignRecord, totals: CounterTotals) -> int:
    """Codes nobody holds: every code, less every claim, plus every hold and redemption given
    back, less every code voided while nobody held it."""
    return campaign.codes_total - totals.taken


def period_start(hour: str, granularity: ReportGranularity) -> datetime:
    """The start of the report period holding the hour `YYYYMMDDHH` (UTC)."""
    at = datetime.strptime(hour, "%Y%m%d%H").replace(tzinfo=UTC)
    if granularity is ReportGranularity.HOUR:
        return at
    day = at.replace(hour=0)
    if granularity is ReportGranularity.DAY:
        return day
    return day - timedelta(days=day.weekday())  # the Monday of its ISO week
