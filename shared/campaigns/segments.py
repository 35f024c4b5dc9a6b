"""A campaign's code space cut into segments that claim-engine instances lease one at a time.

Every coupon has `random_float` in [0, 1); segment i covers [i/COUNT, (i+1)/COUNT). Its document
`campaigns/{id}/segments/{i:03d}` says:
- who reads it (`holder`, until `lease_until`): the holder reads it from the bottom up and moves
  `bottom` past what it has read;
- where others may take from its top when no segment is free (`top`, moved down by each such
  steal): everything in [bottom, top) is read by nobody yet, and since every move of either
  cursor is a write guarded by the update time it was read with, no two readers ever reserve the
  same coupons;
- up to which pool generation it is known to hold no unassigned coupon (`drained_generation`).
An import or a released code bumps the campaign's `pool_generation`: that reopens every segment
and resets both cursors (`cursor_generation` says which generation they belong to) without
touching these documents. Nothing here is read inside a transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.firestore_v1.field_path import FieldPath

from shared.gcp.firestore import Snapshot, segments_collection

# 64 segments: as many as the instances of a large sale (each can have one of its own), few
# enough that every segment, and the one query that finds it drained, holds many codes (256
# were measured worse at 64 instances: more lease races and steals).
COUNT = 64
NEVER_DRAINED = -1


@dataclass(frozen=True, slots=True)
class Segment:
    segment_id: str
    low: float
    high: float
    holder: str | None
    lease_until: datetime | None
    drained_generation: int
    bottom: float
    top: float
    cursor_generation: int
    read_at: datetime  # the document's update time: every write here is guarded by it

    def cursors(self, generation: int) -> tuple[float, float]:
        """(bottom, top) at `generation`: the whole segment if they belong to an older one."""
        if self.cursor_generation >= generation:
            return self.bottom, self.top
        return self.low, self.high

    def leased_to_other(self, holder: str, now: datetime) -> bool:
        return (
            self.holder is not None
            and self.holder != holder
            and self.lease_until is not None
            and self.lease_until > now
        )


def segment_id(index: int) -> str:
    return f"{index:03d}"


def initial_fields(index: int, count: int = COUNT) -> dict[str, object]:
    low, high = index / count, (index + 1) / count
    return {
        "low": low,
        "high": high,
        "holder": None,
        "lease_until": None,
        "drained_generation": NEVER_DRAINED,
        "bottom": low,
        "top": high,
        "cursor_generation": NEVER_DRAINED,
    }


def add_to_batch(batch: firestore.WriteBatch, db: firestore.Client, *, campaign_id: str) -> None:
    """Create the campaign's segments in the batch that creates the campaign."""
    collection = segments_collection(db, campaign_id)
    for index in range(COUNT):
        batch.create(collection.document(segment_id(index)), initial_fields(index))


def _segment(snapshot: Snapshot) -> Segment:
    data = snapshot.to_dict() or {}
    return Segment(
        segment_id=snapshot.id,
        low=float(data["low"]),
        high=float(data["high"]),
        holder=data.get("holder"),
        lease_until=data.get("lease_until"),
        drained_generation=int(data.get("drained_generation", NEVER_DRAINED)),
        bottom=float(data.get("bottom", data["low"])),
        top=float(data.get("top", data["high"])),
        cursor_generation=int(data.get("cursor_generation", NEVER_DRAINED)),
        read_at=snapshot.update_time,
    )


def open_segments(
    db: firestore.Client,
    *,
    campaign_id: str,
    generation: int,
    start: int,
    limit: int,
    drained_at: int = NEVER_DRAINED,
) -> list[Segment]:
    """Up to `limit` segments not known drained at `generation`, in (drained_generation, id)
    order from segment `start` among those drained at `drained_at`, going round. Concurrent
    instances start at different places only within that group: the caller names the group
    most open segments are in (never drained in a first generation; after a release or an
    import, the generation they were drained at), or every instance would find the same
    segments first. Leased ones are included: the caller sees who holds them and until when."""
    base = (
        segments_collection(db, campaign_id)
        .where(filter=FieldFilter("drained_generation", "<", generation))
        .order_by("drained_generation")
        # Named, or the client drops the id from the cursor and every look starts at 000.
        .order_by(FieldPath.document_id())
    )
    cursor = {"drained_generation": drained_at, "__name__": segment_id(start)}
    found = [_segment(s) for s in base.start_at(cursor).limit(limit).stream()]
    if len(found) < limit and (start > 0 or drained_at > NEVER_DRAINED):
        found += [_segment(s) for s in base.end_before(cursor).limit(limit - len(found)).stream()]
    return found


