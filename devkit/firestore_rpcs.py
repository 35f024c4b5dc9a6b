"""Count the Firestore RPCs a client sends, and the documents they read and write.

Benchmarks report reads and writes per code from what actually went over the wire, never from a
constant per success: `RpcCounter` replaces the methods of a `google.cloud.firestore.Client`'s
GAPIC client (`client_internals.gapic`, through which every call of the client library goes) with
counting wrappers, until `close()`.

What counts as a document read or written follows Firestore's billing:
- BatchGetDocuments (`get`, `get_all`): one read per document asked for, found or missing;
- GetDocument (shared/gcp/batched_reads.py's single reads): one read, found or missing (a
  missing document answers NotFound, counted as a missing read, not as an error);
- RunQuery (`stream`, `get` of a query): one read per document streamed back, and one for a
  query that completes with no document (the minimum charge of a query);
- RunAggregationQuery (`count()`): one read per call (the minimum; a large count bills one
  per 1,000 index entries, which the client cannot see);
- Commit (through the GAPIC client or the transport's stub): the documents of a commit that
  succeeded (one per write result); the writes of a commit that failed wrote and billed nothing
  and are counted apart as rejected;
- BatchWrite (BulkWriter): the writes whose status is OK;
- BeginTransaction, Rollback: calls only;
- Listen (`on_snapshot`): one read per document the stream delivers as added or changed (the
  listener's first snapshot, then each change), read from the transport's stream, which the
  client library calls directly.
Every call, and every call that raised (by method and error, e.g. Aborted), is counted too.
Reads and rejected writes are also counted by collection (the last collection of the document's
path, or the collection a query asks), so a benchmark can tell a claim that lost its coupon to
another instance from a lost race on some other document.
Other RPCs (list_documents, …) are not wrapped. Counts are totals since the counter was
installed, safe to update from any thread; `snapshot()` differences give a phase's share.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.gcp import client_internals
from shared.gcp.writes import raising_api_errors

# Documents counted as the stream arrives:
STREAMING = ("batch_get_documents", "run_query")
# Counted when the call returns (an aggregation's stream carries no documents: one read a call):
UNARY = (
    "get_document",
    "run_aggregation_query",
    "commit",
    "batch_write",
    "begin_transaction",
    "rollback",
)
_INSTALLED = "_codedrop_rpc_counter"


@dataclass(frozen=True)
class RpcCounts:
    """Totals at one moment; subtract two snapshots for what happened in between."""

    calls: Mapping[str, int] = field(default_factory=dict)  # RPCs sent, by method
    errors: Mapping[str, int] = field(default_factory=dict)  # "method: Error" of calls that raised
    reads: Mapping[str, int] = field(default_factory=dict)  # documents read, by method
    missing: int = 0  # of the batch-get reads, documents that did not exist
    empty_queries: int = 0  # of the run_query reads, queries that returned nothing
    writes: int = 0  # documents written by commits and batch writes that succeeded
    writes_rejected: int = 0  # writes sent in commits that failed (nothing written)
    reads_by_collection: Mapping[str, int] = field(default_factory=dict)
    writes_by_collection: Mapping[str, int] = field(default_factory=dict)  # of commits only
    # commits that failed, by error and by the collections they wrote ("coupons+claims")
    rejected_commits: Mapping[str, int] = field(default_factory=dict)

    @property
    def documents_read(self) -> int:
        return sum(self.reads.values())

    def failed(self, *errors: str) -> int:
        """Calls that raised one of these errors (by class name, e.g. "Aborted"), any method."""
        return sum(n for key, n in self.errors.items() if key.split(": ", 1)[1] in errors)

    def __add__(self, other: RpcCounts) -> RpcCounts:
        return self._combine(other, 1)

    def __sub__(self, other: RpcCounts) -> RpcCounts:
        return self._combine(other, -1)

    def _combine(self, other: RpcCounts, sign: int) -> RpcCounts:
        def merged(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
            keys = dict.fromkeys([*a, *b])
            return {k: v for k in keys if (v := a.get(k, 0) + sign * b.get(k, 0))}

        return RpcCounts(
            calls=merged(self.calls, other.calls),
            errors=merged(self.errors, other.errors),
            reads=merged(self.reads, other.reads),
            missing=self.missing + sign * other.missing,
            empty_queries=self.empty_queries + sign * other.empty_queries,
            writes=self.writes + sign * other.writes,
            writes_rejected=self.writes_rejected + sign * other.writes_rejected,
            reads_by_collection=merged(self.reads_by_collection, other.reads_by_collection),
            writes_by_collection=merged(self.writes_by_collection, other.writes_by_collection),
            rejected_commits=merged(self.rejected_commits, other.rejected_commits),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "documents_read": self.documents_read,
            "documents_written": self.writes,
            "reads_by_method": dict(self.reads),
            "missing_documents": self.missing,
            "empty_queries": self.empty_queries,
            "writes_rejected": self.writes_rejected,
            "reads_by_collection": dict(self.reads_by_collection),
            "writes_by_collection": dict(self.writes_by_collection),
            "rejected_commits": dict(self.rejected_commits),
            "calls": dict(self.calls),
            "errors": dict(self.errors),
        }


class RpcCounter:
    """Counts the RPCs of one client from construction until `close()` (or the `with` block)."""

    def __init__(self, client: firestore.Client) -> None:
        self._api: Any = client_internals.gapic(client)  # built on first use
        if getattr(self._api, _INSTALLED, None) is not None:
            raise RuntimeError("this client's RPCs are already counted")
        self._lock = threading.Lock()
        self._calls: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._reads: Counter[str] = Counter()
        self._by_collection: Counter[str] = Counter()
        self._written_to: Counter[str] = Counter()
        self._rejected_commits: Counter[str] = Counter()
        self._missing = self._empty = self._writes = self._rejected = 0
        for name in STREAMING:
            setattr(self._api, name, self._streaming(name, getattr(self._api, name)))
        for name in UNARY:
            setattr(self._api, name, self._unary(name, getattr(self._api, name)))
        # Listeners open their stream on the transport's stub itself (google.cloud.firestore_v1
        # .watch), and the claim sends its commit there (shared/gcp/writes.send_commit): those
        # stubs are replaced where the transport keeps them. The GAPIC client finds its wrapper
        # of a method under the stub the transport holds now: the counting stub gets the same
        # wrapper, which calls the stub it was built with, so no call is counted twice.
        transport = client_internals.transport(self._api)
        self._stub_table = client_internals.transport_stubs(transport)
        self._wrapped = client_internals.wrapped_methods(transport)
        self._listen = transport.listen
        self._commit = transport.commit
        self._stub_table["listen"] = self._listening(self._listen)
        self._stub_table["commit"] = self._unary("commit", raising_api_errors(self._commit))
        self._wrapped[self._stub_table["commit"]] = self._wrapped[self._commit]
        setattr(self._api, _INSTALLED, self)

    def close(self) -> None:
        """Put the client's own methods back (they are class attributes: drop ours)."""
        if getattr(self._api, _INSTALLED, None) is not self:
            return
        for name in (*STREAMING, *UNARY, _INSTALLED):
            delattr(self._api, name)
        self._stub_table["listen"] = self._listen
        del self._wrapped[self._stub_table["commit"]]
        self._stub_table["commit"] = self._commit

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def snapshot(self) -> RpcCounts:
        with self._lock:
            return RpcCounts(
                calls=dict(self._calls),
                errors=dict(self._errors),
                reads=dict(self._reads),
                missing=self._missing,
                empty_queries=self._empty,
                writes=self._writes,
                writes_rejected=self._rejected,
                reads_by_collection=dict(self._by_collection),
                writes_by_collection=dict(self._written_to),
                rejected_commits=dict(self._rejected_commits),
            )

    # --- counting --------------------------------------------------------------------------

    def _called(self, name: str) -> None:
        with self._lock:
            self._calls[name] += 1

    def _failed(
        self, name: str, error: BaseException, *, rejected: int = 0, collections: str = ""
    ) -> None:
        with self._lock:
            self._errors[f"{name}: {type(error).__name__}"] += 1
            self._rejected += rejected
            if collections:
                self._rejected_commits[f"{type(error).__name__}: {collections}"] += 1

    def _read(self, name: str, collection: str, *, missing: int = 0, empty: int = 0) -> None:
        with self._lock:
            self._reads[name] += 1
            self._by_collection[collection] += 1
            self._missing += missing
            self._empty += empty

    def _wrote(self, written: int, rejected: int = 0) -> None:
        with self._lock:
            self._writes += written
            self._rejected += rejected

    def _streaming(self, name: str, method: Callable[..., Any]) -> Callable[..., Iterator[Any]]:
        def counted(*args: Any, **kwargs: Any) -> Iterator[Any]:
            self._called(name)
            try:
                responses = method(*args, **kwargs)
            except Exception as exc:
                self._failed(name, exc)
                raise
            return self._stream(name, responses, _queried(_request(args, kwargs)))

        return counted

    def _stream(self, name: str, responses: Iterable[Any], queried: str) -> Iterator[Any]:
        """Count documents as they arrive: a caller may stop reading early (a single get)."""
        documents = 0
        try:
            for response in responses:
                # The raw message: proto-plus would wrap the document once more per response,
                # a cost the measured code would be charged for.
                message = client_internals.raw_message(response)
                if name == "batch_get_documents":
                    # A response may carry only the id of a transaction it began.
                    if message.HasField("found"):
                        self._read(name, _collection(message.found.name))
                    elif message.missing:
                        self._read(name, _collection(message.missing), missing=1)
                elif message.HasField("document"):
                    documents += 1
                    self._read(name, _collection(message.document.name))
                yield response
        except Exception as exc:
            self._failed(name, exc)
            raise
        if name == "run_query" and documents == 0:
            self._read(name, queried, empty=1)

    def _unary(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self._called(name)
            try:
                response = method(*args, **kwargs)
            except Exception as exc:
                if name == "get_document" and isinstance(exc, gexc.NotFound):
                    self._read(name, _collection(_field(_request(args, kwargs), "name")), missing=1)
                    raise
                writes = _writes(_request(args, kwargs)) if name == "commit" else None
                into = sorted({_collection(_written(w)) for w in writes or ()} - {""})
                self._failed(name, exc, rejected=len(writes or ()), collections="+".join(into))
                raise
            if name == "get_document":
                self._read(name, _collection(response.name))
            elif name == "run_aggregation_query":
                self._read(
                    name, _queried(_field(_request(args, kwargs), "structured_aggregation_query"))
                )
            elif name == "commit":
                writes = _writes(_request(args, kwargs))
                self._wrote(len(client_internals.raw_message(response).write_results))
                with self._lock:
                    self._written_to.update(_collection(_written(w)) for w in writes)
            elif name == "batch_write":
                written = sum(1 for status in response.status if status.code == 0)
                self._wrote(written, len(response.status) - written)
            return response

        return counted

    def _listening(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self._called("listen")
            try:
                call = method(*args, **kwargs)
            except Exception as exc:
                self._failed("listen", exc)
                raise
            return _CountedListen(call, self)

        return counted


class _CountedListen:
    """A Listen stream (a gRPC call the library also cancels and asks whether it is active)
    that counts the documents it delivers."""

    def __init__(self, call: Any, counter: RpcCounter) -> None:
        self._call = call
        self._counter = counter

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Any:
        response = next(self._call)
        message = client_internals.raw_message(response)
        if message.WhichOneof("response_type") == "document_change":
            change = message.document_change
            if change.target_ids:  # added to or changed in the listened result
                self._counter._read("listen", _collection(change.document.name))
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)


def _collection(document_name: str) -> str:
    """projects/P/databases/D/documents/campaigns/c/coupons/id -> "coupons"."""
    parts = document_name.split("/")
    return parts[-2] if len(parts) >= 2 else ""


def _written(write: Any) -> str:
    """The name of the document a Write changes."""
    for kind in ("update", "transform"):
        target = getattr(write, kind, None)
        name = getattr(target, "name", None) or getattr(target, "document", None)
        if name:
            return str(name)
    return str(getattr(write, "delete", "") or "")


def _queried(request: Any) -> str:
    """The collection a query asks (for an empty answer, which names no document)."""
    structured = _field(request, "structured_query")
    sources = getattr(structured, "from_", None) if structured is not None else None
    return str(sources[0].collection_id) if sources else ""


def _request(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    return kwargs.get("request", args[0] if args else None)


def _writes(request: Any) -> Any:
    """A commit's writes, raw when the request is a proto-plus message (iterating its writes
    through proto-plus would wrap each one, at the measured code's expense)."""
    return _field(client_internals.raw_message(request), "writes") or ()


def _field(request: Any, name: str) -> Any:
    """A field of a request given as a dict (as the client library does) or as a message."""
    if isinstance(request, Mapping):
        return request.get(name)
    return getattr(request, name, None)
