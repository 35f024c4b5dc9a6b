"""Coupon documents: their ids and fields, the query for unassigned candidates, and the two
collection-group queries of the checkout half: expired holds, and the campaigns holding a code.

A coupon's life: available -> held (a claim with an expiry) or claimed (a final claim) ->
redeemed; a hold not redeemed in time goes back to available. A redemption whose order is
cancelled is reversed: back to available, back to claimed, or reversed for good (the campaign's
on_cancel, shared/claims/reversal.py); an admin may void any code not redeemed
(docs/lifecycle.md). `assigned` stays the field the claim query filters on (a voided code stays
assigned); `state` says where a coupon is.

Neither collection-group query indexes a value that grows in write order (see DESIGN
"Production truth"), and both need a collection-group single-field index, declared as field
overrides in firestore.indexes.json:
- `expires_bucket` = "<shard>:<start of the expiry bucket>", the shard being the first hex digit
  of the coupon id. Holds written during a sale spread over 16 key ranges, and within one
  bucket over random document ids, instead of all landing at the tail of one index.
- `code_key` = the coupon id (a hash of the code): finding a code's campaigns is one equality
  query on a uniformly random value. It costs no extra document write at import, where a lookup
  document per code (`code_index/{hash}`) would double the import's writes.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Generator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.codes import canonical
from shared.gcp import client_internals
from shared.gcp.firestore import COUPONS, coupons_collection

EXPIRES_BUCKET = "expires_bucket"
CODE_KEY = "code_key"
_BUCKET_FORMAT = "%Y%m%d%H%M%S"
# Coupon ids are hex digests: their first digit spreads holds over 16 shards.
HOLD_SHARDS = "0123456789abcdef"


class CouponState(StrEnum):
    AVAILABLE = "available"
    HELD = "held"
    CLAIMED = "claimed"
    REDEEMED = "redeemed"
    REVERSED = "reversed"  # its order was cancelled under on_cancel "keep_used": used for good
    VOIDED = "voided"  # withdrawn by an admin: never claimed nor redeemed again


log = logging.getLogger(__name__)

# A walk over a million codes reads for minutes: longer than the client's default deadline.
STREAM_TIMEOUT_SECONDS = 3600.0
# Errors after which a stream is resumed (consecutive attempts).
STREAM_RETRYABLE = (
    gexc.DeadlineExceeded,
    gexc.ServiceUnavailable,
    gexc.InternalServerError,
    gexc.Aborted,
)
STREAM_ATTEMPTS = 5


def coupon_id_for(code: str) -> str:
    """The document id is derived from the code's canonical form (shared.codes.canonical), so a
    code can never exist twice in a campaign, not even in two letter cases."""
    return _hashed(canonical(code))


def _hashed(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def _typed_ids(code: str) -> list[str]:
    """Where a typed code's coupon may be: under its canonical id, or (for a code imported
    before ids were canonical, whose id hashes the code exactly as imported) under the hash of
    exactly what was typed. The second id is tried whenever the typing is not canonical, found
    or not, so a look-up costs the same whatever campaign holds the code."""
    exact = code.strip()
    ids = [coupon_id_for(code)]
    if exact != canonical(exact):
        ids.append(_hashed(exact))
    return ids


def same_code(stored: object, typed: str) -> bool:
    """Whether a coupon's stored code is the typed one: canonically equal, or (a coupon imported
    before ids were canonical) exactly equal."""
    return isinstance(stored, str) and (
        canonical(stored) == canonical(typed) or stored == typed.strip()
    )


def find_coupon(db: firestore.Client, *, campaign_id: str, code: str) -> Any | None:
    """The coupon of the typed `code` in the campaign, or None (see _typed_ids)."""
    collection = coupons_collection(db, campaign_id)
    refs = [collection.document(coupon_id) for coupon_id in _typed_ids(code)]
    found = None
    for snapshot in db.get_all(refs) if len(refs) > 1 else [refs[0].get()]:
        # The canonical id wins over a legacy coupon of the same letters.
        if (
            snapshot.exists
            and same_code((snapshot.to_dict() or {}).get("code"), code)
            and (found is None or snapshot.id == refs[0].id)
        ):
            found = snapshot
    return found


def random_float() -> float:
    # 53 random bits: uniform in [0, 1) like random.random(), but not predictable.
    return secrets.randbits(53) / (1 << 53)


@dataclass(frozen=True, slots=True)
class Candidate:
    """An unassigned coupon as last read, with the update time its claim is guarded by."""

    coupon_id: str
    code: str
    random_float: float
    read_at: datetime


def coupon_fields(
    *,
    code: str,
    now: datetime,
    job_id: str | None,
    line: int | None = None,
    coupon_id: str | None = None,
) -> dict[str, object]:
    """A new, unassigned coupon. `job_id` and `line` say where it came from, so a re-run of the
    same import recognises its own rows; `coupon_id` saves hashing the code again."""
    return {
        "code": code,
        CODE_KEY: coupon_id or coupon_id_for(code),
        "random_float": random_float(),
        "assigned": False,
        "state": CouponState.AVAILABLE.value,
        "assigned_to": None,
        "claim_id": None,
        "assigned_at": None,
        "created_at": now,
        "job_id": job_id,
        "line": line,
    }


def coupon_state(data: dict[str, Any]) -> CouponState:
    """The stored state; coupons written before holds existed have only `assigned`."""
    state = data.get("state")
    if state is not None:
        return CouponState(state)
    return CouponState.CLAIMED if data.get("assigned") else CouponState.AVAILABLE


# --- holds ------------------------------------------------------------------------------------
def expires_bucket(coupon_id: str, expires_at: datetime, *, width_seconds: int) -> str:
    """The hold's bucket: its shard, then the start of the `width_seconds` bucket it expires in.
    Bucket starts are times, so buckets of any width sort in time order within a shard."""
    epoch = int(expires_at.timestamp())
    start = datetime.fromtimestamp(epoch - epoch % width_seconds, UTC)
    return f"{coupon_id[0]}:{_bucket_time(start)}"


def _bucket_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime(_BUCKET_FORMAT)


@dataclass(frozen=True, slots=True)
class ExpiredHold:
    """A held coupon as the sweep read it; its release is guarded by `read_at`."""

    campaign_id: str
    coupon_id: str
    claim_id: str
    user_id: str
    assigned_at: datetime
    expires_at: datetime
    read_at: datetime


HOLD_FIELDS = ["state", "assigned", "claim_id", "assigned_to", "assigned_at", "expires_at"]


def expired_hold(snapshot: Any, *, now: datetime) -> ExpiredHold | None:
    """The hold in `snapshot` if it is one and has expired by `now`, else None."""
    data = snapshot.to_dict() or {}
    expires_at = data.get("expires_at")
    if (
        not snapshot.exists
        or coupon_state(data) is not CouponState.HELD
        or not data.get("assigned")
        or not data.get("claim_id")
        or expires_at is None
        or expires_at > now
    ):
        return None
    return ExpiredHold(
        campaign_id=snapshot.reference.parent.parent.id,
        coupon_id=snapshot.id,
        claim_id=data["claim_id"],
        user_id=data.get("assigned_to") or "",
        assigned_at=data["assigned_at"],
        expires_at=expires_at,
        read_at=snapshot.update_time,
    )


def find_expired_holds(
    db: firestore.Client, *, shard: str, now: datetime, limit: int, after: Any | None = None
) -> tuple[list[ExpiredHold], Any | None]:
    """One page of the holds of every campaign in `shard` whose bucket started by `now`, and
    the cursor for the next page (None at the end). Holds of the current bucket that have not
    expired yet are read and skipped: at most one bucket's worth per sweep."""
    query = (
        db.collection_group(COUPONS)
        .where(filter=FieldFilter(EXPIRES_BUCKET, ">=", f"{shard}:"))
        .where(filter=FieldFilter(EXPIRES_BUCKET, "<=", f"{shard}:{_bucket_time(now)}"))
        .order_by(EXPIRES_BUCKET)
        # The bucket too: the next page starts after this one's last (bucket, name).
        .select([*HOLD_FIELDS, EXPIRES_BUCKET])
        .limit(limit)
    )
    if after is not None:
        query = query.start_after(after)
    page = list(query.stream())
    holds = [hold for s in page if (hold := expired_hold(s, now=now)) is not None]
    return holds, (page[-1] if len(page) == limit else None)


