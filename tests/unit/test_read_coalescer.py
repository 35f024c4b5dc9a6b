"""Concurrent reads share batched get_all calls (pure logic on a stand-in client)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from shared.gcp.batched_reads import ReadCoalescer


@dataclass(frozen=True)
class Ref:
    path: str


@dataclass(frozen=True)
class Snap:
    reference: Ref
    exists: bool


class SlowDb:
    """get_all for batches; read_one for a lone document (GetDocument in the real reader)."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[int] = []
        self.single_reads = 0
        self.lock = threading.Lock()
        self.fail = fail

    def get_all(self, refs: Iterable[Ref]) -> list[Snap]:
        refs = list(refs)
        with self.lock:
            self.calls.append(len(refs))
        time.sleep(0.01)  # a round trip, during which more requests arrive
        if self.fail:
            raise RuntimeError("unavailable")
        return [Snap(reference=r, exists=not r.path.endswith("missing")) for r in refs]

    def read_one(self, db: object, ref: Ref) -> Snap:
        assert db is self
        with self.lock:
            self.single_reads += 1
        return self.get_all([ref])[0]


def coalescer_of(db: SlowDb) -> ReadCoalescer:
    return ReadCoalescer(db=db, read_one=db.read_one)  # type: ignore[arg-type]


def test_concurrent_requests_share_reads_and_each_gets_its_own_documents() -> None:
    db = SlowDb()
    coalescer = coalescer_of(db)

    def ask(i: int) -> dict[str, Any]:
        refs: list[Any] = [Ref("campaigns/c"), Ref(f"campaigns/c/claims/u{i}"), Ref("x/missing")]
        return coalescer.get(refs)

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(ask, range(200)))

    for i, result in enumerate(results):
        assert set(result) == {"campaigns/c", f"campaigns/c/claims/u{i}", "x/missing"}
        assert result["x/missing"].exists is False
    assert len(db.calls) < 100  # far fewer round trips than requests
    # The shared campaign document is read once per batch, not once per request.
    assert sum(db.calls) < 200 * 3


def test_a_failed_read_fails_every_request_of_its_batch_and_the_next_ones_still_run() -> None:
    db = SlowDb(fail=True)
    coalescer = coalescer_of(db)

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(coalescer.get, [Ref(f"d/{i}")]) for i in range(20)]  # type: ignore[list-item]
        for future in futures:
            with pytest.raises(RuntimeError, match="unavailable"):
                future.result(timeout=5)

    db.fail = False
    assert coalescer.get([Ref("d/ok")])["d/ok"].exists  # type: ignore[list-item]


def test_a_lone_document_is_read_on_its_own_and_several_in_one_batch() -> None:
    db = SlowDb()
    coalescer = coalescer_of(db)

    assert coalescer.get([Ref("d/1")])["d/1"].exists  # type: ignore[list-item]
    # The same document twice is still one document.
    assert set(coalescer.get([Ref("d/2"), Ref("d/2")])) == {"d/2"}  # type: ignore[list-item]
    assert db.single_reads == 2
    result = coalescer.get([Ref("d/3"), Ref("x/missing")])  # type: ignore[list-item]
    assert result["x/missing"].exists is False
    assert db.single_reads == 2
    assert db.calls == [1, 1, 2]
