"""Webhooks to the businesses that run the sales: subscriptions (admin_api), recording each
event's deliveries (deliver_webhooks, on its own push subscription to `coupon-events`), and the
drains that send them, started by that function and by the scheduled sweep (retries).
"""

from __future__ import annotations

import json
import logging
import random
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

from google.cloud import firestore

from shared.audit.models import AuditAction, AuditContext, entry_for
from shared.campaigns import store as campaign_store
from shared.errors import (
    DeliveryNotFound,
    TooManyWebhooks,
    WebhookNotFound,
    WebhookUrlNotAllowed,
)
from shared.events.models import ClaimedBatch, CouponClaimed, Event, encode_event
from shared.gcp.batched_reads import ReadCoalescer
from shared.settings import Settings
from shared.types import rfc3339
from shared.webhooks import guard, routes, store
from shared.webhooks.delivery import DrainRun, Endpoint, RetryPolicy, RunReport
from shared.webhooks.models import (
    MAX_WEBHOOKS_PER_CAMPAIGN,
    DeliveryList,
    DeliveryQueued,
    DeliveryState,
    DeliveryView,
    WebhookCreate,
    WebhookCreated,
    WebhookList,
    WebhookRecord,
    WebhookView,
)
from shared.webhooks.signing import SecretBox, new_secret

log = logging.getLogger(__name__)

# The type of an admin's test event (no other event has it; receivers may ignore it).
TEST_EVENT = "webhook.test"
# Endpoints drained side by side by one caller (each drain mostly waits on its endpoint).
PARALLEL_ENDPOINTS = 16