def returned_fields() -> dict[str, Any]:
    """A coupon back in the pool: nobody's, free to be claimed again. `random_float` is kept:
    it was random when written and says nothing about who held it."""
    return {
        "assigned": False,
        "state": CouponState.AVAILABLE.value,
        "assigned_to": None,
        "claim_id": None,
        "assigned_at": None,
        "expires_at": None,
    }


def release_fields() -> dict[str, Any]:
    """What a released hold's coupon becomes: back in the pool, its bucket out of the index."""
    return {
        **returned_fields(),
        EXPIRES_BUCKET: firestore.DELETE_FIELD,
        "releases": firestore.Increment(1),
    }


# --- redemption -------------------------------------------------------------------------------
def campaigns_with_code(
    db: firestore.Client, *, code: str, limit: int = 20
) -> dict[str, dict[str, Any]]:
    """The campaigns that hold `code`, with the fields that tell its state, by one equality
    query on its hash per way it may be stored (see the module doc)."""
    found = {}
    for key in _typed_ids(code):
        query = (
            db.collection_group(COUPONS)
            .where(filter=FieldFilter(CODE_KEY, "==", key))
            .select(["code", "state", "assigned", "assigned_at", "order_id"])
            .limit(limit)
        )
        for snapshot in query.stream():
            data = snapshot.to_dict() or {}
            if same_code(data.get("code"), code):
                found[snapshot.reference.parent.parent.id] = data
    return dict(sorted(found.items()))


