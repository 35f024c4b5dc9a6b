"""Claim models: the stored claim, what the claim API returns, and the checkout half (codes,
redemptions, Shopify orders)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from shared.events.models import CouponClaimed, claimed_event_id
from shared.intake.csv_rows import MAX_CODE_LENGTH
from shared.types import OnCancel, RequestBody, UtcTime


class ClaimState(StrEnum):
    HELD = "held"  # a hold for checkout: released at expires_at unless redeemed
    CLAIMED = "claimed"  # final
    REDEEMED = "redeemed"
    # The code's redemption was reversed and the code went back to the pool (or stays used):
    # the slot stays taken, so the per-user limit still counts it.
    REVERSED = "reversed"
    VOIDED = "voided"  # an admin voided the code


class ClaimRecord(BaseModel):
    """A claim as stored in `campaigns/{campaign_id}/claims/{claim_id}`."""

    claim_id: str
    campaign_id: str
    user_id: str
    coupon_id: str
    code: str
    slot: int
    claimed_at: datetime
    idempotency_key: str | None = None
    state: ClaimState = ClaimState.CLAIMED
    expires_at: datetime | None = None
    redeemed_at: datetime | None = None
    order_id: str | None = None


class _ExpiresWhileHeld(BaseModel):
    state: ClaimState
    expires_at: UtcTime | None

    @model_validator(mode="after")
    def _expiry_only_while_held(self) -> Self:
        # A redeemed hold keeps its expiry in the database; to the shopper it no longer expires.
        if self.state is not ClaimState.HELD:
            self.expires_at = None
        return self


class ClaimPublic(_ExpiresWhileHeld):
    claim_id: str
    campaign_id: str
    user_id: str
    code: str
    claimed_at: UtcTime
    # Until when the code may be redeemed (the campaign's validity), or null: no end.
    valid_until: UtcTime | None = None


class HeldClaim(_ExpiresWhileHeld):
    claim_id: str
    code: str
    claimed_at: UtcTime
    valid_until: UtcTime | None = None


class HeldClaims(BaseModel):
    claims: list[HeldClaim]


def coupon_claimed(claim: ClaimRecord) -> CouponClaimed:
    """The claim's event; its id derives from the claim (claimed_event_id), so re-publishing it
    is harmless."""
    return CouponClaimed(
        event_id=claimed_event_id(
            claim.campaign_id, claim.claim_id, claim.claimed_at, hold=claim.expires_at is not None
        ),
        campaign_id=claim.campaign_id,
        occurred_at=claim.claimed_at,
        coupon_id=claim.coupon_id,
        user_id=claim.user_id,
        claim_id=claim.claim_id,
        expires_at=claim.expires_at,
    )


# --- codes and redemptions (admin_api, redeemer access) ---------------------------------------
OrderId = Annotated[str, StringConstraints(strip_whitespace=True, pattern=r"^[\x21-\x7e]{1,128}$")]


class CodeStatus(BaseModel):
    code: str
    state: str  # available, held, claimed, redeemed, reversed, voided
    user_id: str | None
    claimed_at: UtcTime | None
    expires_at: UtcTime | None
    redeemed_at: UtcTime | None
    order_id: str | None


class RedemptionCreate(RequestBody):
    code: Annotated[str, StringConstraints(min_length=1, max_length=MAX_CODE_LENGTH)]
    order_id: OrderId


class RedemptionPublic(BaseModel):
    code: str
    order_id: str
    user_id: str
    redeemed_at: UtcTime


class ReversalPublic(BaseModel):
    """A reversed redemption, as its record keeps it."""

    code: str
    order_id: str
    user_id: str
    redeemed_at: UtcTime
    reversed_at: UtcTime
    on_cancel: OnCancel  # what became of the code


class OrderReversal(BaseModel):
    order_id: str
    reversals: list[ReversalPublic]


# --- Shopify's order webhooks: orders/create, orders/cancelled, refunds/create ----------------
def _shopify_id(value: object) -> object:
    # Shopify's order ids are JSON integers (64-bit); codedrop keeps order ids as strings.
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return str(value)
    return value


ShopifyOrderId = Annotated[OrderId, BeforeValidator(_shopify_id)]


class ShopifyDiscountCode(BaseModel):
    # Shopify sends more per code (amount, type); only the code matters here.
    model_config = ConfigDict(extra="ignore")
    code: str = Field(min_length=1, max_length=MAX_CODE_LENGTH)


class ShopifyOrder(BaseModel):
    """The part of an order payload that redemption needs; the rest is ignored."""

    model_config = ConfigDict(extra="ignore")
    id: ShopifyOrderId
    discount_codes: list[ShopifyDiscountCode] = Field(default_factory=list, max_length=100)


class ShopifyRefund(BaseModel):
    """The part of a refunds/create payload that a reversal needs: the refunded order."""

    model_config = ConfigDict(extra="ignore")
    order_id: ShopifyOrderId


class OrderCodeResult(BaseModel):
    code: str
    campaign_id: str | None
    # redeemed, already_redeemed, reversed, already_reversed, or the error_code that refused it
    outcome: str


class OrderRedemptions(BaseModel):
    order_id: str
    results: list[OrderCodeResult]
    # Set when the delivery's X-Shopify-Topic is not one that redeems: nothing was done.
    ignored_topic: str | None = None
