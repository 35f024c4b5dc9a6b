"""Concurrent reads by reference share one batched read.

Used by the claim engine and by count_usage (which checks each event against its claim or job).
At the end of a sale thousands of shoppers hear SOLD_OUT, and each answer needs the campaign and
the shopper's own claim slot. One `get_all` per shopper costs a round trip and ~2 ms of CPU each;
here the requests that arrive while a read is in flight are served together by the next read,
which fetches the campaign once for all of them. Every answer still rests on a read that started
after its request arrived.

A read of a single document (a batch nobody joined: most of count_usage's and deliver_webhooks'
reads, which the Pub/Sub push hands over one or two at a time) goes through GetDocument instead
of BatchGetDocuments. BatchGetDocuments is a stream, and gRPC starts a Python thread to drive the
streams of a channel whenever none is running, so a stream sent alone pays for a thread: about
0.6 ms of this process's CPU more than the unary call (1.0 against 0.4 ms a read here, 0.5
against 0.45 ms of the emulator's). Both bill one read, found or missing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.base_document import DocumentSnapshot

MAX_BATCH_DOCUMENTS = 300


def read_document(db: firestore.Client, ref: firestore.DocumentReference) -> Any:
    """One document's snapshot through GetDocument, with the client's own retry and timeout
    defaults (a missing document has `exists` False, as from a batch get)."""
    try:
        document = db._firestore_api.get_document(
            request={"name": f"{db._database_string}/documents/{ref.path}"},
            metadata=db._rpc_metadata,
        )
    except gexc.NotFound:
        return DocumentSnapshot(
            ref, None, exists=False, read_time=None, create_time=None, update_time=None
        )
    return DocumentSnapshot(
        ref,
        _helpers.decode_dict(document.fields, db),
        exists=True,
        read_time=None,  # GetDocument does not say; no caller asks
        create_time=document.create_time,
        update_time=document.update_time,
    )


@dataclass(eq=False)
class _Request:
    refs: Sequence[firestore.DocumentReference]
    wake: threading.Event = field(default_factory=threading.Event)
    lead: bool = False
    finished: bool = False
    result: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None


class ReadCoalescer:
    def __init__(
        self,
        *,
        db: firestore.Client,
        read_one: Callable[[firestore.Client, Any], Any] = read_document,
    ) -> None:
        self.db = db
        self._read_one = read_one
        self._lock = threading.Lock()
        self._pending: list[_Request] = []
        self._reading = False

    def get(self, refs: Sequence[firestore.DocumentReference]) -> dict[str, Any]:
        """Snapshots of `refs` by document path (a missing document has `exists` False)."""
        request = _Request(refs=refs)
        with self._lock:
            self._pending.append(request)
            if not self._reading:
                self._reading = request.lead = True
        while not request.finished:
            if request.lead:
                self._serve(request)
            else:
                request.wake.wait()
                request.wake.clear()
        if request.error is not None:
            raise request.error
        return request.result

    def _serve(self, leader: _Request) -> None:
        with self._lock:
            batch: list[_Request] = []
            size = 0
            while self._pending and (
                not batch or size + len(self._pending[0].refs) <= MAX_BATCH_DOCUMENTS
            ):
                batch.append(self._pending.pop(0))
                size += len(batch[-1].refs)
        unique = {ref.path: ref for request in batch for ref in request.refs}
        try:
            if len(unique) == 1:
                [(path, ref)] = unique.items()
                snapshots = {path: self._read_one(self.db, ref)}
            else:
                snapshots = {s.reference.path: s for s in self.db.get_all(list(unique.values()))}
            for request in batch:
                request.result = {ref.path: snapshots[ref.path] for ref in request.refs}
        # Whatever the read raised, every waiter gets the failure a direct read would have given.
        except Exception as exc:  # noqa: BLE001
            for request in batch:
                request.error = exc
        successor: _Request | None = None
        with self._lock:
            leader.lead = False
            for request in batch:
                request.finished = True
            if self._pending:
                successor = self._pending[0]
                successor.lead = True
            else:
                self._reading = False
        for request in batch:
            request.wake.set()
        if successor is not None:
            successor.wake.set()
