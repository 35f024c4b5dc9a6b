"""deliver_webhooks' subscription filter, which the Pub/Sub emulator does not apply.

In a project, deliver_webhooks' push subscription has the filter `attributes.webhooks = "1"`
(shared/webhooks/marking.py): Pub/Sub never pushes it the events of campaigns without webhooks.
The emulator (0.8.20) accepts a subscription's filter and ignores it, so locally every event
would still cost a push and an invocation. This watcher stands in for the filter: it pulls the
events topic's `deliver-webhooks-filter` subscription in batches, publishes those whose
attributes pass to the local topic `{events}-webhooks`, which deliver_webhooks' push subscription
(its retries, dead letters and ack deadline as in a project) reads, and acknowledges the batch
once those publishes are confirmed. A batch that fails is not acknowledged: the emulator offers
it again after its ack deadline, so no event is lost (a republished event is delivered twice at
worst, and deliveries are idempotent on the event id).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from google.api_core import exceptions as gexc
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

from devkit.standins.looping import LoopingStandIn
from shared.webhooks import marking

log = logging.getLogger("local_stack")

BATCH = 500
PULL_TIMEOUT = 5.0
PUBLISH_TIMEOUT = 30.0
RETRY_PAUSE = 1.0


def passes(attributes: Mapping[str, str]) -> bool:
    """What marking.FILTER selects."""
    return all(attributes.get(k) == v for k, v in marking.MARKED.items())


class MessageFilter(LoopingStandIn):
    """A batch that fails is logged and offered again."""

    name = "deliver_webhooks filter"
    thread_name = "message-filter"

    def __init__(self, *, subscription: str, topic: str) -> None:
        super().__init__()
        self._subscription = subscription
        self._topic = topic
        self._subscriber = SubscriberClient()
        self._publisher = PublisherClient()

    def __str__(self) -> str:
        return f"{self._subscription} -> {self._topic} where {marking.FILTER}"

    def stop(self) -> None:
        self._stop.set()
        # Closing the channel ends a pull in progress at once (it would wait out PULL_TIMEOUT);
        # a batch it interrupts is not acknowledged, so it is offered again at the next start.
        self._subscriber.close()
        super().stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._relay_batch()
            except (gexc.GoogleAPIError, TimeoutError, ValueError) as exc:
                # ValueError: a call on the channel stop() closed.
                if self._stop.is_set():
                    return
                if isinstance(exc, ValueError):
                    raise
                log.warning("message filter batch failed: %r", exc)
                self._stop.wait(RETRY_PAUSE)

    def _relay_batch(self) -> None:
        try:
            answer = self._subscriber.pull(
                request={"subscription": self._subscription, "max_messages": BATCH},
                timeout=PULL_TIMEOUT,
            )
        except gexc.DeadlineExceeded:
            return  # nothing published meanwhile
        received = answer.received_messages
        if not received:
            return
        futures = [
            self._publisher.publish(self._topic, m.message.data, **m.message.attributes)
            for m in received
            if passes(m.message.attributes)
        ]
        for future in futures:
            future.result(timeout=PUBLISH_TIMEOUT)
        self._subscriber.acknowledge(
            request={"subscription": self._subscription, "ack_ids": [m.ack_id for m in received]}
        )
