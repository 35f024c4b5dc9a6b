"""Redemption: a shop's checkout validates a code and redeems it for an order, at most once.

A redemption is one atomic batch: the coupon becomes `redeemed` (guarded by the update time it
was read with), the shopper's claim slot says so too, and `coupon.redeemed` is staged in the
outbox. A release or another order's redemption committing first makes the precondition fail;
the coupon is then read again and the answer follows from what it has become: redeemed by this
order (200, idempotent), by another (409 CODE_ALREADY_REDEEMED), or free again (409
CODE_NOT_CLAIMED). A hold past its expiry that the sweep has not released yet is still the
shopper's and may be redeemed: nobody else can have the code until it is released.

A code past the campaign's validity (`valid_until`, from the claim time) is refused (409
CODE_EXPIRED); a voided one too (409 CODE_VOIDED). The batch also records the redemption under
its order (`redeemed_orders/{hash of the order id}`), so a cancellation that names only the order
finds its codes by reference (shared/claims/reversal.py). A code given back by a reversal may be
redeemed again: the coupon's `redemptions` count numbers each redemption, and its event.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.campaigns.models import CampaignRecord
from shared.campaigns.store import get_campaign
from shared.claims.models import (
    ClaimState,
    CodeStatus,
    OrderCodeResult,
    OrderRedemptions,
    RedemptionPublic,
    ShopifyOrder,
)
from shared.coupons.store import (
    EXPIRES_BUCKET,
    CouponState,
    campaigns_with_code,
    coupon_state,
    find_coupon,
)
from shared.errors import (
    CodeAlreadyRedeemed,
    CodeExpired,
    CodeNotClaimed,
    CodeNotFound,
    CodeVoided,
    Contended,
    shown,
)
from shared.events.bus import EventBus
from shared.events.models import CouponRedeemed, redeemed_event_id
from shared.gcp.firestore import Snapshot, claims_collection, redeemed_order_ref

log = logging.getLogger(__name__)

MAX_ROUNDS = 8
TRANSIENT = (gexc.Aborted, gexc.DeadlineExceeded, gexc.ServiceUnavailable)


@dataclass(frozen=True, slots=True)
class RedemptionOutcome:
    redemption: RedemptionPublic
    created: bool  # False: this order had redeemed the code already


@dataclass(kw_only=True, eq=False)
class RedemptionService:
    db: firestore.Client
    bus: EventBus
    clock: Callable[[], datetime]

    def _coupon(self, campaign_id: str, code: str) -> Snapshot:
        """The coupon of `code` as a cashier typed it (any letter case; see shared.codes).
        Every miss answers alike: another campaign's code is an unknown code here."""
        snapshot = find_coupon(self.db, campaign_id=campaign_id, code=code)
        if snapshot is None:
            raise CodeNotFound(f"Campaign {campaign_id!r} has no code {shown(code)}.")
        found: Snapshot = snapshot
        return found

    def _coupon_and_campaign(self, campaign_id: str, code: str) -> tuple[Snapshot, CampaignRecord]:
        """The coupon and its campaign, whose validity the redemption checks."""
        return self._coupon(campaign_id, code), get_campaign(self.db, campaign_id=campaign_id)

    def status(self, *, campaign_id: str, code: str) -> CodeStatus:
        data = self._coupon(campaign_id, code).to_dict() or {}
        state = coupon_state(data)
        assigned = state is not CouponState.AVAILABLE
        return CodeStatus(
            code=data["code"],
            state=state.value,
            user_id=data.get("assigned_to") if assigned else None,
            claimed_at=data.get("assigned_at") if assigned else None,
            expires_at=data.get("expires_at") if state is CouponState.HELD else None,
            redeemed_at=data.get("redeemed_at"),
            order_id=data.get("order_id"),
        )

    def redeem(self, *, campaign_id: str, code: str, order_id: str) -> RedemptionOutcome:
        for _ in range(MAX_ROUNDS):
            snapshot, campaign = self._coupon_and_campaign(campaign_id, code)
            data = snapshot.to_dict() or {}
            code = data["code"]  # as stored, whatever case it was typed in
            state = coupon_state(data)
            if state is CouponState.VOIDED:
                raise CodeVoided(f"Code {code!r} was voided.")
            if state is CouponState.REVERSED:
                raise CodeAlreadyRedeemed(f"Code {code!r} was used by an order since cancelled.")
            if state is CouponState.REDEEMED:
                if data.get("order_id") != order_id:
                    raise CodeAlreadyRedeemed(f"Code {code!r} was redeemed by another order.")
                return RedemptionOutcome(
                    redemption=RedemptionPublic(
                        code=code,
                        order_id=order_id,
                        user_id=data["assigned_to"],
                        redeemed_at=data["redeemed_at"],
                    ),
                    created=False,
                )
            if state is CouponState.AVAILABLE:
                raise CodeNotClaimed(
                    f"Nobody holds code {code!r}: it is available, or its hold was released."
                )
            valid_until = campaign.valid_until(data["assigned_at"])
            if valid_until is not None and self.clock() > valid_until:
                raise CodeExpired(f"Code {code!r} was valid until {valid_until.isoformat()}.")
            try:
                return self._commit(campaign_id, code, order_id, snapshot, data)
            except gexc.FailedPrecondition:
                continue  # the coupon changed under us: read it again and decide afresh
            except TRANSIENT as exc:
                log.warning("redemption commit failed transiently", extra={"error": repr(exc)})
                continue
        raise Contended(retry_after=1)

    def _commit(
        self, campaign_id: str, code: str, order_id: str, snapshot: Snapshot, data: dict[str, Any]
    ) -> RedemptionOutcome:
        now = self.clock()
        was_held = coupon_state(data) is CouponState.HELD
        number = int(data.get("redemptions", 0)) + 1  # the guard makes it this coupon's n-th
        event = CouponRedeemed(
            event_id=redeemed_event_id(campaign_id, snapshot.id, number),
            campaign_id=campaign_id,
            occurred_at=now,
            coupon_id=snapshot.id,
            user_id=data["assigned_to"],
            claim_id=data["claim_id"],
            order_id=order_id,
            was_held=was_held,
        )
        # expires_at stays: it tells a redeemed hold from a redeemed final claim (count_usage
        # checks coupon.redeemed's was_held against it); the views show it only while held.
        redeemed = {"redeemed_at": now, "order_id": order_id}
        batch = self.db.batch()
        batch.update(
            snapshot.reference,
            {
                **redeemed,
                "state": CouponState.REDEEMED.value,
                EXPIRES_BUCKET: firestore.DELETE_FIELD,
                # Never above 1 + its reversals while the guard holds; the audit proves that.
                "redemptions": firestore.Increment(1),
            },
            option=self.db.write_option(last_update_time=snapshot.update_time),
        )
        batch.update(
            claims_collection(self.db, campaign_id).document(data["claim_id"]),
            {**redeemed, "state": ClaimState.REDEEMED.value},
        )
        # Unguarded: entries are only ever added, each by the commit of its own redemption.
        entry = {"campaign_id": campaign_id, "coupon_id": snapshot.id, "redemption": number}
        batch.set(
            redeemed_order_ref(self.db, order_key(order_id)),
            {"order_id": order_id, "redemptions": firestore.ArrayUnion([entry])},
            merge=True,
        )
        self.bus.stage(batch, event, now=now)
        batch.commit()
        self.bus.deliver_staged([event])
        return RedemptionOutcome(
            redemption=RedemptionPublic(
                code=code, order_id=order_id, user_id=data["assigned_to"], redeemed_at=now
            ),
            created=True,
        )

    def redeem_order(self, order: ShopifyOrder) -> OrderRedemptions:
        """Redeem every discount code of a shop's order, each in one campaign (campaign_for).

        A code nobody holds, one another order redeemed, an expired or a voided one, is reported
        and skipped: the order exists either way, and the shop's own checkout decided whether
        the discount applied.
        """
        results = []
        for discount in order.discount_codes:
            code = discount.code
            campaign_id = campaign_for(campaigns_with_code(self.db, code=code), order.id)
            if campaign_id is None:
                results.append(
                    OrderCodeResult(code=code, campaign_id=None, outcome="CODE_NOT_FOUND")
                )
            else:
                try:
                    outcome = self.redeem(campaign_id=campaign_id, code=code, order_id=order.id)
                except (
                    CodeNotClaimed,
                    CodeAlreadyRedeemed,
                    CodeNotFound,
                    CodeExpired,
                    CodeVoided,
                ) as exc:
                    result = exc.error_code
                else:
                    result = "redeemed" if outcome.created else "already_redeemed"
                results.append(OrderCodeResult(code=code, campaign_id=campaign_id, outcome=result))
        log.info(
            "order redeemed",
            extra={"order_id": order.id, "outcomes": [r.outcome for r in results]},
        )
        return OrderRedemptions(order_id=order.id, results=results)


def order_key(order_id: str) -> str:
    """The document id of an order's redemptions: a hash, as order ids may hold any printable
    character (a `/` or `__x__` is no document id)."""
    return hashlib.sha256(order_id.encode()).hexdigest()[:40]


def campaign_for(holders: dict[str, dict[str, Any]], order_id: str) -> str | None:
    """The one campaign an order's code is redeemed in, when several campaigns hold the same
    code text (an order must not burn codes other shoppers hold elsewhere): the campaign where
    this order already redeemed it (a redelivery), else the one where it was claimed earliest
    and is still unredeemed, else the first by id (whose answer then says why not). Ties go to
    the smaller campaign id, so every redelivery picks the same one."""
    if not holders:
        return None
    for campaign_id, data in holders.items():
        if coupon_state(data) is CouponState.REDEEMED and data.get("order_id") == order_id:
            return campaign_id
    claimed = [
        (data["assigned_at"], campaign_id)
        for campaign_id, data in holders.items()
        if coupon_state(data) in (CouponState.HELD, CouponState.CLAIMED)
        and isinstance(data.get("assigned_at"), datetime)
    ]
    return min(claimed)[1] if claimed else next(iter(holders))
