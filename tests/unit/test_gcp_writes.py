"""Raw Write protobufs (shared/gcp/writes) equal the client library's own for the same call."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers
from google.protobuf import timestamp_pb2

from shared.gcp import client_internals, writes

PATH = "projects/demo-x/databases/(default)/documents/campaigns/c/coupons/abc"
NANOS = DatetimeWithNanoseconds.from_timestamp_pb(  # type: ignore[no-untyped-call]
    timestamp_pb2.Timestamp(seconds=1_767_225_600, nanos=641_370_123)
)
# Every type the raw builder takes, with the values at the edges of each.
DATA: dict[str, Any] = {
    "text": "BENCH-000000001",
    "empty": "",
    "unicode": "zoë@example.com",
    "none": None,
    "yes": True,
    "no": False,
    "zero": 0,
    "big": 2**62,
    "negative": -5,
    "real": 1.5,
    "real_zero": 0.0,
    "aware": datetime(2026, 11, 26, 11, 0, 0, 999_999, tzinfo=UTC),
    "offset": datetime(2026, 11, 26, 12, 0, 0, 1, tzinfo=timezone(timedelta(hours=1))),
    "naive": datetime(2026, 11, 26, 11, 0, 0, 5),
    "before_1970": datetime(1969, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC),
    "nanoseconds": NANOS,
}


@pytest.fixture(scope="module")
def db() -> firestore.Client:
    # Never connects: building writes needs only the client's paths and options.
    return firestore.Client(project="demo-x", credentials=_anonymous())


def _anonymous() -> Any:
    from google.auth.credentials import AnonymousCredentials

    return AnonymousCredentials()  # type: ignore[no-untyped-call]


def _raw(library_writes: list[Any]) -> Any:
    (write,) = library_writes
    return type(write).pb(write)


def test_create_equals_the_librarys() -> None:
    assert writes.create(PATH, DATA) == _raw(_helpers.pbs_for_create(PATH, DATA))


def test_update_equals_the_librarys(db: firestore.Client) -> None:
    assert writes.update(PATH, DATA) == _raw(_helpers.pbs_for_update(PATH, DATA, None))


@pytest.mark.parametrize("read_at", [NANOS, datetime(2026, 1, 1, 0, 0, 0, 7, tzinfo=UTC)])
def test_guarded_update_equals_the_librarys(db: firestore.Client, read_at: datetime) -> None:
    # The library's precondition keeps microseconds only, even of a DatetimeWithNanoseconds.
    option = db.write_option(last_update_time=read_at)
    assert writes.update(PATH, DATA, last_update_time=read_at) == _raw(
        _helpers.pbs_for_update(PATH, DATA, option)
    )


def test_writes_go_into_a_batch_as_the_librarys_do(db: firestore.Client) -> None:
    ref = db.document("campaigns/c/coupons/abc")
    ours, theirs = db.batch(), db.batch()
    writes.add_writes(ours, [writes.create(writes.document_name(ref), {"a": 1})])
    theirs.create(ref, {"a": 1})
    assert [_as_raw(w) for w in client_internals.batch_writes(ours)] == [
        _as_raw(w) for w in client_internals.batch_writes(theirs)
    ]
    prefix = writes.document_prefix(db.collection("campaigns/c/coupons"))
    assert prefix + "abc" == writes.document_name(ref)
    assert ref.path == "campaigns/c/coupons/abc"
    assert writes.document_name(ref).endswith("/documents/campaigns/c/coupons/abc")


def _as_raw(write: Any) -> Any:
    return write if isinstance(write, writes.Write) else type(write).pb(write)


@pytest.mark.parametrize("name", ["a.b", "with space", "1st", "`quoted`"])
def test_only_simple_field_names(name: str) -> None:
    with pytest.raises(ValueError, match="simple field names"):
        writes.create(PATH, {name: 1})
    with pytest.raises(ValueError, match="simple field names"):
        writes.update(PATH, {name: 1})


@pytest.mark.parametrize("item", [b"bytes", [1], {"a": 1}, firestore.SERVER_TIMESTAMP])
def test_other_types_are_left_to_the_library(item: Any) -> None:
    with pytest.raises(TypeError, match="no raw encoding"):
        writes.create(PATH, {"field": item})
