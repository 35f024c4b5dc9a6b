"""The Pub/Sub publisher (with PUBSUB_EMULATOR_HOST set it talks to the emulator)."""

from __future__ import annotations

from google.cloud.pubsub_v1 import PublisherClient
from google.cloud.pubsub_v1.types import BatchSettings
from google.pubsub_v1 import PubsubMessage

from shared.gcp.client_internals import publish_request


class Publisher(PublisherClient):  # type: ignore[misc]  # the library is untyped
    """The client, and a publish that is one awaited RPC for a message batched already."""

    def publish_now(self, topic: str, data: bytes, *, timeout: float, **attributes: str) -> None:
        """Publish one message in a request of its own and wait for the acknowledgement, at
        most `timeout` seconds in all; raises the API's error. The claims' batcher gathers its
        message itself: publish()'s client-side batch would add its own wait and a thread per
        request (measured on the emulator: 1.3 ms of CPU and 8.9 ms against 0.5 ms and 1.3 ms
        a message)."""
        message = PubsubMessage(data=data, attributes=attributes)
        publish_request(self, topic=topic, message=message, timeout=timeout)


def make_publisher() -> Publisher:
    # A few milliseconds of batching lets concurrent events share a publish request.
    return Publisher(batch_settings=BatchSettings(max_latency=0.005, max_messages=100))


def topic_path(project_id: str, topic: str) -> str:
    return f"projects/{project_id}/topics/{topic}"
