"""Pub/Sub on the emulator for the tests and benchmarks: a topic with a pull subscription, and
pulling a subscription empty (what a push subscription would have delivered)."""

from __future__ import annotations

from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient
from google.pubsub_v1.types import PubsubMessage


def create_topic_with_pull(*, project: str, topic: str, subscription: str) -> None:
    """The topic and a pull subscription to it."""
    topic_path = f"projects/{project}/topics/{topic}"
    PublisherClient().create_topic(name=topic_path)
    with SubscriberClient() as subscriber:
        subscriber.create_subscription(
            name=f"projects/{project}/subscriptions/{subscription}", topic=topic_path
        )


def pull_all(subscription: str, *, timeout: float = 30) -> list[PubsubMessage]:
    """Every message waiting on `subscription` (a full path), acknowledged."""
    messages: list[PubsubMessage] = []
    with SubscriberClient() as subscriber:
        while True:
            # The emulator honours return_immediately, so an empty pull costs no wait.
            response = subscriber.pull(
                request={
                    "subscription": subscription,
                    "max_messages": 500,
                    "return_immediately": True,
                },
                timeout=timeout,
            )
            if not response.received_messages:
                return messages
            messages += [r.message for r in response.received_messages]
            subscriber.acknowledge(
                subscription=subscription, ack_ids=[r.ack_id for r in response.received_messages]
            )