def _cursor_fields(
    segment: Segment, generation: int, *, bottom: float | None = None, top: float | None = None
) -> dict[str, Any]:
    current_bottom, current_top = segment.cursors(generation)
    return {
        "bottom": current_bottom if bottom is None else bottom,
        "top": current_top if top is None else top,
        "cursor_generation": max(generation, segment.cursor_generation),
    }


def get_segments(
    db: firestore.Client, *, campaign_id: str, segment_ids: Sequence[str]
) -> list[Segment]:
    collection = segments_collection(db, campaign_id)
    snapshots = db.get_all([collection.document(i) for i in segment_ids])
    found = {s.id: _segment(s) for s in snapshots if s.exists}
    return [found[i] for i in segment_ids if i in found]


def _commit_guarded(
    db: firestore.Client, campaign_id: str, writes: Sequence[tuple[Segment, dict[str, Any]]]
) -> list[Segment] | None:
    """Apply each segment's changes, all or none, unless one changed since it was read."""
    collection = segments_collection(db, campaign_id)
    batch = db.batch()
    for segment, changes in writes:
        batch.update(
            collection.document(segment.segment_id),
            changes,
            option=db.write_option(last_update_time=segment.read_at),
        )
    try:
        results = batch.commit()
    except (gexc.FailedPrecondition, gexc.NotFound):
        return None
    return [
        replace(segment, **changes, read_at=result.update_time)
        for (segment, changes), result in zip(writes, results, strict=True)
    ]


@dataclass(frozen=True, slots=True)
class Lease:
    """Who reads a run of segments, until when, under which pool generation."""

    holder: str
    until: datetime
    generation: int


def lease_changes(segment: Segment, lease: Lease) -> dict[str, Any]:
    """What leasing a segment writes: a new holder reads from the segment's start, whatever an
    earlier holder had read."""
    return {
        "holder": lease.holder,
        "lease_until": lease.until,
        **_cursor_fields(
            segment,
            lease.generation,
            bottom=None if segment.holder == lease.holder else segment.low,
        ),
    }


def progress_changes(segment: Segment, *, reached: float, lease: Lease) -> dict[str, Any]:
    """What the holder writes once it has read every unassigned coupon up to `reached`: a
    segment read to its top is drained at the lease's generation (and let go), the one `reached`
    falls in gets its bottom raised, and the lease of the rest is renewed."""
    generation = lease.generation
    bottom, top = segment.cursors(generation)
    if reached >= top:
        return {
            **_cursor_fields(segment, generation, bottom=top),
            "drained_generation": generation,
            "holder": None,
            "lease_until": None,
        }
    raised = max(bottom, reached) if reached >= segment.low else bottom
    return {
        **_cursor_fields(segment, generation, bottom=raised),
        "holder": lease.holder,
        "lease_until": lease.until,
    }


def lower_top_changes(segment: Segment, *, top: float, generation: int) -> dict[str, Any]:
    """What a steal writes: [top, the segment's top) is the stealer's."""
    return _cursor_fields(segment, generation, top=top)


def lease_run(
    db: firestore.Client, *, campaign_id: str, run: Sequence[Segment], lease: Lease
) -> list[Segment] | None:
    """Lease adjacent segments in one atomic write, unless one changed since it was read."""
    return _commit_guarded(db, campaign_id, [(s, lease_changes(s, lease)) for s in run])


def record_progress(
    db: firestore.Client, *, campaign_id: str, run: Sequence[Segment], reached: float, lease: Lease
) -> list[Segment] | None:
    """Record the holder's progress over its run (progress_changes), all or none, unless a
    segment changed since it was read (a steal lowered its top, or the lease was lost)."""
    changes = [(s, progress_changes(s, reached=reached, lease=lease)) for s in run]
    return _commit_guarded(db, campaign_id, changes)


def lower_top(
    db: firestore.Client, *, campaign_id: str, segment: Segment, top: float, generation: int
) -> Segment | None:
    """Reserve [top, the segment's top) for a steal, unless the segment changed since read."""
    written = _commit_guarded(
        db, campaign_id, [(segment, lower_top_changes(segment, top=top, generation=generation))]
    )
    return written[0] if written else None
