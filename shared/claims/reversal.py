"""Reversals and voids: a cancelled or refunded order gives its codes back, an admin withdraws a
code. Both are the redemption's and the release's kind of commit, so each happens exactly once
whatever races it.

A reversal is one atomic batch per redemption: the coupon changes as the campaign's `on_cancel`
says (guarded by the update time it was read with), the shopper's claim slot follows, the
record of the reversed redemption is created (`reversals/{coupon_id}-{n}`, n the redemption's
number) and `coupon.reversed` is staged in the outbox. The guard orders a reversal against a
second redemption of the code, a hold's release, a void or another delivery of the same
cancellation: whichever commits second fails its precondition and re-reads; a redelivery then
finds the record and answers what the first did. The record is also what count_usage checks the
reversed redemption's events against (the coupon has moved on), and the create() of it would
refuse a second reversal of one redemption even without the guard.

- `return_to_pool`: the coupon is available again (and the campaign's pool_generation bumped,
  as a release does, so claimers see it). The shopper's slot stays taken, in state `reversed`:
  the per-user limit still counts it, and the slot's claim events keep their ids.
- `return_to_shopper`: the coupon and the slot are `claimed` again, final (an order placed in
  time ends a hold for good), and the code may be redeemed again.
- `keep_used`: the coupon and the slot are `reversed`, used for good.

The orders of a shop name no campaign: redemption records each order's redemptions under a hash
of its id (shared/claims/redemption.py), read here by reference, never queried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.campaigns.models import CampaignRecord
from shared.campaigns.store import get_campaign, get_campaign_snapshot, record_from_snapshot
from shared.claims.models import (
    ClaimState,
    CodeStatus,
    OrderCodeResult,
    OrderRedemptions,
    OrderReversal,
    ReversalPublic,
)
from shared.claims.redemption import TRANSIENT, RedemptionService, order_key
from shared.coupons.store import (
    EXPIRES_BUCKET,
    CouponState,
    coupon_state,
    find_coupon,
    returned_fields,
)
from shared.errors import (
    CodeAlreadyRedeemed,
    CodeNotFound,
    Contended,
    RedemptionNotFound,
    shown,
)
from shared.events.bus import EventBus
from shared.events.models import (
    CouponReversed,
    CouponVoided,
    reversal_record_id,
    reversed_event_id,
    voided_event_id,
)
from shared.gcp.firestore import (
    Snapshot,
    campaign_ref,
    claims_collection,
    coupons_collection,
    redeemed_order_ref,
    reversals_collection,
)
from shared.types import OnCancel

log = logging.getLogger(__name__)

MAX_ROUNDS = 8


@dataclass(frozen=True, slots=True)
class Redemption:
    """One redemption an order made: the coupon and its number (the coupon's n-th)."""

    campaign_id: str
    coupon_id: str
    number: int


@dataclass(frozen=True, slots=True)
class ReversalOutcome:
    reversal: ReversalPublic
    created: bool  # False: it had been reversed already (a redelivery)


def _coupon_fields(policy: OnCancel, now: datetime) -> dict[str, Any]:
    reversed_once = {"reversals": firestore.Increment(1)}
    if policy is OnCancel.RETURN_TO_POOL:
        return {
            **reversed_once,
            **returned_fields(),
            "redeemed_at": None,
            "order_id": None,
        }
    if policy is OnCancel.RETURN_TO_SHOPPER:
        # expires_at goes: a later redemption of the code is not a hold's (count_usage reads
        # it so); the slot keeps its own, which its claim event's id derives from.
        return {
            **reversed_once,
            "state": CouponState.CLAIMED.value,
            "expires_at": None,
            "redeemed_at": None,
            "order_id": None,
        }
    return {**reversed_once, "state": CouponState.REVERSED.value, "reversed_at": now}


def _slot_fields(policy: OnCancel, now: datetime) -> dict[str, Any]:
    if policy is OnCancel.RETURN_TO_SHOPPER:
        return {"state": ClaimState.CLAIMED.value, "redeemed_at": None, "order_id": None}
    return {"state": ClaimState.REVERSED.value, "reversed_at": now, "on_cancel": policy.value}


def _public(record: dict[str, Any]) -> ReversalPublic:
    return ReversalPublic(
        code=record["code"],
        order_id=record["order_id"],
        user_id=record["user_id"],
        redeemed_at=record["redeemed_at"],
        reversed_at=record["reversed_at"],
        on_cancel=OnCancel(record["on_cancel"]),
    )


class ReversalService:
    def __init__(
        self,
        *,
        db: firestore.Client,
        bus: EventBus,
        clock: Callable[[], datetime],
        redemptions: RedemptionService,
    ) -> None:
        self._db = db
        self._bus = bus
        self._clock = clock
        self._redemptions = redemptions

    # --- reversals ----------------------------------------------------------------------------
    def redemptions_of(self, order_id: str) -> list[Redemption]:
        snapshot = redeemed_order_ref(self._db, order_key(order_id)).get()
        data = snapshot.to_dict() or {}
        if not snapshot.exists or data.get("order_id") != order_id:
            return []
        return [
            Redemption(e["campaign_id"], e["coupon_id"], int(e["redemption"]))
            for e in data.get("redemptions", [])
        ]

    def reverse_order(self, *, campaign_id: str, order_id: str) -> OrderReversal:
        """Reverse every redemption the order made in the campaign (idempotent)."""
        campaign = get_campaign(self._db, campaign_id=campaign_id)
        mine = [r for r in self.redemptions_of(order_id) if r.campaign_id == campaign_id]
        if not mine:
            raise RedemptionNotFound(
                f"Order {order_id!r} redeemed no code in campaign {campaign_id!r}."
            )
        outcomes = [self.reverse(campaign, order_id, r) for r in mine]
        return OrderReversal(order_id=order_id, reversals=[o.reversal for o in outcomes])

    def reverse_shop_order(self, order_id: str) -> OrderRedemptions:
        """A shop's cancellation or refund: reverse what the order redeemed, in any campaign."""
        results = []
        campaigns: dict[str, CampaignRecord | None] = {}
        for redemption in self.redemptions_of(order_id):
            c = redemption.campaign_id
            if c not in campaigns:
                snapshot = get_campaign_snapshot(self._db, campaign_id=c)
                campaigns[c] = None if snapshot is None else record_from_snapshot(snapshot)
            campaign = campaigns[c]
            if campaign is None:
                # Deleted since: nothing left to give back, and a retry would not change that.
                log.warning("order of a deleted campaign", extra={"campaign_id": c})
                continue
            outcome = self.reverse(campaign, order_id, redemption)
            results.append(
                OrderCodeResult(
                    code=outcome.reversal.code,
                    campaign_id=c,
                    outcome="reversed" if outcome.created else "already_reversed",
                )
            )
        log.info(
            "order reversed", extra={"order_id": order_id, "outcomes": [r.outcome for r in results]}
        )
        return OrderRedemptions(order_id=order_id, results=results)

    def reverse(
        self, campaign: CampaignRecord, order_id: str, redemption: Redemption
    ) -> ReversalOutcome:
        c = campaign.campaign_id
        coupon = coupons_collection(self._db, c).document(redemption.coupon_id)
        record = reversals_collection(self._db, c).document(
            reversal_record_id(redemption.coupon_id, redemption.number)
        )
        for _ in range(MAX_ROUNDS):
            found = {s.reference.path: s for s in self._db.get_all([coupon, record])}
            if found[record.path].exists:
                return ReversalOutcome(_public(found[record.path].to_dict() or {}), created=False)
            snapshot = found[coupon.path]
            data = snapshot.to_dict() or {}
            if (
                coupon_state(data) is not CouponState.REDEEMED
                or data.get("order_id") != order_id
                or int(data.get("redemptions", 0)) != redemption.number
            ):
                # Neither this redemption nor its record: the two are written by one commit
                # each, so only a commit in flight between our reads explains it. Read again.
                continue
            try:
                return ReversalOutcome(
                    self._commit(campaign, redemption.number, snapshot, data), created=True
                )
            except (gexc.FailedPrecondition, gexc.AlreadyExists):
                continue  # reversed, redeemed again or released meanwhile: read and decide
            except TRANSIENT as exc:
                log.warning("reversal commit failed transiently", extra={"error": repr(exc)})
                continue
        raise Contended(retry_after=1)

    def _commit(
        self, campaign: CampaignRecord, number: int, snapshot: Snapshot, data: dict[str, Any]
    ) -> ReversalPublic:
        c, policy, now = campaign.campaign_id, campaign.on_cancel, self._clock()
        record = {
            "campaign_id": c,
            "coupon_id": snapshot.id,
            "code": data["code"],
            "claim_id": data["claim_id"],
            "user_id": data["assigned_to"],
            "claimed_at": data["assigned_at"],
            "order_id": data["order_id"],
            "redeemed_at": data["redeemed_at"],
            "redemption": number,
            # What the redeemed event's was_held was checked against (the coupon's expiry).
            "was_held": data.get("expires_at") is not None,
            "reversed_at": now,
            "on_cancel": policy.value,
        }
        event = CouponReversed(
            event_id=reversed_event_id(c, snapshot.id, number),
            campaign_id=c,
            occurred_at=now,
            coupon_id=snapshot.id,
            user_id=data["assigned_to"],
            claim_id=data["claim_id"],
            order_id=data["order_id"],
            on_cancel=policy,
        )
        batch = self._db.batch()
        batch.update(
            snapshot.reference,
            _coupon_fields(policy, now),
            option=self._db.write_option(last_update_time=snapshot.update_time),
        )
        batch.update(
            claims_collection(self._db, c).document(data["claim_id"]), _slot_fields(policy, now)
        )
        batch.create(
            reversals_collection(self._db, c).document(reversal_record_id(snapshot.id, number)),
            record,
        )
        if policy is OnCancel.RETURN_TO_POOL:
            # As a release does: invalidates any claimer's proof of "sold out" and resets the
            # candidate pools' ranges, whose floors would hide the code come back below them.
            batch.update(
                campaign_ref(self._db, c),
                {"sold_out": False, "pool_generation": firestore.Increment(1)},
            )
        self._bus.stage(batch, event, now=now)
        batch.commit()
        self._bus.deliver_staged([event])
        return _public(record)

    # --- voids --------------------------------------------------------------------------------
    def void(self, *, campaign_id: str, code: str) -> CodeStatus:
        """Withdraw a code (idempotent): available, held or claimed, it can no longer be
        claimed (it stays `assigned`, which the claim's query filters on) nor redeemed. A
        shopper who held it keeps the slot, in state `voided`. A redeemed code is refused."""
        for _ in range(MAX_ROUNDS):
            snapshot = find_coupon(self._db, campaign_id=campaign_id, code=code)
            if snapshot is None:
                raise CodeNotFound(f"Campaign {campaign_id!r} has no code {shown(code)}.")
            data = snapshot.to_dict() or {}
            state = coupon_state(data)
            if state is CouponState.VOIDED:
                return self._redemptions.status(campaign_id=campaign_id, code=code)
            if state in (CouponState.REDEEMED, CouponState.REVERSED):
                raise CodeAlreadyRedeemed(f"Code {code!r} was used by an order: not voided.")
            try:
                self._void(campaign_id, snapshot, data, state)
            except gexc.FailedPrecondition:
                continue  # claimed, redeemed or released meanwhile: read it again
            except TRANSIENT as exc:
                log.warning("void commit failed transiently", extra={"error": repr(exc)})
                continue
            return self._redemptions.status(campaign_id=campaign_id, code=code)
        raise Contended(retry_after=1)

    def _void(
        self, campaign_id: str, snapshot: Snapshot, data: dict[str, Any], state: CouponState
    ) -> None:
        now = self._clock()
        event = CouponVoided(
            event_id=voided_event_id(campaign_id, snapshot.id),
            campaign_id=campaign_id,
            occurred_at=now,
            coupon_id=snapshot.id,
            voided_from=state.value,
        )
        batch = self._db.batch()
        batch.update(
            snapshot.reference,
            {
                "assigned": True,
                "state": CouponState.VOIDED.value,
                "voided_at": now,
                "voided_from": state.value,
                EXPIRES_BUCKET: firestore.DELETE_FIELD,  # a voided hold is never released
            },
            option=self._db.write_option(last_update_time=snapshot.update_time),
        )
        if data.get("claim_id"):
            batch.update(
                claims_collection(self._db, campaign_id).document(data["claim_id"]),
                {"state": ClaimState.VOIDED.value},
            )
        self._bus.stage(batch, event, now=now)
        batch.commit()
        self._bus.deliver_staged([event])
