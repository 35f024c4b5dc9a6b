"""The sweep: what must happen even when an instance died at the wrong moment.

It releases the holds that expired unredeemed (shared/claims/holds.py), publishes the outbox,
re-publishes recent claims whose event the counters never saw, re-checks every recent
campaign's stock so low-stock and sold-out announcements are never lost, and drains every
webhook endpoint with a delivery due (retries, and what a crashed drainer left).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from google.cloud import firestore

from shared.campaigns import store as campaign_store
from shared.claims.holds import HoldReleaser
from shared.claims.recovery import republish_unseen_claims
from shared.events.bus import EventBus
from shared.maintenance.models import SweepRequest, SweepResult
from shared.usage.counting import UsageCounter
from shared.webhooks.service import WebhookService


@dataclass(kw_only=True, eq=False)
class Sweeper:
    db: firestore.Client
    bus: EventBus
    usage_counter: UsageCounter
    holds: HoldReleaser
    webhooks: WebhookService
    clock: Callable[[], datetime]

    def sweep(self, request: SweepRequest) -> SweepResult:
        now = self.clock()
        window = timedelta(minutes=request.window_minutes)
        grace = timedelta(seconds=request.grace_seconds)
        released = self.holds.release_expired(limit=request.max_releases)
        # After the releases: an event whose publish failed just now goes out on this sweep.
        outbox = self.bus.flush_outbox()
        failures = released.failures + outbox.failures
        republished = 0
        # Every campaign, page by page: a sweep that stopped at the first thousand would leave
        # the others' lost events unpublished for good.
        for campaign in campaign_store.iter_campaigns(self.db):
            if campaign.ends_at <= now - window:
                continue
            report = republish_unseen_claims(
                self.db,
                self.bus,
                campaign_id=campaign.campaign_id,
                since=now - window,
                until=now - grace,
            )
            republished += report.republished
            failures += report.failures
            self.usage_counter.check_stock(campaign.campaign_id, force=True)
        # Last: it takes up to the drain budget when endpoints are slow.
        webhooks = self.webhooks.drain_due()
        return SweepResult(
            holds_released=released.released,
            outbox_published=outbox.published,
            claims_republished=republished,
            webhook_attempts=webhooks.attempted,
            webhook_deliveries=webhooks.delivered,
            failures=failures,
        )
