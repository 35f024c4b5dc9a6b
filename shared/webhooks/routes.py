"""Which events deliver_webhooks is pushed: those of a campaign with a webhook for their type.

Every event is published with the attribute `webhooks: "1"` when a webhook of its campaign lists
its type, and deliver_webhooks' push subscription filters on it (shared/webhooks/marking.py, set
by the local stack and the deploy): a campaign without webhooks costs Pub/Sub nothing to deliver
and the function no invocation (at a sale's rate, an invocation an event, before any work, cost
it more CPU than recording did). deliver_webhooks still checks each event it is pushed against
the list.

The publisher reads the campaign's list (`campaign_webhooks/{campaign}`, shared/webhooks/store.py)
at most once per `max_age` per instance, and a value at most `2 * max_age` old serves
(shared/cache.py): a subscription answers only once `settle_seconds(max_age)` have passed since
its webhook was listed, so every event published after the answer carries the attribute. A list that
cannot be read marks the event for deliver_webhooks, which decides: never an event lost.
"""

from __future__ import annotations

import logging

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.cache import RecentReads
from shared.events.models import Event
from shared.gcp.batched_reads import ReadCoalescer
from shared.webhooks import store
from shared.webhooks.marking import MARKED

log = logging.getLogger(__name__)


def settle_seconds(max_age: float) -> float:
    """How long after a webhook is listed every publisher's read has it."""
    return 2 * max_age


class WebhookRoutes:
    def __init__(self, *, db: firestore.Client, max_age: float) -> None:
        self._reader = ReadCoalescer(db=db)
        self._lists: RecentReads[str, store.Listing] = RecentReads(max_age=max_age)

    def attributes(self, event: Event) -> dict[str, str]:
        """The event's routing attributes: MARKED when a webhook of its campaign lists its type."""
        try:
            listing = self._lists.get(
                event.campaign_id,
                lambda: store.listed_webhooks(self._reader, campaign_id=event.campaign_id),
            )
        except gexc.GoogleAPIError as exc:
            log.warning(
                "webhook list unreadable; event marked for deliver_webhooks",
                extra={"event_id": event.event_id, "error": repr(exc)},
            )
            return dict(MARKED)
        if any(event.type.value in types for types in listing.values()):
            return dict(MARKED)
        return {}
