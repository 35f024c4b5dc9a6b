"""Firestore Write protobufs built directly from the raw message classes, and commits sent
without proto-plus: for the claim's commit (one per code sold, shared/claims/store.py) and for
jobs that commit hundreds of thousands of documents (shared/assignments).

The client library builds each Write through proto-plus: field paths parsed, every value wrapped
and marshalled, messages copied at each step: about 175 µs of Python per document in a bulk job,
most of its CPU, and 0.45 ms of a claim's two writes, more than the gRPC call that sends them.
These build the same messages from the underlying protobuf classes (about 6 µs a document);
tests/unit/test_gcp_writes.py checks that they equal the library's own for every value type they
take. Send them with `commit_writes`, or add them to a batch with `add_writes` and send it with
`commit`: either commits, counts and fails exactly as the library's batch (AlreadyExists,
NotFound, FailedPrecondition), through the library's own client (`_firestore_api`: same RPC,
retry and timeout defaults). `send_commit` sends the same request through the transport's stub
beneath that client, without its retries: for the claim, which retries on its own.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import grpc  # type: ignore[import-untyped]
from google.api_core import exceptions
from google.api_core.gapic_v1 import routing_header
from google.cloud import firestore
from google.cloud.firestore_v1.types import firestore as firestore_types
from google.cloud.firestore_v1.types import write as write_types

Write = write_types.Write.pb()
_CommitRequest = firestore_types.CommitRequest
# A field name the library would send as it is (anything else it quotes or reads as a path).
_SIMPLE_FIELD = re.compile(r"^[_a-zA-Z][_a-zA-Z0-9]*$")
# The library's default timeout for Commit (transports/base.py).
COMMIT_TIMEOUT_SECONDS = 60.0
# Commit failures worth another attempt: contention, a busy or briefly unavailable backend. After
# a deadline the commit may have landed all the same: retry only writes that recognise their own.
TRANSIENT = (
    exceptions.Aborted,
    exceptions.DeadlineExceeded,
    exceptions.ServiceUnavailable,
    exceptions.InternalServerError,
    exceptions.ResourceExhausted,
)


def document_name(ref: firestore.DocumentReference) -> str:
    """The full resource name of the document, as a write names it."""
    name: str = ref._document_path
    return name


def document_prefix(collection: firestore.CollectionReference) -> str:
    """The full resource name of the collection's documents, up to and including the `/`
    before their id."""
    return document_name(collection.document("_"))[:-1]


def _set_timestamp(target: Any, value: dt.datetime, *, keep_nanoseconds: bool) -> None:
    """A datetime as the library sends it: a naive one taken as UTC; a field keeps the
    nanoseconds of a DatetimeWithNanoseconds, a precondition only its microseconds."""
    nanos = getattr(value, "nanosecond", 0) if keep_nanoseconds else 0
    target.seconds, target.nanos = _seconds_nanos(value, nanos)


@lru_cache(maxsize=1024)
def _seconds_nanos(value: dt.datetime, nanos: int) -> tuple[int, int]:
    # Cached: a batch writes one `now` twice per pair, and coupons imported together share
    # their update time. Keyed with the nanoseconds, which a datetime's equality ignores.
    seconds = calendar.timegm(value.utctimetuple())  # whole seconds, no float rounding
    return seconds, nanos or value.microsecond * 1000


def _fill(target: Any, data: Mapping[str, Any]) -> None:
    """A document's fields, written into the message in place (building each Value apart and
    copying it in costs three times as much): the values the library's encode_value takes,
    for these types, and simple field names only (the library reads `a.b` as a path)."""
    _check_names(tuple(data))
    for name, item in data.items():
        kind = type(item)
        if kind is str:
            target[name].string_value = item
        elif item is None:
            target[name].null_value = 0
        elif kind is bool:
            target[name].boolean_value = item
        elif kind is int:
            target[name].integer_value = item
        elif kind is float:
            target[name].double_value = item
        elif isinstance(item, dt.datetime):
            _set_timestamp(target[name].timestamp_value, item, keep_nanoseconds=True)
        else:
            raise TypeError(f"no raw encoding for {kind.__name__}: use the library's own writes")


def create(name: str, data: Mapping[str, Any]) -> Any:
    """`batch.create(ref, data)`: fails with AlreadyExists if the document exists."""
    write = Write()
    write.update.name = name
    _fill(write.update.fields, data)
    write.current_document.exists = False
    return write


def update(
    name: str, data: Mapping[str, Any], *, last_update_time: dt.datetime | None = None
) -> Any:
    """`batch.update(ref, data)`: fails with NotFound if the document does not exist; with
    `last_update_time` (`option=db.write_option(last_update_time=...)`), with FailedPrecondition
    if it changed since it was read at that update time."""
    write = Write()
    write.update.name = name
    _fill(write.update.fields, data)
    write.update_mask.field_paths.extend(sorted(data))  # the library sends the mask sorted
    if last_update_time is None:
        write.current_document.exists = True
    else:
        _set_timestamp(write.current_document.update_time, last_update_time, keep_nanoseconds=False)
    return write


def add_writes(batch: firestore.WriteBatch, writes: Iterable[Any]) -> None:
    """Add writes built here to a batch (the library's own create/update add theirs so)."""
    batch._add_write_pbs(list(writes))


def commit(batch: firestore.WriteBatch) -> None:
    """`batch.commit()`, its writes raw or the library's, without proto-plus on either side:
    the request is built from the raw messages (the library marshals each write again) and the
    write results are not read back (it wraps two objects per document). The batch is emptied
    as the library empties it."""
    raw = [w if isinstance(w, Write) else type(w).pb(w) for w in batch._write_pbs]
    commit_writes(batch._client, raw)
    batch._write_pbs = []


def commit_writes(db: firestore.Client, writes: Sequence[Any]) -> None:
    """Commit writes built here atomically, as a batch holding them would."""
    db._firestore_api.commit(request=_commit_request(db, writes), metadata=db._rpc_metadata)


def send_commit(db: firestore.Client, writes: Sequence[Any]) -> None:
    """`commit_writes` without the GAPIC layer, for a caller that handles transient errors
    itself (the claim takes its next candidate): the same request, with the routing header
    and the default timeout the library sends, through the transport's own stub, and the
    errors it would raise (AlreadyExists, FailedPrecondition, ...), but no retry. The layer
    cost about 100 µs of Python a commit here (its retry and timeout wrappers are built
    anew at each call), a fifth of the claim's commit."""
    commit = raising_api_errors(db._firestore_api._transport.commit)
    commit(_commit_request(db, writes), metadata=_metadata(db), timeout=COMMIT_TIMEOUT_SECONDS)


def raising_api_errors(stub: Callable[..., Any]) -> Callable[..., Any]:
    """A transport stub that raises what the GAPIC client raises in its place (AlreadyExists,
    FailedPrecondition, ...), not grpc's own error."""

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return stub(*args, **kwargs)
        except grpc.RpcError as exc:
            raise exceptions.from_grpc_error(exc) from exc  # type: ignore[no-untyped-call]

    return call


def _commit_request(db: firestore.Client, writes: Sequence[Any]) -> Any:
    """The CommitRequest of these raw writes, wrapped as the GAPIC client takes it."""
    return _CommitRequest.wrap(_CommitRequest.pb()(database=db._database_string, writes=writes))


@lru_cache(maxsize=16)
def _metadata(db: firestore.Client) -> tuple[tuple[str, str], ...]:
    """What the GAPIC layer sends with a commit: the client's metadata, its client-info header
    and the routing header (FirestoreClient.commit)."""
    to_header: Any = routing_header.to_grpc_metadata  # untyped
    routing: tuple[str, str] = to_header((("database", db._database_string),))
    return (*db._rpc_metadata, db._client_info.to_grpc_metadata(), routing)


@lru_cache(maxsize=64)
def _check_names(names: tuple[str, ...]) -> None:
    for name in names:
        if not _SIMPLE_FIELD.match(name):
            raise ValueError(f"field {name!r}: only simple field names are built raw")
