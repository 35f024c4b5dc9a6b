"""The Pub/Sub topics and subscriptions the functions need, created in the emulator as deploy
creates them in the cloud, and the imports bucket checked (the Storage emulator's default)."""

from __future__ import annotations

import logging
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient
from google.cloud.storage import Client as StorageClient
from google.protobuf import duration_pb2

from scripts.localstack.config import FILTER_SUBSCRIPTION, Config
from scripts.localstack.errors import StackError
from shared.webhooks import marking

log = logging.getLogger("local_stack")


def create_pubsub_resources(
    config: Config, *, count_usage_url: str | None, deliver_webhooks_url: str | None = None
) -> list[str]:
    """The events topic and, for count_usage and deliver_webhooks once they exist, a push
    subscription each with retries and a dead-letter topic (with a pull subscription to inspect
    dead letters); deliver_webhooks' reads the events its filter passes (see below). Returns
    their names. Resources already there are left as they are."""
    created: list[str] = []
    publisher = PublisherClient()
    with SubscriberClient() as subscriber:

        def topic(name: str) -> str:
            path: str = publisher.topic_path(config.project, name)
            try:
                publisher.create_topic(name=path)
            except api_exceptions.AlreadyExists:
                log.info("topic exists", extra={"topic": path})
            created.append(f"topic {name}")
            return path

        def subscription(name: str, request: dict[str, Any]) -> None:
            path: str = subscriber.subscription_path(config.project, name)
            try:
                subscriber.create_subscription(request={"name": path, **request})
            except api_exceptions.AlreadyExists:
                log.info("subscription exists", extra={"subscription": path})
            created.append(f"subscription {name}")

        events = topic(config.topic)
        if count_usage_url is None and deliver_webhooks_url is None:
            log.info("count_usage is not defined yet: no push subscription")
            return created
        dead_letters = topic(config.dead_letter_topic)
        dead_letter_policy = {"dead_letter_topic": dead_letters, "max_delivery_attempts": 5}
        if count_usage_url is not None:
            subscription(
                "count-usage-push",
                {
                    "topic": events,
                    "push_config": {"push_endpoint": f"{count_usage_url}/"},
                    "retry_policy": {
                        "minimum_backoff": duration_pb2.Duration(seconds=1),
                        "maximum_backoff": duration_pb2.Duration(seconds=60),
                    },
                    "dead_letter_policy": dead_letter_policy,
                },
            )
        if deliver_webhooks_url is not None:
            # Only the events of campaigns with a webhook for them (shared/webhooks/routes.py):
            # the emulator ignores a subscription's filter, so a watcher pulls the events into
            # the webhooks topic where they pass it (scripts/localstack/message_filter.py).
            subscription(FILTER_SUBSCRIPTION, {"topic": events, "ack_deadline_seconds": 60})
            passed = topic(config.webhooks_topic)
            # Its own subscription: a slow endpoint never holds back count_usage's messages.
            # A push that drains an endpoint answers after up to the drain budget (20 s),
            # its linger (1 s) and the last requests' timeouts (5 s): 60 s to acknowledge.
            subscription(
                "deliver-webhooks-push",
                {
                    "topic": passed,
                    "filter": marking.FILTER,
                    "push_config": {"push_endpoint": f"{deliver_webhooks_url}/"},
                    "ack_deadline_seconds": 60,
                    "retry_policy": {
                        "minimum_backoff": duration_pb2.Duration(seconds=5),
                        "maximum_backoff": duration_pb2.Duration(seconds=300),
                    },
                    "dead_letter_policy": dead_letter_policy,
                },
            )
        subscription(f"{config.dead_letter_topic}-pull", {"topic": dead_letters})
    return created


def verify_bucket(config: Config) -> None:
    """StackError unless the imports bucket exists (the Storage emulator creates it)."""
    client = StorageClient(project=config.project)
    if client.lookup_bucket(config.bucket) is None:
        raise StackError(
            f"bucket {config.bucket} is missing from the Storage emulator (it should be its "
            "default bucket)"
        )
