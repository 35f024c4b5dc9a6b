"""Coupon documents: their ids and fields, and the query for unassigned candidates."""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Generator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.gcp.firestore import coupons_collection

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
    """The document id is derived from the code, so a code can never exist twice in a campaign."""
    return hashlib.sha256(code.encode("utf-8")).hexdigest()[:40]


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
    *, code: str, now: datetime, job_id: str | None, line: int | None = None
) -> dict[str, object]:
    """A new, unassigned coupon. `job_id` and `line` say where it came from, so a re-run of the
    same import recognises its own rows."""
    return {
        "code": code,
        "random_float": random_float(),
        "assigned": False,
        "assigned_to": None,
        "claim_id": None,
        "assigned_at": None,
        "created_at": now,
        "job_id": job_id,
        "line": line,
    }


def unassigned_query(
    db: firestore.Client,
    *,
    campaign_id: str,
    limit: int,
    low: float | None = None,
    low_inclusive: bool = True,
    high: float | None = None,
) -> firestore.Query:
    """Unassigned coupons above `low` and below `high`, in random_float order (served by the
    composite index on assigned, random_float)."""
    query = coupons_collection(db, campaign_id).where(filter=FieldFilter("assigned", "==", False))
    if low is not None:
        query = query.where(filter=FieldFilter("random_float", ">=" if low_inclusive else ">", low))
    if high is not None:
        query = query.where(filter=FieldFilter("random_float", "<", high))
    selected: firestore.Query = (
        query.order_by("random_float").select(["code", "random_float"]).limit(limit)
    )
    return selected


def find_unassigned(
    db: firestore.Client,
    *,
    campaign_id: str,
    limit: int,
    low: float | None = None,
    low_inclusive: bool = True,
    high: float | None = None,
) -> list[Candidate]:
    """Unassigned coupons above `low` and below `high`, in random_float order.

    Without bounds it is the proof query for "sold out": any unassigned coupon at all.
    """
    query = unassigned_query(
        db, campaign_id=campaign_id, limit=limit, low=low, low_inclusive=low_inclusive, high=high
    )
    candidates = []
    for snapshot in query.stream():
        data = snapshot.to_dict() or {}
        candidates.append(
            Candidate(
                coupon_id=snapshot.id,
                code=data["code"],
                random_float=data["random_float"],
                read_at=snapshot.update_time,
            )
        )
    return candidates


def stream_unassigned(
    db: firestore.Client,
    *,
    campaign_id: str,
    limit: int,
    low: float | None = None,
    low_inclusive: bool = True,
    high: float | None = None,
) -> Generator[Candidate, None, None]:
    """find_unassigned's query, its results read as the caller consumes them (gRPC flow control
    keeps the rest on the server side: a long walk holds no page in memory).

    For walks of a million codes the responses are read as the protobuf messages they are:
    the library's snapshots cost about 157 µs of Python per document here, this about 50. The
    query is the library's own, sent through its client. A walk may outlast the client's default
    deadline of 300 s: it gets STREAM_TIMEOUT_SECONDS, and a stream that ends in an error that
    may pass is resumed above the last candidate read, as the library's own streams are."""
    read = 0
    failures = 0
    while read < limit:
        query = unassigned_query(
            db,
            campaign_id=campaign_id,
            limit=limit - read,
            low=low,
            low_inclusive=low_inclusive,
            high=high,
        )
        parent, _ = query._parent._parent_info()
        request = {"parent": parent, "structured_query": query._to_protobuf()}
        try:
            for response in db._firestore_api.run_query(
                request=request, metadata=db._rpc_metadata, timeout=STREAM_TIMEOUT_SECONDS
            ):
                message = response._pb
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
