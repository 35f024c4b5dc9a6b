"""Publishing events to Pub/Sub without losing them.

`publish` awaits the publish future; if Pub/Sub cannot be reached the event is written to the
`outbox` collection and `flush_outbox` (run by the scheduled sweep) publishes it later.
`announce_once` is for facts that must be told exactly once (low stock, sold out, an import
finished): a marker and an outbox entry are written in one atomic batch before publishing, so a
crash after the marker still leaves the outbox entry for the sweeper, and a second announcer
finds the marker and stays silent. `send_message` publishes a message its producer encoded
itself (several events of one campaign in one message, say) at once, and `keep` puts each
event of a failed one in the outbox.
`stage` + `deliver_staged` are for state changes that leave no other durable trace of their
event (a redemption, a release): the outbox entry is written in the very batch that makes the
change, and deleted once the event is published.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.events import models as events
from shared.gcp.firestore import announcement_ref, outbox_collection
from shared.gcp.pubsub import topic_path

log = logging.getLogger(__name__)

PUBLISH_TIMEOUT_SECONDS = 10.0
# What a failed publish can raise: the API's errors, the future's timeout, a dead channel.
PUBLISH_ERRORS = (gexc.GoogleAPIError, FutureTimeout, OSError, RuntimeError)


@dataclass
class OutboxReport:
    published: int = 0
    failures: list[str] = field(default_factory=list)


class EventBus:
    def __init__(
        self,
        *,
        db: firestore.Client,
        publisher: Any,
        project_id: str,
        topic: str,
        attributes: Callable[[events.Event], Mapping[str, str]] = lambda _: {},
    ) -> None:
        self._db = db
        self._publisher = publisher
        self._topic = topic_path(project_id, topic)
        # More message attributes for an event: what the subscriptions' filters select on.
        self._attributes = attributes

    def _publish(self, event: events.Event) -> Any:
        return self._publisher.publish(
            self._topic,
            events.encode_event(event),
            event_id=event.event_id,
            type=event.type.value,
            **self._attributes(event),
        )

    def send_message(
        self,
        data: bytes,
        *,
        event_id: str,
        kind: str,
        routed_as: events.Event,
        timeout: float,
    ) -> None:
        """Publish `data`, encoded by its producer, as one message with its own request, and wait
        for the acknowledgement at most `timeout` seconds; raises one of PUBLISH_ERRORS. It
        carries `routed_as`'s routing attributes: every event it holds must share them."""
        self._publisher.publish_now(
            self._topic,
            data,
            timeout=timeout,
            event_id=event_id,
            type=kind,
            **self._attributes(routed_as),
        )

    def send(self, event: events.Event, *, timeout: float = PUBLISH_TIMEOUT_SECONDS) -> None:
        """Publish and wait for the acknowledgement; raises one of PUBLISH_ERRORS."""
        self._publish(event).result(timeout=timeout)

    def _outbox_fields(self, event: events.Event, now: datetime) -> dict[str, Any]:
        return {"event": event.model_dump(mode="json"), "recorded_at": now}

    def publish(
        self, event: events.Event, *, now: datetime, timeout: float = PUBLISH_TIMEOUT_SECONDS
    ) -> bool:
        """True when published; False when kept in the outbox for the sweeper.

        A publish that outlasts `timeout` may still go through later: the outbox copy then
        publishes the same event id again, which consumers ignore."""
        try:
            self.send(event, timeout=timeout)
        except PUBLISH_ERRORS as exc:
            self.keep(event, now=now, error=exc)
            return False
        return True

    def keep(self, event: events.Event, *, now: datetime, error: BaseException) -> None:
        """Keep an event whose publish failed (or outlasted its wait) in the outbox."""
        log.warning(
            "publish failed; event kept in the outbox",
            extra={"event_id": event.event_id, "error": repr(error)},
        )
        outbox_collection(self._db).document(event.event_id).set(self._outbox_fields(event, now))

    def stage(self, batch: firestore.WriteBatch, event: events.Event, *, now: datetime) -> None:
        """Add the event's outbox entry to `batch`: committed with the change it reports."""
        batch.set(
            outbox_collection(self._db).document(event.event_id), self._outbox_fields(event, now)
        )

    def deliver_staged(self, staged: Sequence[events.Event]) -> int:
        """Publish events staged by a committed batch and drop their outbox entries; what fails
        stays in the outbox for the sweep. Returns how many were published."""
        published = []
        # Published together, then awaited: one round trip's wait, not one per event.
        futures = []
        for event in staged:
            try:
                futures.append((event, self._publish(event)))
            except PUBLISH_ERRORS as exc:
                log.warning(
                    "staged event kept in the outbox",
                    extra={"event_id": event.event_id, "error": repr(exc)},
                )
        for event, future in futures:
            try:
                future.result(timeout=PUBLISH_TIMEOUT_SECONDS)
            except PUBLISH_ERRORS as exc:
                log.warning(
                    "staged event kept in the outbox",
                    extra={"event_id": event.event_id, "error": repr(exc)},
                )
                continue
            published.append(event.event_id)
        for start in range(0, len(published), 500):
            batch = self._db.batch()
            for event_id in published[start : start + 500]:
                batch.delete(outbox_collection(self._db).document(event_id))
            batch.commit()
        return len(published)

    def announce_once(self, event: events.Event, *, now: datetime) -> bool:
        """Publish a fact exactly once across all instances; False if already announced."""
        marker = announcement_ref(self._db, event.campaign_id, event.event_id)
        outbox = outbox_collection(self._db).document(event.event_id)
        batch = self._db.batch()
        # The marker keeps the event itself: consumers check a pushed announcement against it.
        marker_fields = {
            "announced_at": now,
            "type": event.type.value,
            "event": event.model_dump(mode="json"),
        }
        batch.create(marker, marker_fields)
        batch.set(outbox, self._outbox_fields(event, now))
        try:
            batch.commit()
        except gexc.AlreadyExists:
            return False
        try:
            self.send(event)
        except PUBLISH_ERRORS as exc:
            log.warning(
                "announcement kept in the outbox",
                extra={"event_id": event.event_id, "error": repr(exc)},
            )
            return True
        outbox.delete()
        log.info("announced", extra={"event_id": event.event_id, "type": event.type.value})
        return True

    def flush_outbox(self, *, limit: int = 1000) -> OutboxReport:
        """Publish what the outbox holds (events whose first publish failed)."""
        report = OutboxReport()
        for snapshot in outbox_collection(self._db).limit(limit).stream():
            event = events.event_from_dict((snapshot.to_dict() or {})["event"])
            try:
                self.send(event)
            except PUBLISH_ERRORS as exc:
                report.failures.append(f"{event.event_id}: {exc!r}")
                continue
            snapshot.reference.delete()
            report.published += 1
        return report
