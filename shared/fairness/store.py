"""Firestore access for fair drops: the secret, entries, the draw's shards and result,
admissions and refusals (paths in shared/gcp/firestore.py).

No document is written by more than one shopper: an entry or an admission is a document of its
own under an id spread evenly over the id space, and refusals are counted per instance."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath

from shared.fairness.draw import SHARDS, pack, shard_of, unpack
from shared.gcp.firestore import (
    Snapshot,
    admissions_collection,
    drop_secret_ref,
    entries_collection,
    fairness_collection,
    refusals_collection,
)

# A join's write must land before the draw reads the list (docs/fair-drops.md): it waits at
# most this long, and the draw starts FREEZE_SECONDS after the start.
JOIN_WRITE_TIMEOUT_SECONDS = 2.0
PAGE = 1000
# A range of the list is made by the instance that took it, unless it is still not stored this
# long after (that instance stopped): then by whoever sees it next.
LEASE_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class DropSecret:
    seed: bytes
    entry_key: bytes


@dataclass(frozen=True, slots=True)
class StoredDraw:
    digest: str
    count: int
    drawn_at: float
    seed: str | None  # hex, once revealed


@dataclass(frozen=True, slots=True)
class Admission:
    key: str  # the entry id (an entrant) or the same derivation of a later arrival's identity
    place: int | None
    queued_since: float
    admitted_at: float
    released: int  # places the room's threshold had reached when it admitted them


def read_secret(db: firestore.Client, campaign_id: str) -> DropSecret | None:
    snapshot = drop_secret_ref(db, campaign_id).get()
    if not snapshot.exists:
        return None
    data = snapshot.to_dict() or {}
    return DropSecret(seed=bytes.fromhex(data["seed"]), entry_key=bytes.fromhex(data["entry_key"]))


def _entry_ref(db: firestore.Client, campaign_id: str, entry_id: str) -> Any:
    return entries_collection(db, campaign_id, shard_of(entry_id)).document(entry_id)


def create_entry(db: firestore.Client, campaign_id: str, entry_id: str, now: datetime) -> bool:
    """True: a new entry; False: the identity had joined already."""
    try:
        _entry_ref(db, campaign_id, entry_id).create(
            {"joined_at": now}, timeout=JOIN_WRITE_TIMEOUT_SECONDS
        )
    except gexc.AlreadyExists:
        return False
    return True


def entry_exists(db: firestore.Client, campaign_id: str, entry_id: str) -> bool:
    return bool(_entry_ref(db, campaign_id, entry_id).get(field_paths=[]).exists)


# --- the draw ---------------------------------------------------------------------------------
def _shard_ref(db: firestore.Client, campaign_id: str, shard: int) -> Any:
    return fairness_collection(db, campaign_id).document(f"shard-{shard:02d}")


def _draw_ref(db: firestore.Client, campaign_id: str) -> Any:
    return fairness_collection(db, campaign_id).document("draw")


def read_shards(db: firestore.Client, campaign_id: str, shards: Sequence[int]) -> dict[int, bytes]:
    """The shards of the list already written, among `shards`: shard -> packed entry ids."""
    refs = {_shard_ref(db, campaign_id, shard).path: shard for shard in shards}
    found: dict[int, bytes] = {}
    for snapshot in db.get_all([_shard_ref(db, campaign_id, shard) for shard in shards]):
        if snapshot.exists:
            found[refs[snapshot.reference.path]] = (snapshot.to_dict() or {})["entry_ids"]
    return found


def shard_entry_ids(db: firestore.Client, campaign_id: str, shard: int) -> list[str]:
    """The entry ids in one shard's range, ascending, read a page at a time (names only)."""
    collection = entries_collection(db, campaign_id, shard)
    document_id = FieldPath.document_id()
    query = collection.order_by(document_id).select([document_id]).limit(PAGE)
    ids: list[str] = []
    last: Snapshot | None = None
    while True:
        page = list((query.start_after(last) if last is not None else query).stream())
        ids.extend(snapshot.id for snapshot in page)
        if len(page) < PAGE:
            return ids
        last = page[-1]


