"""Commits built as protobufs (shared/gcp/commits.py) store what the client library's batch would,
and fail as it does."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.gcp import commits

pytestmark = pytest.mark.emulator

FIELDS: dict[str, object] = {
    "flag": True,
    "count": 7,
    "big": 2**62,
    "share": 0.25,
    "name": "shopper-1",
    "nothing": None,
    "at": datetime(2026, 11, 26, 12, 0, 0, 123456, tzinfo=UTC),
}


@pytest.fixture
def collection(db: firestore.Client) -> Iterator[firestore.CollectionReference]:
    ref = db.collection(f"commits-test-{uuid.uuid4().hex[:12]}")
    yield ref
    db.recursive_delete(ref)


def test_a_create_stores_what_the_librarys_batch_stores(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    batch = db.batch()
    batch.create(collection.document("library"), FIELDS)
    batch.commit()

    commits.commit(db, [commits.create(db, collection.document("built"), FIELDS)])

    built = collection.document("built").get().to_dict()
    assert built == collection.document("library").get().to_dict()
    assert built == FIELDS


def test_writes_commit_together_and_fail_together_as_the_librarys_do(
    db: firestore.Client, collection: firestore.CollectionReference
) -> None:
    commits.commit(
        db,
        [
            commits.create(db, collection.document("a"), {"n": 1}),
            commits.create(db, collection.document("b"), {"n": 1}),
        ],
    )
    read = collection.document("a").get()

    with pytest.raises(gexc.AlreadyExists):  # the update would apply, the create cannot
        commits.commit(
            db,
            [
                commits.update(db, read.reference, {"n": 2}, last_update_time=read.update_time),
                commits.create(db, collection.document("b"), {"n": 3}),
            ],
        )
    assert collection.document("a").get().to_dict() == {"n": 1}

    commits.commit(
        db, [commits.update(db, read.reference, {"m": 2}, last_update_time=read.update_time)]
    )
    assert collection.document("a").get().to_dict() == {"n": 1, "m": 2}  # other fields kept
    with pytest.raises(gexc.FailedPrecondition):  # changed since that read
        commits.commit(
            db, [commits.update(db, read.reference, {"n": 9}, last_update_time=read.update_time)]
        )


def test_only_plain_values_and_aware_times_are_encoded() -> None:
    with pytest.raises(TypeError):
        commits.encode({"nested": 1})
    with pytest.raises(ValueError, match="naive"):
        commits.encode(datetime(2026, 11, 26, 12, 0))