def stream_unassigned(
    db: firestore.Client,
    *,
    campaign_id: str,
    limit: int,
    low: float | None = None,
    low_inclusive: bool = True,
    high: float | None = None,
) -> Generator[Candidate, None, None]:
    """Unassigned coupons above `low` and below `high`, in random_float order (served by the
    composite index on assigned, random_float), read as the caller consumes them (gRPC flow
    control keeps the rest on the server side: a long walk holds no page in memory). Without
    bounds it is the proof query for "sold out": any unassigned coupon at all.

    For walks of a million codes the responses are read as the protobuf messages they are:
    the library's snapshots cost about 157 µs of Python per document here, this about 50. The
    query is the library's own, sent through its client. A walk may outlast the client's default
    deadline of 300 s: it gets STREAM_TIMEOUT_SECONDS, and a stream that ends in an error that
    may pass is resumed above the last candidate read, as the library's own streams are."""
    read = 0
    failures = 0
    while read < limit:
        query = coupons_collection(db, campaign_id).where(
            filter=FieldFilter("assigned", "==", False)
        )
        if low is not None:
            op = ">=" if low_inclusive else ">"
            query = query.where(filter=FieldFilter("random_float", op, low))
        if high is not None:
            query = query.where(filter=FieldFilter("random_float", "<", high))
        query = query.order_by("random_float").select(["code", "random_float"]).limit(limit - read)
        try:
            for message in client_internals.run_query_messages(
                db, query, timeout=STREAM_TIMEOUT_SECONDS
            ):
                if not message.HasField("document"):
                    continue  # a progress message without a document
                candidate = _candidate(message.document)
                low, low_inclusive = candidate.random_float, False
                read += 1
                failures = 0
                yield candidate
            return
        except STREAM_RETRYABLE as exc:
            failures += 1
            if failures > STREAM_ATTEMPTS:
                raise
            log.warning("candidate stream resumed", extra={"after": read, "error": repr(exc)})
            time.sleep(0.1 * failures)


def _candidate(document: Any) -> Candidate:
    fields = document.fields
    return Candidate(
        coupon_id=document.name.rsplit("/", 1)[1],
        code=fields["code"].string_value,
        random_float=fields["random_float"].double_value,
        read_at=DatetimeWithNanoseconds.from_timestamp_pb(  # type: ignore[no-untyped-call]
            document.update_time
        ),
    )