def lease_shard(db: firestore.Client, campaign_id: str, shard: int, now: float) -> bool:
    """Whether this instance should make the shard: nobody took it, or whoever did has not
    stored it within LEASE_SECONDS (an instance that stopped). Making a shard twice is
    harmless (write_shard keeps the first), only wasted reads."""
    ref = fairness_collection(db, campaign_id).document(f"lease-{shard:02d}")
    try:
        ref.create({"at": now})
    except gexc.AlreadyExists:
        taken = ref.get()
        return bool(taken.exists and now - float((taken.to_dict() or {})["at"]) > LEASE_SECONDS)
    return True


def write_shard(db: firestore.Client, campaign_id: str, shard: int, entry_ids: list[str]) -> bytes:
    """Store a shard once; whoever comes second keeps the first writer's (the same ids: the
    list is frozen)."""
    packed = pack(entry_ids)
    try:
        _shard_ref(db, campaign_id, shard).create({"entry_ids": packed, "count": len(entry_ids)})
    except gexc.AlreadyExists:
        return read_shards(db, campaign_id, [shard])[shard]
    return packed


def all_shard_ids(shards: Mapping[int, bytes]) -> list[str]:
    """Every entry id, ascending (the shards are ranges of ids, in order)."""
    return [entry_id for shard in range(SHARDS) for entry_id in unpack(shards[shard])]


def read_draw(db: firestore.Client, campaign_id: str) -> StoredDraw | None:
    snapshot = _draw_ref(db, campaign_id).get()
    if not snapshot.exists:
        return None
    data = snapshot.to_dict() or {}
    return StoredDraw(
        digest=data["digest"],
        count=int(data["count"]),
        drawn_at=float(data["drawn_at"]),
        seed=data.get("seed"),
    )


def create_draw(db: firestore.Client, campaign_id: str, draw: StoredDraw) -> None:
    """The frozen list's digest, first (the seed is revealed by a second write)."""
    # Another instance may have frozen the same list first: its digest stands.
    with contextlib.suppress(gexc.AlreadyExists):
        _draw_ref(db, campaign_id).create(
            {"digest": draw.digest, "count": draw.count, "drawn_at": draw.drawn_at}
        )


def reveal_seed(db: firestore.Client, campaign_id: str, seed: str) -> None:
    _draw_ref(db, campaign_id).update({"seed": seed})


# --- admissions and refusals ------------------------------------------------------------------
def record_admission(db: firestore.Client, campaign_id: str, admission: Admission) -> None:
    """The first admission of each identity (a later one, e.g. after CONTENDED, keeps it)."""
    with contextlib.suppress(gexc.AlreadyExists):
        admissions_collection(db, campaign_id).document(admission.key).create(
            {
                "place": admission.place,
                "queued_since": admission.queued_since,
                "admitted_at": admission.admitted_at,
                "released": admission.released,
            }
        )


def iter_admissions(
    db: firestore.Client, campaign_id: str, *, after: str | None, limit: int
) -> Iterator[Admission]:
    collection = admissions_collection(db, campaign_id)
    query = collection.order_by(FieldPath.document_id()).limit(limit)
    if after is not None:
        query = query.start_after({FieldPath.document_id(): collection.document(after)})
    for snapshot in query.stream():
        data = snapshot.to_dict() or {}
        yield Admission(
            key=snapshot.id,
            place=data.get("place"),
            queued_since=float(data["queued_since"]),
            admitted_at=float(data["admitted_at"]),
            released=int(data["released"]),
        )


def save_refusals(
    db: firestore.Client, campaign_id: str, instance_id: str, counts: Mapping[str, int]
) -> None:
    refusals_collection(db, campaign_id).document(instance_id).set({"counts": dict(counts)})


def total_refusals(db: firestore.Client, campaign_id: str) -> dict[str, int]:
    total: dict[str, int] = {}
    for snapshot in refusals_collection(db, campaign_id).stream():
        for reason, count in ((snapshot.to_dict() or {}).get("counts") or {}).items():
            total[reason] = total.get(reason, 0) + int(count)
    return dict(sorted(total.items()))
