"""The Google client libraries' internals, as named functions for code outside shared/gcp.

Only shared/gcp touches google-cloud-firestore's private attributes (PRIVATE_NAMES): the claim's
commit sent through the transport's stub and single reads through GetDocument (writes.py,
batched_reads.py), raw protobuf walks of a query (shared/coupons/store.py), and the dev kit's RPC
counter, which wraps the transport's stubs. From google-cloud-pubsub it takes the API's own
publish beneath the client's batching one (pubsub.py). Both libraries are pinned below their next
minor versions in pyproject.toml; tests/unit/test_client_internals.py fails when an upgrade moves
any of these, and keeps the names out of every module outside shared/gcp."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from google.api_core import retry as retries
from google.cloud import firestore
from google.cloud.pubsub_v1 import PublisherClient
from google.pubsub_v1 import PubsubMessage
from google.pubsub_v1.services.publisher import PublisherClient as ApiClient

# The private attributes this module reads; no other module may name them.
PRIVATE_NAMES = frozenset(
    {
        "_firestore_api",
        "_rpc_metadata",
        "_database_string",
        "_client_info",
        "_document_path",
        "_write_pbs",
        "_add_write_pbs",
        "_to_protobuf",
        "_parent_info",
        "_transport",
        "_stubs",
        "_wrapped_methods",
        "_pb",
    }
)


def gapic(db: firestore.Client) -> Any:
    """The client's GAPIC client (built on first use), through which each call of the library
    goes."""
    return db._firestore_api


def call_metadata(db: firestore.Client) -> Sequence[tuple[str, str]]:
    """The metadata the library sends with each call (routing header, client info)."""
    metadata: Sequence[tuple[str, str]] = db._rpc_metadata
    return metadata


def batch_writes(batch: firestore.WriteBatch) -> list[Any]:
    """The Write messages a batch holds so far."""
    writes: list[Any] = batch._write_pbs
    return writes


def structured_query(query: firestore.Query) -> Any:
    """The StructuredQuery message of `query`."""
    return query._to_protobuf()


def query_request(query: firestore.Query) -> dict[str, Any]:
    """The RunQuery request the library would send for `query`."""
    parent, _ = query._parent._parent_info()
    return {"parent": parent, "structured_query": structured_query(query)}


def raw_message(response: Any) -> Any:
    """A proto-plus response's protobuf message, without one more wrapper per document."""
    return getattr(response, "_pb", response)


def run_query_messages(
    db: firestore.Client, query: firestore.Query, *, timeout: float
) -> Iterator[Any]:
    """RunQuery's responses for `query` as protobuf messages, read as the caller consumes them."""
    responses = gapic(db).run_query(
        request=query_request(query), metadata=call_metadata(db), timeout=timeout
    )
    for response in responses:
        yield raw_message(response)


def transport(api: Any) -> Any:
    """A GAPIC client's transport."""
    return api._transport


def transport_stubs(transport: Any) -> dict[str, Any]:
    """The transport's stubs by method name (the dict itself: replacing a stub takes effect)."""
    stubs: dict[str, Any] = transport._stubs
    return stubs


def wrapped_methods(transport: Any) -> dict[Any, Any]:
    """The GAPIC client's retry/timeout wrapper of each stub, keyed by the stub."""
    wrapped: dict[Any, Any] = transport._wrapped_methods
    return wrapped


def publish_request(
    client: PublisherClient, *, topic: str, message: PubsubMessage, timeout: float
) -> None:
    """One Publish request of `message`, awaited: the API's method, which the client subclasses
    and overrides with its batching publish (what the client's batches call, on its channel).
    Transient errors are retried within `timeout`."""
    ApiClient.publish(
        client,
        topic=topic,
        messages=[message],
        retry=retries.Retry(predicate=retries.if_transient_error, timeout=timeout),
        timeout=timeout,
    )