class WebhookService:
    def __init__(
        self,
        *,
        db: firestore.Client,
        settings: Settings,
        clock: Callable[[], datetime],
        verify: Callable[[Event], Event | None],
        verify_claims: Callable[[ClaimedBatch], list[CouponClaimed]],
        resolve: guard.Resolver = guard.resolve_host,
    ) -> None:
        self._db = db
        # The check count_usage makes (EventVerifier.verified): only events their records back
        # are signed and sent to a business.
        self._verify = verify
        self._verify_claims = verify_claims
        self._settings = settings
        self._clock = clock
        self._resolve = resolve
        self._addresses = guard.AddressPolicy(allow_local=settings.is_local)
        self._retry = RetryPolicy(base_seconds=settings.webhook_retry_base_seconds)
        self._box: SecretBox | None = None
        self._box_lock = threading.Lock()
        # Concurrent events share one read of their campaigns' lists of webhooks.
        self._reader = ReadCoalescer(db=db)

    def _secrets(self) -> SecretBox:
        # Built on first need: without CODEDROP_WEBHOOK_KEY (outside demo- projects) only the
        # webhook routes and deliveries fail, and they say why.
        with self._box_lock:
            if self._box is None:
                self._box = SecretBox(self._settings.webhook_sealing_key)
            return self._box

    # --- subscriptions (admin_api) --------------------------------------------------------------
    def subscribe(
        self, *, campaign_id: str, data: WebhookCreate, audit: AuditContext | None = None
    ) -> WebhookCreated:
        campaign_store.get_campaign(self._db, campaign_id=campaign_id)
        try:
            url = self._addresses.check_url(data.url, self._resolve)
        except guard.AddressRefused as exc:
            raise WebhookUrlNotAllowed(f"Webhook URL refused: {exc}.") from exc
        webhook_id = f"wh_{secrets.token_hex(8)}"
        secret = new_secret()
        record = WebhookRecord(
            webhook_id=webhook_id,
            campaign_id=campaign_id,
            url=url,
            events=data.events,
            secret_sealed=self._secrets().seal(secret, webhook_id=webhook_id),
            max_per_second=data.max_per_second,
            max_in_flight=data.max_in_flight,
            created_at=self._clock(),
        )
        entry = entry_for(
            audit,
            AuditAction.WEBHOOK_CREATE,
            campaign_id=campaign_id,
            target=webhook_id,
            after={"url": url, "events": list(data.events)},
        )
        if not store.create_webhook(
            self._db, record=record, limit=MAX_WEBHOOKS_PER_CAMPAIGN, audit=entry
        ):
            raise TooManyWebhooks(
                f"A campaign has at most {MAX_WEBHOOKS_PER_CAMPAIGN} webhooks; delete one first."
            )
        # Until every publisher's read of the list has the webhook, its events might not be
        # marked for deliver_webhooks (shared/webhooks/routes.py): answer after that.
        time.sleep(routes.settle_seconds(self._settings.webhook_routes_seconds))
        log.info("webhook created", extra={"webhook_id": webhook_id, "campaign_id": campaign_id})
        return WebhookCreated(**WebhookView.of(record).model_dump(), secret=secret)

    def list_webhooks(self, *, campaign_id: str) -> WebhookList:
        records = store.campaign_webhooks(self._db, campaign_id=campaign_id)
        if not records:
            campaign_store.get_campaign(self._db, campaign_id=campaign_id)  # 404 if unknown
        return WebhookList(webhooks=[WebhookView.of(r) for r in records])

    def _owned(self, campaign_id: str, webhook_id: str) -> WebhookRecord:
        record = store.get_webhook(self._db, webhook_id=webhook_id)
        if record is None or record.campaign_id != campaign_id:
            raise WebhookNotFound(f"Campaign {campaign_id!r} has no webhook {webhook_id!r}.")
        return record

    def unsubscribe(
        self, *, campaign_id: str, webhook_id: str, audit: AuditContext | None = None
    ) -> None:
        record = self._owned(campaign_id, webhook_id)
        entry = entry_for(
            audit,
            AuditAction.WEBHOOK_DELETE,
            campaign_id=campaign_id,
            target=webhook_id,
            before={"url": record.url, "events": list(record.events)},
        )
        store.delete_webhook(self._db, webhook_id=webhook_id, campaign_id=campaign_id, audit=entry)
        log.info("webhook deleted", extra={"webhook_id": webhook_id, "campaign_id": campaign_id})

    def send_test(
        self, *, campaign_id: str, webhook_id: str, audit: AuditContext
    ) -> DeliveryQueued:
        """A `webhook.test` event for this endpoint alone, signed and retried like any other,
        sent now (the drain runs in this call, as deliver_webhooks does for an event)."""
        self._owned(campaign_id, webhook_id)
        now = self._clock()
        event_id = f"test.{webhook_id}.{secrets.token_hex(8)}"
        body = json.dumps(
            {
                "event_id": event_id,
                "type": TEST_EVENT,
                "campaign_id": campaign_id,
                "occurred_at": rfc3339(now),
            },
            separators=(",", ":"),
        )
        entry = audit.entry(
            AuditAction.WEBHOOK_TEST,
            campaign_id=campaign_id,
            target=webhook_id,
            after={"event_id": event_id},
        )
        store.record_deliveries(
            self._db,
            webhook_ids=[webhook_id],
            event_id=event_id,
            event_type=TEST_EVENT,
            body=body,
            now=now,
            audit=entry,
        )
        return self._send_now(webhook_id, event_id)

    def redeliver(
        self, *, campaign_id: str, webhook_id: str, event_id: str, audit: AuditContext
    ) -> DeliveryQueued:
        """Send a delivery again (delivered, failed or still retrying), from a first attempt."""
        self._owned(campaign_id, webhook_id)
        delivery = store.get_delivery(self._db, webhook_id=webhook_id, event_id=event_id)
        if delivery is None:
            raise DeliveryNotFound(f"Webhook {webhook_id!r} has no delivery {event_id!r}.")
        entry = audit.entry(
            AuditAction.WEBHOOK_REDELIVER,
            campaign_id=campaign_id,
            target=webhook_id,
            before={"event_id": event_id, "state": delivery.state.value},
            after={"event_id": event_id, "state": DeliveryState.PENDING.value},
        )
        store.requeue_delivery(
            self._db, webhook_id=webhook_id, delivery=delivery, now=self._clock(), audit=entry
        )
        return self._send_now(webhook_id, event_id)

    def rotate_secret(
        self, *, campaign_id: str, webhook_id: str, audit: AuditContext
    ) -> WebhookCreated:
        """A new signing secret, shown once: deliveries are signed with it from the next
        attempt on (each drain opens the secret it finds), the old one is forgotten."""
        record = self._owned(campaign_id, webhook_id)
        secret = new_secret()
        entry = audit.entry(AuditAction.WEBHOOK_ROTATE, campaign_id=campaign_id, target=webhook_id)
        store.replace_secret(
            self._db,
            webhook_id=webhook_id,
            secret_sealed=self._secrets().seal(secret, webhook_id=webhook_id),
            audit=entry,
        )
        log.info("webhook secret rotated", extra={"webhook_id": webhook_id})
        return WebhookCreated(**WebhookView.of(record).model_dump(), secret=secret)

    def _send_now(self, webhook_id: str, event_id: str) -> DeliveryQueued:
        self._drain_many([webhook_id], deadline=time.monotonic() + self._drain_seconds)
        delivery = store.get_delivery(self._db, webhook_id=webhook_id, event_id=event_id)
        state = delivery.state if delivery is not None else DeliveryState.PENDING
        return DeliveryQueued(webhook_id=webhook_id, event_id=event_id, state=state)

    def deliveries(self, *, campaign_id: str, webhook_id: str, limit: int) -> DeliveryList:
        self._owned(campaign_id, webhook_id)
        records = store.recent_deliveries(self._db, webhook_id=webhook_id, limit=limit)
        return DeliveryList(webhook_id=webhook_id, deliveries=[DeliveryView.of(r) for r in records])

    # --- events (deliver_webhooks) --------------------------------------------------------------
    def record(self, event: Event, body: bytes, listing: store.Listing | None = None) -> list[str]:
        """One delivery per webhook of the event's campaign that lists its type (none twice);
        the ids of those webhooks. `listing`: the campaign's list, if just read."""
        if listing is None:
            listing = store.listed_webhooks(self._reader, campaign_id=event.campaign_id)
        matched = [w for w, events in listing.items() if event.type.value in events]
        if matched:
            created = store.record_deliveries(
                self._db,
                webhook_ids=matched,
                event_id=event.event_id,
                event_type=event.type.value,
                body=body.decode(),
                now=self._clock(),
            )
            log.info(
                "webhook deliveries recorded",
                extra={"event_id": event.event_id, "webhooks": len(matched), "new": created},
            )
        return matched

    def handle(self, event: Event, body: bytes) -> RunReport:
        """Record the event's deliveries, then drain each endpoint nobody is draining yet.

        The lease is read after the deliveries are written: a drainer that was holding it then
        finds them in its next query, or after letting go (see `drain`). An event no record
        backs (forged, or pushed by someone else) is acknowledged and sent nowhere."""
        if self._verify(event) is None:
            return RunReport()
        return self._drain_matched(self.record(event, body))

    def handle_batch(self, batch: ClaimedBatch) -> RunReport:
        """A batch of claims delivered as its claims' own `coupon.claimed` events (each body the
        JSON a single publish carries), those its records back (one read for them all)."""
        verified = {c.event_id for c in self._verify_claims(batch)}
        listing = store.listed_webhooks(self._reader, campaign_id=batch.campaign_id)
        matched: set[str] = set()
        for member in batch.claims:
            if member.event_id in verified:
                matched.update(self.record(member, encode_event(member), listing))
        return self._drain_matched(sorted(matched))

    def _drain_matched(self, matched: Sequence[str]) -> RunReport:
        if not matched:
            return RunReport()
        now = self._clock()
        free = [
            w.webhook_id
            for w in store.get_webhooks(self._db, webhook_ids=matched)
            if w.lease_free(now)
        ]
        return self._drain_many(free, deadline=time.monotonic() + self._drain_seconds)

    # --- the schedule (the sweep) ---------------------------------------------------------------
    def drain_due(self) -> RunReport:
        """Every endpoint with a delivery due (a retry, or one a crashed drainer left)."""
        deadline = time.monotonic() + self._drain_seconds
        now = self._clock()
        webhooks = [w for w in store.all_webhooks(self._db) if w.lease_free(now)]
        # A different order each time: endpoints left for the next sweep when time runs out
        # are not always the same ones.
        random.shuffle(webhooks)
        due = [
            w.webhook_id
            for w in webhooks
            if store.due_deliveries(self._db, webhook_id=w.webhook_id, now=now, limit=1)
        ]
        return self._drain_many(due, deadline=deadline)

    # --- draining -------------------------------------------------------------------------------
    @property
    def _drain_seconds(self) -> float:
        return self._settings.webhook_drain_seconds

    def _drain_many(self, webhook_ids: Sequence[str], *, deadline: float) -> RunReport:
        report = RunReport()
        if len(webhook_ids) == 1:
            report.add(self._drain_logged(webhook_ids[0], deadline))
            return report
        with ThreadPoolExecutor(min(PARALLEL_ENDPOINTS, max(len(webhook_ids), 1))) as pool:
            for result in pool.map(lambda w: self._drain_logged(w, deadline), webhook_ids):
                report.add(result)
        return report

    def _drain_logged(self, webhook_id: str, deadline: float) -> RunReport:
        # One endpoint's trouble (its secret, Firestore for a moment) never stops the others';
        # its deliveries stay due for the next drain.
        try:
            return self.drain(webhook_id, deadline=deadline)
        except Exception:
            log.exception("webhook drain failed", extra={"webhook_id": webhook_id})
            return RunReport()

    def drain(self, webhook_id: str, *, deadline: float) -> RunReport:
        """Send this endpoint's due deliveries under its lease, until none is due or the
        deadline (time.monotonic) passes; nothing if another drainer holds the lease."""
        report = RunReport()
        while time.monotonic() < deadline:
            run = self._drain_once(webhook_id, deadline)
            if run is None:
                break
            report.add(run)
            # Deliveries recorded while the run was ending found the lease held and left
            # themselves to it: after letting go, look once more.
            if run.endpoint_down or not store.due_deliveries(
                self._db, webhook_id=webhook_id, now=self._clock(), limit=1
            ):
                break
        return report

    def _drain_once(self, webhook_id: str, deadline: float) -> RunReport | None:
        now = self._clock()
        timeout = self._settings.webhook_timeout_seconds
        # Long enough for the whole run: its last attempts start before the deadline.
        hold = self._drain_seconds + self._settings.webhook_linger_seconds + 2 * timeout + 10
        lease = store.acquire_lease(
            self._db, webhook_id=webhook_id, now=now, until=now + timedelta(seconds=hold)
        )
        if lease is None:
            return None
        webhook = lease.webhook
        hold_until: datetime | None = None
        streak = webhook.down_streak
        try:
            endpoint = Endpoint(
                webhook_id=webhook_id,
                url=webhook.url,
                secret=self._secrets().open(webhook.secret_sealed, webhook_id=webhook_id),
                max_per_second=webhook.max_per_second,
                max_in_flight=webhook.max_in_flight,
            )
            with guard.client(
                self._addresses,
                timeout=timeout,
                max_connections=webhook.max_in_flight,
                resolve=self._resolve,
            ) as client:
                report = DrainRun(
                    db=self._db,
                    endpoint=endpoint,
                    client=client,
                    policy=self._retry,
                    clock=self._clock,
                    deadline=deadline,
                    linger=self._settings.webhook_linger_seconds,
                    still_subscribed=lambda: (
                        store.get_webhook(self._db, webhook_id=webhook_id) is not None
                    ),
                ).run()
            if report.endpoint_down:
                # The endpoint looks down: nobody sends to it until its cool-down is over.
                streak += 1
                hold_until = self._clock() + timedelta(seconds=self._retry.delay(streak))
            elif report.delivered:
                streak = 0
        finally:
            store.release_lease(self._db, lease=lease, hold_until=hold_until, down_streak=streak)
        return report
