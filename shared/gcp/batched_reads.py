"""Concurrent reads by reference share one batched read.

Used by the claim engine and by count_usage (which checks each event against its claim or job).
At the end of a sale thousands of shoppers hear SOLD_OUT, and each answer needs the campaign and
the shopper's own claim slot. One `get_all` per shopper costs a round trip and ~2 ms of CPU each;
here the requests that arrive while a read is in flight are served together by the next read,
which fetches the campaign once for all of them. Every answer still rests on a read that started
after its request arrived.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from google.cloud import firestore

MAX_BATCH_DOCUMENTS = 300


@dataclass(eq=False)
class _Request:
    refs: Sequence[firestore.DocumentReference]
    wake: threading.Event = field(default_factory=threading.Event)
    lead: bool = False
    finished: bool = False
    result: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None


class ReadCoalescer:
    def __init__(self, *, db: firestore.Client) -> None:
        self.db = db
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
