"""The benchmarks' RPC counter (devkit/firestore_rpcs.py) on the emulator: documents read
and written are counted per RPC as Firestore bills them, from any thread, and the client is left
as it was."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from devkit.cleanup import delete_tree
from devkit.firestore_rpcs import RpcCounter, RpcCounts
from shared.gcp import client_internals
from shared.gcp.batched_reads import ReadCoalescer, read_document
from shared.gcp.firestore import Snapshot

pytestmark = pytest.mark.emulator


@pytest.fixture
def collection(db: firestore.Client) -> Iterator[firestore.CollectionReference]:
    """A collection of three documents, n = 0, 1, 2, written before counting starts."""
    ref = db.collection(f"rpc-test-{uuid.uuid4().hex[:12]}")
    batch = db.batch()
    for n in range(3):
        batch.set(ref.document(f"d{n}"), {"n": n})
    batch.commit()
    yield ref
    delete_tree(db, ref)


def counted(db: firestore.Client, work: Callable[[], object]) -> RpcCounts:
    with RpcCounter(db) as counter:
        work()
        return counter.snapshot()


def test_a_batch_get_reads_every_document_asked_for_found_or_missing(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    refs = [collection.document("d0"), collection.document("d1"), collection.document("nope")]
    counts = counted(db, lambda: list(db.get_all(refs)))
    assert counts.reads == {"batch_get_documents": 3}
    assert counts.missing == 1
    assert counts.calls == {"batch_get_documents": 1}
    assert counts.writes == 0


def test_a_query_reads_what_it_returns_and_an_empty_one_costs_one_read(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    def queries() -> None:
        assert len(collection.where(filter=FieldFilter("n", ">=", 1)).get()) == 2
        assert collection.where(filter=FieldFilter("n", ">", 5)).get() == []

    counts = counted(db, queries)
    assert counts.reads == {"run_query": 3}
    assert counts.empty_queries == 1
    assert counts.calls == {"run_query": 2}


def test_a_count_is_one_read(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    counts = counted(db, lambda: collection.count().get())  # type: ignore[no-untyped-call]
    assert counts.reads == {"run_aggregation_query": 1}


def test_writes_are_counted_when_the_commit_succeeds_and_rejected_when_it_fails(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    def commits() -> None:
        batch = db.batch()
        batch.create(collection.document("new"), {"n": 9})
        batch.update(collection.document("d0"), {"n": 10})
        batch.commit()
        failing = db.batch()
        failing.create(collection.document("d1"), {"n": 11})  # exists: nothing is written
        failing.set(collection.document("other"), {"n": 12})
        with pytest.raises(gexc.AlreadyExists):
            failing.commit()

    counts = counted(db, commits)
    assert counts.writes == 2
    assert counts.writes_by_collection == {collection.id: 2}
    assert counts.writes_rejected == 2
    assert counts.calls == {"commit": 2}
    assert counts.errors == {"commit: AlreadyExists": 1}
    assert counts.failed("AlreadyExists") == 1
    assert not collection.document("other").get().exists


def test_reads_and_failed_commits_are_also_counted_by_collection(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    """A benchmark tells a claim that lost its coupon (a guarded commit on `coupons`) from
    other lost races, and what each collection cost in reads."""
    read_at = collection.document("d0").get().update_time
    collection.document("d0").update({"n": 20})  # the guard below is stale now
    name = collection.id

    def work() -> None:
        list(db.get_all([collection.document("d0"), collection.document("nope")]))
        assert collection.where(filter=FieldFilter("n", ">", 99)).get() == []
        batch = db.batch()
        batch.update(
            collection.document("d0"), {"n": 21}, option=db.write_option(last_update_time=read_at)
        )
        with pytest.raises(gexc.FailedPrecondition):
            batch.commit()

    counts = counted(db, work)
    assert counts.reads_by_collection == {name: 3}
    assert counts.rejected_commits == {f"FailedPrecondition: {name}": 1}


def test_a_transaction_counts_its_begin_reads_and_commit(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    @firestore.transactional
    def bump(transaction: firestore.Transaction) -> None:
        snapshot = collection.document("d2").get(transaction=transaction)
        transaction.update(snapshot.reference, {"n": (snapshot.get("n") or 0) + 1})

    counts = counted(db, lambda: bump(db.transaction()))
    assert counts.calls == {"begin_transaction": 1, "batch_get_documents": 1, "commit": 1}
    assert counts.documents_read == 1
    assert counts.writes == 1


def test_counts_from_many_threads_add_up_and_snapshots_subtract(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    ref = collection.document("d0")
    with RpcCounter(db) as counter:
        ref.get()
        before = counter.snapshot()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: ref.get(), range(200)))
        phase = counter.snapshot() - before
    assert phase.reads == {"batch_get_documents": 200}
    assert phase.calls == {"batch_get_documents": 200}
    assert (before + phase).documents_read == 201


def test_a_listener_reads_its_document_once_then_once_per_change(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    seen: list[int] = []
    changed = threading.Condition()

    def on_snapshot(documents: list[Snapshot], *_: object) -> None:
        with changed:
            seen.append((documents[0].to_dict() or {})["n"])
            changed.notify_all()

    def delivered(count: int) -> None:
        with changed:
            assert changed.wait_for(lambda: len(seen) == count, timeout=10)

    with RpcCounter(db) as counter:
        watch = collection.document("d1").on_snapshot(on_snapshot)
        try:
            delivered(1)
            collection.document("d1").update({"n": 10})
            delivered(2)
            collection.document("d1").update({"n": 11})
            delivered(3)
        finally:
            watch.unsubscribe()  # type: ignore[no-untyped-call]
        counts = counter.snapshot()
    assert seen == [1, 10, 11]
    assert counts.reads == {"listen": 3}
    assert counts.reads_by_collection == {collection.id: 3}
    assert counts.calls["listen"] == 1


def test_closing_puts_the_client_back(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    api = client_internals.gapic(db)
    listen = client_internals.transport(api).listen
    counter = RpcCounter(db)
    with pytest.raises(RuntimeError, match="already counted"):
        RpcCounter(db)
    counter.close()
    collection.document("d0").get()
    assert counter.snapshot().documents_read == 0
    assert "batch_get_documents" not in vars(api)
    assert "commit" not in vars(api)
    assert client_internals.transport(api).listen is listen


def test_a_single_read_through_get_document_is_one_read_found_or_missing(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    """The read coalescer reads a lone document with GetDocument (a unary call); a missing one
    answers NotFound, which bills a read like a batch get's `missing`."""
    with RpcCounter(db) as counter:
        found = read_document(db, collection.document("d1"))
        missing = read_document(db, collection.document("nope"))
        counts = counter.snapshot()

    assert found.exists
    assert found.to_dict() == {"n": 1}
    assert found.reference.path == collection.document("d1").path
    assert found.update_time == collection.document("d1").get().update_time
    assert not missing.exists
    assert missing.to_dict() is None
    assert counts.calls == {"get_document": 2}
    assert counts.reads == {"get_document": 2}
    assert counts.reads_by_collection == {collection.id: 2}
    assert counts.missing == 1
    assert counts.errors == {}


def test_the_read_coalescer_reads_a_lone_document_with_get_document_and_batches_with_get_all(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    reader = ReadCoalescer(db=db)
    one, two = collection.document("d0"), collection.document("d2")
    with RpcCounter(db) as counter:
        alone = reader.get([one])
        together = reader.get([one, two, collection.document("nope")])
        counts = counter.snapshot()

    assert alone[one.path].to_dict() == {"n": 0}
    assert together[two.path].to_dict() == {"n": 2}
    assert not together[collection.document("nope").path].exists
    assert counts.calls == {"get_document": 1, "batch_get_documents": 1}
    assert counts.documents_read == 4
