"""Firestore access for claims: the atomic commit that assigns a coupon, and a shopper's claims.

A shopper's claims live at deterministic ids (holder key + slot 0..max_per_user-1), so the
per-user limit is enforced by `create()` in the very commit that assigns the coupon: two
concurrent requests of one shopper cannot both create the same slot. The holder key is the
campaign's identity (shared/claims/identity.py): the account by default, or a verified phone
number or email, which every account of that person shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from google.cloud import firestore

from shared.claims.models import ClaimRecord, ClaimState
from shared.claims.recovery import sweep_bucket
from shared.coupons.store import EXPIRES_BUCKET, Candidate, expires_bucket
from shared.gcp import writes
from shared.gcp.batched_reads import ReadCoalescer
from shared.gcp.firestore import Snapshot, campaign_ref, claims_collection, coupons_collection


@dataclass(frozen=True, slots=True)
class Hold:
    """A claim on a campaign with hold_seconds: how long, and the sweep's bucket width."""

    seconds: int
    bucket_seconds: int


def claim_id_for(holder: str, slot: int) -> str:
    return f"{holder}-{slot}"


def _record(snapshot: Snapshot) -> ClaimRecord:
    return ClaimRecord(claim_id=snapshot.id, **(snapshot.to_dict() or {}))


def held_claims(
    reader: ReadCoalescer | firestore.Client, *, campaign_id: str, holder: str, slots: int
) -> list[ClaimRecord]:
    """The holder's claims, oldest first, read by reference (no query)."""
    db = reader.db if isinstance(reader, ReadCoalescer) else reader
    collection = claims_collection(db, campaign_id)
    refs = [collection.document(claim_id_for(holder, slot)) for slot in range(slots)]
    if isinstance(reader, ReadCoalescer):
        snapshots = list(reader.get(refs).values())
    else:
        snapshots = list(db.get_all(refs))
    found = [_record(s) for s in snapshots if s.exists]
    return sorted(found, key=lambda c: (c.claimed_at, c.slot))


def campaign_with_held_claims(
    reader: ReadCoalescer, *, campaign_id: str, holder: str, slots: int
) -> tuple[Snapshot | None, list[ClaimRecord]]:
    """The campaign document and the holder's claims in one (shared) round trip."""
    db = reader.db
    campaign = campaign_ref(db, campaign_id)
    collection = claims_collection(db, campaign_id)
    refs = [campaign, *(collection.document(claim_id_for(holder, s)) for s in range(slots))]
    snapshots = reader.get(refs)
    campaign_snapshot = snapshots[campaign.path]
    held = [_record(s) for path, s in snapshots.items() if path != campaign.path and s.exists]
    return (
        campaign_snapshot if campaign_snapshot.exists else None,
        sorted(held, key=lambda c: (c.claimed_at, c.slot)),
    )


def commit_claim(
    db: firestore.Client,
    *,
    campaign_id: str,
    candidate: Candidate,
    user_id: str,
    holder: str,
    slot: int,
    now: datetime,
    idempotency_key: str | None,
    hold: Hold | None = None,
) -> ClaimRecord:
    """Assign the candidate to the shopper (account `user_id`, holder key `holder`) in one
    atomic batch of two writes.

    The coupon update is guarded by the update time it was read with (FailedPrecondition if
    anybody touched it since) and the claim slot is created (AlreadyExists if the holder already
    holds that slot, through this account or another with the same identity). Either failure
    leaves nothing written. Nothing is read and nothing is locked, so a loser fails at once
    instead of waiting for a lock timeout. A hold is the same commit with an expiry and the
    bucket the sweep finds it by.
    """
    expires_at = now + timedelta(seconds=hold.seconds) if hold is not None else None
    claim = ClaimRecord(
        claim_id=claim_id_for(holder, slot),
        campaign_id=campaign_id,
        user_id=user_id,
        coupon_id=candidate.coupon_id,
        code=candidate.code,
        slot=slot,
        claimed_at=now,
        idempotency_key=idempotency_key,
        state=ClaimState.HELD if hold is not None else ClaimState.CLAIMED,
        expires_at=expires_at,
    )
    coupon: dict[str, object] = {
        "assigned": True,
        "state": claim.state.value,
        "assigned_to": user_id,
        "claim_id": claim.claim_id,
        "assigned_at": now,
        "expires_at": expires_at,
    }
    if hold is not None and expires_at is not None:
        coupon[EXPIRES_BUCKET] = expires_bucket(
            candidate.coupon_id, expires_at, width_seconds=hold.bucket_seconds
        )
    # Built as raw protobufs (shared/gcp/writes): the library's batch costs more Python than
    # the call that sends it, once per code sold. Sent without the library's retries: a
    # transient error is the engine's to handle (it releases the candidate and tries again).
    writes.send_commit(
        db,
        [
            writes.update(
                writes.document_name(
                    coupons_collection(db, campaign_id).document(candidate.coupon_id)
                ),
                coupon,
                last_update_time=candidate.read_at,
            ),
            writes.create(
                writes.document_name(claims_collection(db, campaign_id).document(claim.claim_id)),
                {
                    **claim.model_dump(exclude={"claim_id"}),
                    "state": claim.state.value,
                    "sweep_bucket": sweep_bucket(now),
                },
            ),
        ],
    )
    return claim
