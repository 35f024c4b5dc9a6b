"""Count the Firestore RPCs a client sends, and the documents they read and write.

Benchmarks report reads and writes per code from what actually went over the wire, never from a
constant per success: `RpcCounter` replaces the methods of a `google.cloud.firestore.Client`'s
GAPIC client (`client._firestore_api`, through which every call of the client library goes) with
counting wrappers, until `close()`.

What counts as a document read or written follows Firestore's billing:
- BatchGetDocuments (`get`, `get_all`): one read per document asked for, found or missing;
- RunQuery (`stream`, `get` of a query): one read per document streamed back, and one for a
  query that completes with no document (the minimum charge of a query);
- RunAggregationQuery (`count()`): one read per call (the minimum; a large count bills one
  per 1,000 index entries, which the client cannot see);
- Commit: the documents of a commit that succeeded (one per write result); the writes of a commit
  that failed wrote and billed nothing and are counted apart as rejected;
- BatchWrite (BulkWriter): the writes whose status is OK;
- BeginTransaction, Rollback: calls only.
Every call, and every call that raised (by method and error, e.g. Aborted), is counted too.
Other RPCs (listen, list_documents, …) are not wrapped. Counts are totals since the counter was
installed, safe to update from any thread; `snapshot()` differences give a phase's share.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from google.cloud import firestore

# Documents counted as the stream arrives:
STREAMING = ("batch_get_documents", "run_query")
# Counted when the call returns (an aggregation's stream carries no documents: one read a call):
UNARY = ("run_aggregation_query", "commit", "batch_write", "begin_transaction", "rollback")
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
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "documents_read": self.documents_read,
            "documents_written": self.writes,
            "reads_by_method": dict(self.reads),
            "missing_documents": self.missing,
            "empty_queries": self.empty_queries,
            "writes_rejected": self.writes_rejected,
            "calls": dict(self.calls),
            "errors": dict(self.errors),
        }


class RpcCounter:
    """Counts the RPCs of one client from construction until `close()` (or the `with` block)."""

    def __init__(self, client: firestore.Client) -> None:
        self._api: Any = client._firestore_api  # builds the GAPIC client if not yet built
        if getattr(self._api, _INSTALLED, None) is not None:
            raise RuntimeError("this client's RPCs are already counted")
        self._lock = threading.Lock()
        self._calls: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._reads: Counter[str] = Counter()
        self._missing = self._empty = self._writes = self._rejected = 0
        for name in STREAMING:
            setattr(self._api, name, self._streaming(name, getattr(self._api, name)))
        for name in UNARY:
            setattr(self._api, name, self._unary(name, getattr(self._api, name)))
        setattr(self._api, _INSTALLED, self)

    def close(self) -> None:
        """Put the client's own methods back (they are class attributes: drop ours)."""
        if getattr(self._api, _INSTALLED, None) is not self:
            return
        for name in (*STREAMING, *UNARY, _INSTALLED):
            delattr(self._api, name)

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
            )

    # --- counting --------------------------------------------------------------------------

    def _called(self, name: str) -> None:
        with self._lock:
            self._calls[name] += 1

    def _failed(self, name: str, error: BaseException, *, rejected: int = 0) -> None:
        with self._lock:
            self._errors[f"{name}: {type(error).__name__}"] += 1
            self._rejected += rejected

    def _read(self, name: str, *, missing: int = 0, empty: int = 0) -> None:
        with self._lock:
            self._reads[name] += 1
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
            return self._stream(name, responses)

        return counted

    def _stream(self, name: str, responses: Iterable[Any]) -> Iterator[Any]:
        """Count documents as they arrive: a caller may stop reading early (a single get)."""
        documents = 0
        try:
            for response in responses:
                if name == "batch_get_documents":
                    # A response may carry only the id of a transaction it began.
                    if "found" in response or response.missing:
                        self._read(name, missing=1 if response.missing else 0)
                elif "document" in response:
                    documents += 1
                    self._read(name)
                yield response
        except Exception as exc:
            self._failed(name, exc)
            raise
        if name == "run_query" and documents == 0:
            self._read(name, empty=1)

    def _unary(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self._called(name)
            try:
                response = method(*args, **kwargs)
            except Exception as exc:
                writes = _field(_request(args, kwargs), "writes") if name == "commit" else None
                self._failed(name, exc, rejected=len(writes or ()))
                raise
            if name == "run_aggregation_query":
                self._read(name)
            elif name == "commit":
                self._wrote(len(response.write_results))
            elif name == "batch_write":
                written = sum(1 for status in response.status if status.code == 0)
                self._wrote(written, len(response.status) - written)
            return response

        return counted


def _request(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    return kwargs.get("request", args[0] if args else None)


def _field(request: Any, name: str) -> Any:
    """A field of a request given as a dict (as the client library does) or as a message."""
    if isinstance(request, Mapping):
        return request.get(name)
    return getattr(request, name, None)
