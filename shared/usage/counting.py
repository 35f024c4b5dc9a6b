"""What count_usage does with an event: count it, once, if its record backs it
(shared/usage/verification.py), then announce low stock and sold out when the count says so."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from google.cloud import firestore

from shared.campaigns import store as campaign_store
from shared.errors import CampaignNotFound
from shared.events import models as events
from shared.events.bus import EventBus
from shared.usage.counters import ShardedCounters
from shared.usage.verification import EventVerifier

log = logging.getLogger(__name__)

# How often one instance recomputes a campaign's exact stock after claims; close to the
# threshold it checks after every claim.
STOCK_CHECK_SECONDS = 0.5
STOCK_CHECK_MARGIN = 64


@dataclass(kw_only=True, eq=False)
class UsageCounter:
    db: firestore.Client
    counters: ShardedCounters
    verifier: EventVerifier
    bus: EventBus
    clock: Callable[[], datetime]
    # By campaign: when this instance last computed its stock, and how far above its
    # low-stock threshold it was.
    _last_check: dict[str, tuple[float, int]] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def handle_batch(self, batch: events.ClaimedBatch) -> None:
        """Count a batch's claims, each once if its claim backs it: one read of their claims
        (EventVerifier.verified_claims) and one commit for them all
        (ShardedCounters.apply_claims), and one check of the stock."""
        checked = self.verifier.verified_claims(batch)
        if not checked:
            return
        applied = self.counters.apply_claims(checked)
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

    def handle(self, event: events.Event) -> None:
        """Count an event, once, if it is true: a claim, a redemption, a release or a finished
        import that exists as the event says. Anything else is acknowledged and logged, never
        counted."""
        checked = self.verifier.verified(event)
        if checked is None:
            return
        if isinstance(checked, events.CouponReleased):
            # A released hold's claim is counted with its release, in case the claim's own event
            # was lost (its claim document, the recovery's source, is gone): the same id as the
            # claim's event, so it is never counted twice. Claim first, so remaining never
            # overshoots in between.
            self.counters.apply(implied_claim(checked))
        applied = self.counters.apply(checked)
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
        campaign = campaign_store.get_campaign(self.db, campaign_id=campaign_id)
        remaining = self.counters.totals(campaign_id).free(campaign.codes_total)
        with self._lock:
            self._last_check[campaign_id] = (
                now_mono,
                remaining - (campaign.low_stock_threshold or 0),
            )
        now = self.clock()
        threshold = campaign.low_stock_threshold
        if threshold is not None and campaign.codes_total and remaining <= threshold:
            self.bus.announce_once(
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
            self.bus.announce_once(
                events.sold_out(campaign_id=campaign_id, codes_total=campaign.codes_total, now=now),
                now=now,
            )
        return remaining


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
