"""Which events are true: each event checked against the record it names, before count_usage
counts it or deliver_webhooks sends it."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, TypeGuard

from google.cloud import firestore

from shared.events import models as events
from shared.gcp.batched_reads import ReadCoalescer
from shared.gcp.firestore import (
    announcement_ref,
    claims_collection,
    coupons_collection,
    jobs_collection,
    released_holds_collection,
    reversals_collection,
)

log = logging.getLogger(__name__)


class EventVerifier:
    def __init__(self, *, db: firestore.Client) -> None:
        self._db = db
        # Concurrent deliveries checking the same records share one batched read.
        self._reader = ReadCoalescer(db=db)

    def verified_claims(self, batch: events.ClaimedBatch) -> list[events.CouponClaimed]:
        """The batch's claims as their records state them (as `verified` checks each), read
        together in one batched read; a claim no record backs is logged and left out, the
        others stand. deliver_webhooks sends only these too."""
        c = batch.campaign_id
        refs = [claims_collection(self._db, c).document(m.claim_id) for m in batch.claims]
        snapshots = self._reader.get(refs)
        checked = []
        for member, ref in zip(batch.claims, refs, strict=True):
            snapshot = snapshots[ref.path]
            verified = self._verified_claim(
                member, (snapshot.to_dict() or {}) if snapshot.exists else None
            )
            if verified is None:
                log.warning(
                    "event not backed by its record; acknowledged, not counted",
                    extra={"event_id": member.event_id, "type": member.type.value},
                )
            else:
                checked.append(verified)
        return checked

    def verified(self, event: events.Event) -> events.Event | None:
        """The event as its own record states it, or None (logged) when no record backs it.

        A coupon.claimed must name an existing claim document with the same campaign, user and
        coupon (or, for a hold since released, its released record), and carry the id derived
        from it (a second id for one claim would count it twice); coupon.redeemed must match
        the redeemed coupon (or, for a redemption since reversed, its reversal record),
        coupon.released the released record, coupon.reversed the reversal record and
        coupon.voided the voided coupon; a
        codes.imported must name a finished job of the campaign that imported exactly `count`
        codes; a codes.assigned must name the first claim of its commit, made by that job at
        the line its id names, which records the commit's `count`; an announcement (low stock,
        sold out) must be the event its campaign's announcement marker holds. One or two reads
        by reference per event, shared with concurrent deliveries. deliver_webhooks sends only
        what passes here."""
        checked: events.Event | None
        if isinstance(event, events.CouponClaimed):
            c = event.campaign_id
            claim = self._record(claims_collection(self._db, c).document(event.claim_id))
            checked = self._verified_claim(event, claim)
        elif isinstance(event, events.CouponRedeemed):
            checked = self._verified_redemption(event)
        elif isinstance(event, events.CouponReleased):
            checked = self._verified_release(event)
        elif isinstance(event, events.CouponReversed):
            checked = self._verified_reversal(event)
        elif isinstance(event, events.CouponVoided):
            checked = self._verified_void(event)
        elif isinstance(event, events.CodesImported):
            checked = self._verified_import(event)
        elif isinstance(event, events.CodesAssigned):
            checked = self._verified_assignment(event)
        else:
            checked = self._verified_announcement(event)
        if checked is None:
            log.warning(
                "event not backed by its record; acknowledged, not counted",
                extra={"event_id": event.event_id, "type": event.type.value},
            )
        return checked

    def _verified_claim(
        self, event: events.CouponClaimed, claim: dict[str, Any] | None
    ) -> events.CouponClaimed | None:
        """`claim`: the claim document the event names, as read (None: missing)."""
        c, claim_id = event.campaign_id, event.claim_id
        if _matches(claim, event) and isinstance(claimed_at := claim.get("claimed_at"), datetime):
            hold = claim.get("expires_at") is not None
            if event.event_id == events.claimed_event_id(c, claim_id, claimed_at, hold=hold):
                # The counters' hours follow the claim itself, not what the message says.
                return event.model_copy(
                    update={"occurred_at": claimed_at, "expires_at": claim.get("expires_at")}
                )
        # A hold released since: its slot is gone, or holds a later claim.
        micros = _suffix(event.event_id, f"claimed.{c}.{claim_id}.")
        if micros is None:
            return None
        released = self._record(
            released_holds_collection(self._db, c).document(f"{claim_id}-{micros}")
        )
        if (
            _matches(released, event)
            and isinstance(claimed_at := released.get("claimed_at"), datetime)
            and event.event_id == events.claimed_event_id(c, claim_id, claimed_at, hold=True)
        ):
            return event.model_copy(
                update={"occurred_at": claimed_at, "expires_at": released.get("expires_at")}
            )
        return None

    def _verified_release(self, event: events.CouponReleased) -> events.CouponReleased | None:
        c = event.campaign_id
        micros = _suffix(event.event_id, f"released.{c}.{event.coupon_id}.")
        if micros is None:
            return None
        record = self._record(
            released_holds_collection(self._db, c).document(f"{event.claim_id}-{micros}")
        )
        if not _matches(record, event) or record.get("claim_id") != event.claim_id:
            return None
        claimed_at, expires_at, released_at = (
            record.get(k) for k in ("claimed_at", "expires_at", "released_at")
        )
        if (
            not isinstance(claimed_at, datetime)
            or not isinstance(expires_at, datetime)
            or not isinstance(released_at, datetime)
            or event.event_id != events.released_event_id(c, event.coupon_id, claimed_at)
        ):
            return None
        return event.model_copy(
            update={"occurred_at": released_at, "claimed_at": claimed_at, "expired_at": expires_at}
        )

    def _verified_redemption(self, event: events.CouponRedeemed) -> events.CouponRedeemed | None:
        c = event.campaign_id
        number = events.redemption_number(event.event_id, c, event.coupon_id)
        if number is None:
            return None
        coupon = self._record(coupons_collection(self._db, c).document(event.coupon_id))
        if (
            coupon is not None
            and coupon.get("state") == "redeemed"
            and int(coupon.get("redemptions", 1)) == number
            and _same_redemption(coupon, event)
            and isinstance(redeemed_at := coupon.get("redeemed_at"), datetime)
        ):
            was_held = coupon.get("expires_at") is not None
            return event.model_copy(update={"occurred_at": redeemed_at, "was_held": was_held})
        # Reversed since: its record keeps what the coupon no longer says.
        record = self._record(
            reversals_collection(self._db, c).document(
                events.reversal_record_id(event.coupon_id, number)
            )
        )
        if (
            record is not None
            and _same_redemption(record, event)
            and isinstance(redeemed_at := record.get("redeemed_at"), datetime)
        ):
            return event.model_copy(
                update={"occurred_at": redeemed_at, "was_held": bool(record.get("was_held"))}
            )
        return None

    def _verified_reversal(self, event: events.CouponReversed) -> events.CouponReversed | None:
        c = event.campaign_id
        number = _suffix(event.event_id, f"reversed.{c}.{event.coupon_id}.")
        if number is None:
            return None
        record = self._record(
            reversals_collection(self._db, c).document(
                events.reversal_record_id(event.coupon_id, int(number))
            )
        )
        if (
            record is None
            or not _same_redemption(record, event)
            or record.get("on_cancel") != event.on_cancel.value
            or event.event_id != events.reversed_event_id(c, event.coupon_id, int(number))
            or not isinstance(reversed_at := record.get("reversed_at"), datetime)
        ):
            return None
        return event.model_copy(update={"occurred_at": reversed_at})

    def _verified_void(self, event: events.CouponVoided) -> events.CouponVoided | None:
        c = event.campaign_id
        coupon = self._record(coupons_collection(self._db, c).document(event.coupon_id))
        if (
            event.event_id != events.voided_event_id(c, event.coupon_id)
            or coupon is None
            or coupon.get("state") != "voided"
            or coupon.get("voided_from") != event.voided_from
            or not isinstance(voided_at := coupon.get("voided_at"), datetime)
        ):
            return None
        return event.model_copy(update={"occurred_at": voided_at})

    def _verified_import(self, event: events.CodesImported) -> events.CodesImported | None:
        record = self._record(jobs_collection(self._db).document(event.job_id))
        if (
            event.event_id == f"imported.{event.job_id}"
            and record is not None
            and record.get("campaign_id") == event.campaign_id
            and record.get("state") in ("done", "failed")
            and record.get("imported") == event.count
        ):
            return event
        return None

    def _verified_assignment(self, event: events.CodesAssigned) -> events.CodesAssigned | None:
        c = event.campaign_id
        claim = self._record(claims_collection(self._db, c).document(event.claim_id))
        if (
            claim is None
            or claim.get("campaign_id") != c
            or claim.get("job_id") != event.job_id
            or claim.get(events.COMMIT_COUNT) != event.count
            or not isinstance(line := claim.get("line"), int)
            or event.event_id != events.assigned_event_id(event.job_id, line)
            or not isinstance(claimed_at := claim.get("claimed_at"), datetime)
        ):
            return None
        # The counters' hours follow the commit itself, not what the message says.
        return event.model_copy(update={"occurred_at": claimed_at})

    def _verified_announcement(
        self, event: events.CampaignLowStock | events.CampaignSoldOut
    ) -> events.Event | None:
        marker = self._record(announcement_ref(self._db, event.campaign_id, event.event_id))
        if marker is None or marker.get("type") != event.type.value:
            return None
        announced = marker.get("event")
        if announced is None:
            return event  # a marker written before markers kept their event: id and type agree
        return event if events.event_from_dict(announced) == event else None

    def _record(self, ref: firestore.DocumentReference) -> dict[str, Any] | None:
        snapshot = self._reader.get([ref])[ref.path]
        return (snapshot.to_dict() or {}) if snapshot.exists else None


def _matches(
    record: dict[str, Any] | None,
    event: events.CouponClaimed | events.CouponReleased,
) -> TypeGuard[dict[str, Any]]:
    return record is not None and all(
        record.get(k) == getattr(event, k) for k in ("campaign_id", "user_id", "coupon_id")
    )


def _same_redemption(
    record: dict[str, Any], event: events.CouponRedeemed | events.CouponReversed
) -> bool:
    """A coupon (or a reversal's record) names the event's order, claim and shopper."""
    return (
        record.get("order_id") == event.order_id
        and record.get("claim_id") == event.claim_id
        and record.get("assigned_to", record.get("user_id")) == event.user_id
    )


def _suffix(event_id: str, prefix: str) -> str | None:
    """The microseconds an id ends with after `prefix`, or None."""
    rest = event_id[len(prefix) :] if event_id.startswith(prefix) else ""
    return rest if rest.isdigit() else None
