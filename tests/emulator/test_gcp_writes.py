"""Raw writes committed by shared/gcp/writes (`commit` of a batch, `commit_writes` of a list) on
the emulator: they write what the library's own would, fail as they would, and are counted as any
commit by the benchmarks' RPC counter."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore

from devkit.cleanup import delete_tree
from devkit.firestore_rpcs import RpcCounter
from shared.gcp import client_internals, writes

pytestmark = pytest.mark.emulator

NOW = datetime(2026, 11, 26, 11, 0, 0, 123_456, tzinfo=UTC)
FIELDS: dict[str, object] = {
    "flag": True,
    "count": 7,
    "big": 2**62,
    "share": 0.25,
    "name": "shopper-1",
    "nothing": None,
    "at": NOW,
}


@pytest.fixture
def collection(db: firestore.Client) -> Iterator[firestore.CollectionReference]:
    ref = db.collection(f"writes-test-{uuid.uuid4().hex[:12]}")
    yield ref
    delete_tree(db, ref)


def test_raw_and_library_writes_commit_together(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    collection.document("old").set({"state": "available", "n": 1})
    read_at = collection.document("old").get().update_time
    prefix = writes.document_prefix(collection)
    batch = db.batch()
    writes.add_writes(
        batch,
        [
            writes.create(prefix + "new", {"code": "A", "at": NOW, "none": None, "n": 2}),
            writes.update(prefix + "old", {"state": "claimed"}, last_update_time=read_at),
        ],
    )
    batch.set(collection.document("lib"), {"x": True})
    with RpcCounter(db) as counter:
        writes.commit(batch)
        counts = counter.snapshot()
    assert counts.writes == 3
    assert counts.calls == {"commit": 1}
    assert counts.writes_by_collection == {collection.id: 3}
    assert client_internals.batch_writes(batch) == []
    assert collection.document("new").get().to_dict() == {
        "code": "A",
        "at": NOW,
        "none": None,
        "n": 2,
    }
    assert collection.document("old").get().to_dict() == {"state": "claimed", "n": 1}
    assert collection.document("lib").get().to_dict() == {"x": True}


def test_a_raw_commit_fails_whole_as_the_librarys(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    collection.document("taken").set({"state": "available"})
    read_at = collection.document("taken").get().update_time
    collection.document("taken").update({"state": "claimed"})  # someone else, since the read
    prefix = writes.document_prefix(collection)

    guarded = db.batch()
    writes.add_writes(
        guarded,
        [
            writes.create(prefix + "slot", {"n": 1}),
            writes.update(prefix + "taken", {"state": "mine"}, last_update_time=read_at),
        ],
    )
    with RpcCounter(db) as counter, pytest.raises(gexc.FailedPrecondition):
        writes.commit(guarded)
    assert counter.snapshot().writes_rejected == 2
    assert not collection.document("slot").get().exists

    collection.document("slot").set({"n": 0})
    twice = db.batch()
    writes.add_writes(twice, [writes.create(prefix + "slot", {"n": 1})])
    with pytest.raises(gexc.AlreadyExists):
        writes.commit(twice)

    missing = db.batch()
    writes.add_writes(missing, [writes.update(prefix + "gone", {"n": 1})])
    with pytest.raises(gexc.NotFound):
        writes.commit(missing)


def test_a_create_stores_what_the_librarys_batch_stores(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    batch = db.batch()
    batch.create(collection.document("library"), FIELDS)
    batch.commit()

    writes.commit_writes(
        db, [writes.create(writes.document_name(collection.document("built")), FIELDS)]
    )

    built = collection.document("built").get().to_dict()
    assert built == collection.document("library").get().to_dict()
    assert built == FIELDS


@pytest.mark.parametrize("send", [writes.commit_writes, writes.send_commit])
def test_a_list_of_writes_commits_and_fails_together(
    db: firestore.Client,
    collection: firestore.CollectionReference,
    send: Callable[[firestore.Client, Sequence[Any]], None],
) -> None:
    prefix = writes.document_prefix(collection)
    send(db, [writes.create(prefix + "a", {"n": 1}), writes.create(prefix + "b", {"n": 1})])
    read_at = collection.document("a").get().update_time

    with pytest.raises(gexc.AlreadyExists):  # the update would apply, the create cannot
        send(
            db,
            [
                writes.update(prefix + "a", {"n": 2}, last_update_time=read_at),
                writes.create(prefix + "b", {"n": 3}),
            ],
        )
    assert collection.document("a").get().to_dict() == {"n": 1}

    send(db, [writes.update(prefix + "a", {"m": 2}, last_update_time=read_at)])
    assert collection.document("a").get().to_dict() == {"n": 1, "m": 2}  # other fields kept
    with pytest.raises(gexc.FailedPrecondition):  # changed since that read
        send(db, [writes.update(prefix + "a", {"n": 9}, last_update_time=read_at)])


def test_a_commit_sent_through_the_stub_is_counted_as_any_commit(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    prefix = writes.document_prefix(collection)
    stub = client_internals.transport(client_internals.gapic(db)).commit
    with RpcCounter(db) as counter:
        writes.send_commit(
            db, [writes.create(prefix + "a", {"n": 1}), writes.create(prefix + "b", {"n": 1})]
        )
        with pytest.raises(gexc.AlreadyExists):
            writes.send_commit(db, [writes.create(prefix + "a", {"n": 2})])
        writes.commit_writes(db, [writes.create(prefix + "c", {"n": 1})])
        counts = counter.snapshot()
    assert counts.calls == {"commit": 3}
    assert counts.writes == 3
    assert counts.writes_by_collection == {collection.id: 3}
    assert counts.errors == {"commit: AlreadyExists": 1}
    assert counts.rejected_commits == {f"AlreadyExists: {collection.id}": 1}
    assert client_internals.transport(client_internals.gapic(db)).commit is stub  # put back
