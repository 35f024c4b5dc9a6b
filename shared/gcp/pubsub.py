"""The Pub/Sub publisher (with PUBSUB_EMULATOR_HOST set it talks to the emulator)."""

from __future__ import annotations

from google.cloud.pubsub_v1 import PublisherClient
from google.cloud.pubsub_v1.types import BatchSettings


def make_publisher() -> PublisherClient:
    # A few milliseconds of batching lets concurrent claims share a publish request.
    return PublisherClient(batch_settings=BatchSettings(max_latency=0.005, max_messages=100))


def topic_path(project_id: str, topic: str) -> str:
    return f"projects/{project_id}/topics/{topic}"
