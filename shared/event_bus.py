"""Publishing events to Pub/Sub without losing them.

`publish` awaits the publish future; if Pub/Sub cannot be reached the event is written to the
`outbox` collection and `sweep` publishes it later. `announce_once` is for facts that must be
told exactly once (low stock, sold out, an import finished): a marker and an outbox entry are
written in one atomic batch before publishing, so a crash after the marker still leaves the
outbox entry for the sweeper, and a second announcer finds the marker and stays silent.
Claims do not pay for a marker (two writes per claim is the budget): for them the claim document
itself is the durable record, and `sweep` re-publishes any recent claim whose event the counters
never saw.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.pubsub_v1 import PublisherClient
from google.cloud.pubsub_v1.types import BatchSettings

from shared import events
from shared.firestore_db import campaign_ref, claims_collection
from shared.models import ClaimRecord
from shared.settings import Settings

log = logging.getLogger(__name__)

OUTBOX = "outbox"
ANNOUNCEMENTS = "announcements"
PROCESSED = "processed_events"
PUBLISH_TIMEOUT_SECONDS = 10.0


def processed_ref(
    db: firestore.Client, campaign_id: str, event_id: str
) -> firestore.DocumentReference:
    """The consumer's idempotency marker for an event."""
    ref: firestore.DocumentReference = (
        campaign_ref(db, campaign_id).collection(PROCESSED).document(event_id)
    )
    return ref


@dataclass
class SweepReport:
    outbox_published: int = 0
    claims_republished: int = 0
    failures: list[str] = field(default_factory=list)


class EventBus:
    def __init__(
        self,
        *,
        db: firestore.Client,
        settings: Settings,
        publisher: Any | None = None,
    ) -> None:
        self._db = db
        # A few milliseconds of batching lets concurrent claims share a publish request.
        self._publisher = publisher or PublisherClient(
            batch_settings=BatchSettings(max_latency=0.005, max_messages=100)
        )
        self._topic = f"projects/{settings.project_id}/topics/{settings.events_topic}"

    def _send(self, event: events.Event) -> None:
        future = self._publisher.publish(
            self._topic, events.encode_event(event), event_id=event.event_id, type=event.type.value
        )
        future.result(timeout=PUBLISH_TIMEOUT_SECONDS)

    def _outbox_fields(self, event: events.Event, now: datetime) -> dict[str, Any]:
        return {"event": event.model_dump(mode="json"), "recorded_at": now}

    def publish(self, event: events.Event, *, now: datetime) -> bool:
        """True when published; False when kept in the outbox for the sweeper."""
        try:
            self._send(event)
        except (gexc.GoogleAPIError, FutureTimeout, OSError, RuntimeError) as exc:
            log.warning(
                "publish failed; event kept in the outbox",
                extra={"event_id": event.event_id, "error": repr(exc)},
            )
            self._db.collection(OUTBOX).document(event.event_id).set(
                self._outbox_fields(event, now)
            )
            return False
        return True

    def announce_once(self, event: events.Event, *, now: datetime) -> bool:
        """Publish a fact exactly once across all instances; False if already announced."""
        marker = (
            campaign_ref(self._db, event.campaign_id)
            .collection(ANNOUNCEMENTS)
            .document(event.event_id)
        )
        outbox = self._db.collection(OUTBOX).document(event.event_id)
        batch = self._db.batch()
        batch.create(marker, {"announced_at": now, "type": event.type.value})
        batch.set(outbox, self._outbox_fields(event, now))
        try:
            batch.commit()
        except gexc.AlreadyExists:
            return False
        try:
            self._send(event)
        except (gexc.GoogleAPIError, FutureTimeout, OSError, RuntimeError) as exc:
            log.warning(
                "announcement kept in the outbox",
                extra={"event_id": event.event_id, "error": repr(exc)},
            )
            return True
        outbox.delete()
        log.info("announced", extra={"event_id": event.event_id, "type": event.type.value})
        return True

    def sweep(
        self, *, campaign_ids: Iterable[str], now: datetime, window: timedelta, grace: timedelta
    ) -> SweepReport:
        """Publish what the outbox holds, then recent claims the counters have not seen."""
        report = SweepReport()
        for snapshot in self._db.collection(OUTBOX).limit(1000).stream():
            event = events.event_from_dict((snapshot.to_dict() or {})["event"])
            try:
                self._send(event)
            except (gexc.GoogleAPIError, FutureTimeout, OSError, RuntimeError) as exc:
                report.failures.append(f"{event.event_id}: {exc!r}")
                continue
            snapshot.reference.delete()
            report.outbox_published += 1
        for campaign_id in campaign_ids:
            report.claims_republished += self._republish_unseen_claims(
                campaign_id, since=now - window, until=now - grace, report=report
            )
        return report

    def _republish_unseen_claims(
        self, campaign_id: str, *, since: datetime, until: datetime, report: SweepReport
    ) -> int:
        # A claim whose instance died between the commit and the publish has no event; the
        # claim document is the record, and the consumer's marker tells whether it was seen.
        query = (
            claims_collection(self._db, campaign_id)
            .where(filter=FieldFilter("claimed_at", ">=", since))
            .where(filter=FieldFilter("claimed_at", "<", until))
        )
        claims = [ClaimRecord(claim_id=s.id, **(s.to_dict() or {})) for s in query.stream()]
        if not claims:
            return 0
        claimed = [events.coupon_claimed(c) for c in claims]
        markers = self._db.get_all(
            [processed_ref(self._db, campaign_id, e.event_id) for e in claimed]
        )
        seen = {m.id for m in markers if m.exists}
        republished = 0
        for event in claimed:
            if event.event_id in seen:
                continue
            try:
                self._send(event)
            except (gexc.GoogleAPIError, FutureTimeout, OSError, RuntimeError) as exc:
                report.failures.append(f"{event.event_id}: {exc!r}")
                continue
            republished += 1
        return republished
