"""Events on the `coupon-events` topic: `{event_id, type, campaign_id, occurred_at, …}`.

Delivery is at least once, so every event id is derived from what happened (a claim, a job, a
campaign crossing a threshold): publishing the same fact twice yields the same id, and consumers
deduplicate on it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from shared.types import CampaignId, InputTime, OnCancel, rfc3339

EventId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")]
# Ids that name Firestore documents (claims, coupons, jobs): no "/", never "__…__".
DocumentId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")]
# Firebase uids are at most 128 characters.
UserId = Annotated[str, StringConstraints(min_length=1, max_length=128)]
# A shop's order id: printable ASCII without spaces.
OrderId = Annotated[str, StringConstraints(pattern=r"^[\x21-\x7e]{1,128}$")]
# A time in an event: RFC 3339 in UTC, within the calendar bounds of InputTime.
EventTime = Annotated[InputTime, PlainSerializer(rfc3339, return_type=str)]
# More than any import or generation job can hold, and inside Firestore's int64.
MAX_EVENT_COUNT = 1_000_000_000


class EventType(StrEnum):
    COUPON_CLAIMED = "coupon.claimed"
    COUPON_REDEEMED = "coupon.redeemed"
    COUPON_RELEASED = "coupon.released"
    COUPON_REVERSED = "coupon.reversed"
    COUPON_VOIDED = "coupon.voided"
    CODES_IMPORTED = "codes.imported"
    CODES_ASSIGNED = "codes.assigned"
    LOW_STOCK = "campaign.low_stock"
    SOLD_OUT = "campaign.sold_out"


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    event_id: EventId
    campaign_id: CampaignId
    occurred_at: EventTime


class _ClaimEvent(_Event):
    """What befell one shopper's claim of one code. `type` stands here so that it keeps its
    place before the claim's fields in every event's JSON; each event narrows it."""

    type: EventType
    coupon_id: DocumentId
    user_id: UserId
    claim_id: DocumentId


class _OrderEvent(_ClaimEvent):
    order_id: OrderId


class CouponClaimed(_ClaimEvent):
    type: Literal[EventType.COUPON_CLAIMED] = EventType.COUPON_CLAIMED
    # Set when the claim is a hold: it is released at this time unless redeemed.
    expires_at: EventTime | None = None


class CouponRedeemed(_OrderEvent):
    type: Literal[EventType.COUPON_REDEEMED] = EventType.COUPON_REDEEMED
    was_held: bool  # the code was a hold (not a final claim) until this redemption


class CouponReleased(_ClaimEvent):
    """A hold that was not redeemed in time: its code is available again."""

    type: Literal[EventType.COUPON_RELEASED] = EventType.COUPON_RELEASED
    claimed_at: EventTime  # when the hold was claimed
    expired_at: EventTime


class CouponReversed(_OrderEvent):
    """A redemption undone (its order was cancelled or refunded): exactly one per redemption."""

    type: Literal[EventType.COUPON_REVERSED] = EventType.COUPON_REVERSED
    on_cancel: OnCancel


class CouponVoided(_Event):
    """An admin withdrew a code: it can no longer be claimed or redeemed."""

    type: Literal[EventType.COUPON_VOIDED] = EventType.COUPON_VOIDED
    coupon_id: DocumentId
    voided_from: Annotated[str, StringConstraints(pattern=r"^(available|held|claimed)$")]


class CodesImported(_Event):
    type: Literal[EventType.CODES_IMPORTED] = EventType.CODES_IMPORTED
    count: int = Field(ge=0, le=MAX_EVENT_COUNT)
    job_id: DocumentId


# The field of a commit's first claim document that records how many claims the commit made.
COMMIT_COUNT = "commit_count"


class CodesAssigned(_Event):
    """Codes handed to a recipient list by one commit of an assignment job: one event per
    commit instead of one per code. `claim_id` is the commit's first claim, which records the
    commit's size; the id derives from the job and that claim's line (assigned_event_id)."""

    type: Literal[EventType.CODES_ASSIGNED] = EventType.CODES_ASSIGNED
    count: int = Field(ge=1, le=MAX_EVENT_COUNT)
    job_id: DocumentId
    claim_id: DocumentId


class CampaignLowStock(_Event):
    type: Literal[EventType.LOW_STOCK] = EventType.LOW_STOCK
    remaining: int = Field(ge=0, le=MAX_EVENT_COUNT)
    threshold: int = Field(ge=0, le=MAX_EVENT_COUNT)


class CampaignSoldOut(_Event):
    type: Literal[EventType.SOLD_OUT] = EventType.SOLD_OUT


Event = Annotated[
    CouponClaimed
    | CouponRedeemed
    | CouponReleased
    | CouponReversed
    | CouponVoided
    | CodesImported
    | CodesAssigned
    | CampaignLowStock
    | CampaignSoldOut,
    Field(discriminator="type"),
]
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


class MalformedEvent(ValueError):
    """The message can never be processed: acknowledge it, log it, never retry it."""


def parse_event(payload: bytes) -> Event:
    """An event from the topic, strictly typed: a count of 1e20 or "5", an epoch number for a
    time, or a time at the ends of the calendar is malformed, never coerced."""
    return _strictly(_EVENT, payload)


T = TypeVar("T")


def _strictly(adapter: TypeAdapter[T], payload: bytes) -> T:
    try:
        return adapter.validate_json(payload, strict=True)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc'])[:64]}: {item['msg'][:120]}"
            for item in exc.errors(include_url=False, include_input=False)[:3]
        )
        raise MalformedEvent(
            f"not a codedrop event: {exc.error_count()} problem(s): {problems}"
        ) from exc


def encode_event(event: Event) -> bytes:
    return json.dumps(event.model_dump(mode="json"), separators=(",", ":")).encode()


# --- many claims in one message -----------------------------------------------------------------
CLAIMED_BATCH: Literal["coupon.claimed.batch"] = "coupon.claimed.batch"
# A batch's members are at most this many: a batch is counted in one commit (a marker each and
# one shard), well under Firestore's 500 writes.
MAX_BATCH_CLAIMS = 100
# And its JSON at most this many bytes: base64 and the push envelope keep the delivery under the
# functions' 64 KiB body limit (shared/http/requests.py).
MAX_BATCH_BYTES = 40_000


def _distinct_members(claims: tuple[CouponClaimed, ...]) -> tuple[CouponClaimed, ...]:
    if len({c.event_id for c in claims}) != len(claims):
        raise ValueError("a batch names each claim once")
    return claims


def batch_event_id(claims: Sequence[CouponClaimed]) -> str:
    """A batch's id, derived from its members' ids as theirs from their claims: the same claims
    make the same batch id. Consumers still deduplicate on each member's own id."""
    digest = hashlib.sha256("\n".join(c.event_id for c in claims).encode()).hexdigest()[:32]
    return f"claimed_batch.{claims[0].campaign_id}.{digest}"


class ClaimedBatch(_Event):
    """`coupon.claimed` events of one campaign published as one message (shared/claims/events.py):
    each member is the very event a single publish would carry, checked and counted on its own
    terms. `occurred_at` is the first member's. Not an event type: nothing subscribes to it,
    webhooks receive its members."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["coupon.claimed.batch"] = CLAIMED_BATCH
    claims: Annotated[
        tuple[CouponClaimed, ...],
        Field(min_length=1, max_length=MAX_BATCH_CLAIMS),
        AfterValidator(_distinct_members),
    ]

    @model_validator(mode="after")
    def _consistent(self) -> ClaimedBatch:
        # Routing (the webhook attribute) and counting are per campaign.
        if any(c.campaign_id != self.campaign_id for c in self.claims):
            raise ValueError("every claim of a batch is of its campaign")
        if self.event_id != batch_event_id(self.claims):
            raise ValueError("a batch's id derives from its claims' ids")
        if self.occurred_at != self.claims[0].occurred_at:
            raise ValueError("a batch's time is its first claim's")
        return self

    @classmethod
    def of(cls, claims: Sequence[CouponClaimed]) -> ClaimedBatch:
        return cls(
            event_id=batch_event_id(claims),
            campaign_id=claims[0].campaign_id,
            occurred_at=claims[0].occurred_at,
            claims=tuple(claims),
        )


def encode_batch(claims: Sequence[CouponClaimed], encoded: Sequence[bytes] | None = None) -> bytes:
    """The batch message of `claims` (one campaign's, each once), members encoded as
    encode_event does. A publisher that encoded them already (to measure the batch) passes
    those bytes as `encoded`: they are spliced in, not validated and dumped a second time."""
    # What ClaimedBatch checks of its members, without validating each member again.
    if not 0 < len(claims) <= MAX_BATCH_CLAIMS:
        raise ValueError(f"a batch holds 1 to {MAX_BATCH_CLAIMS} claims")
    _distinct_members(tuple(claims))
    if any(c.campaign_id != claims[0].campaign_id for c in claims):
        raise ValueError("every claim of a batch is of its campaign")
    if encoded is None:
        encoded = [encode_event(c) for c in claims]
    head = ClaimedBatch.model_construct(
        event_id=batch_event_id(claims),
        campaign_id=claims[0].campaign_id,
        occurred_at=claims[0].occurred_at,
        type=CLAIMED_BATCH,
        claims=(),
    )
    empty = json.dumps(head.model_dump(mode="json"), separators=(",", ":")).encode()
    # `claims` is the model's last field: its empty list closes the object.
    return empty.removesuffix(b"[]}") + b"[" + b",".join(encoded) + b"]}"


Message = Annotated[Event | ClaimedBatch, Field(discriminator="type")]
_MESSAGE: TypeAdapter[Event | ClaimedBatch] = TypeAdapter(Message)


def parse_message(payload: bytes) -> Event | ClaimedBatch:
    """What count_usage and deliver_webhooks are pushed: an event (parse_event), or a batch of
    claims, as strictly: more than MAX_BATCH_CLAIMS claims, a claim twice or another campaign's
    claim makes the whole message malformed."""
    return _strictly(_MESSAGE, payload)


def event_from_dict(data: dict[str, Any]) -> Event:
    return _EVENT.validate_python(data)


# --- the ids of the checkout half's events: derived from the facts, here so that producers
# (shared/claims) and count_usage's check of each event against its record agree ------------
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(at: datetime) -> int:
    """Microseconds since the epoch, exactly (Firestore keeps times to the microsecond)."""
    return (at - _EPOCH) // timedelta(microseconds=1)


def claimed_event_id(campaign_id: str, claim_id: str, claimed_at: datetime, *, hold: bool) -> str:
    """A final claim's slot holds it for good; a hold's slot is freed when the hold is released
    and may hold another claim later, so a hold's id also carries its claim time."""
    base = f"claimed.{campaign_id}.{claim_id}"
    return f"{base}.{micros(claimed_at)}" if hold else base


def released_event_id(campaign_id: str, coupon_id: str, claimed_at: datetime) -> str:
    # One per hold: the same coupon may be held and released again later.
    return f"released.{campaign_id}.{coupon_id}.{micros(claimed_at)}"


def redeemed_event_id(campaign_id: str, coupon_id: str, redemption: int = 1) -> str:
    """A code is redeemed once unless a reversal gives it back: the n-th redemption of a coupon
    (its `redemptions` count after it) is known by n, the first keeping the id it always had."""
    base = f"redeemed.{campaign_id}.{coupon_id}"
    return base if redemption == 1 else f"{base}.{redemption}"


def redemption_number(event_id: str, campaign_id: str, coupon_id: str) -> int | None:
    """The n of a coupon.redeemed id (redeemed_event_id), or None if it is not one."""
    base = f"redeemed.{campaign_id}.{coupon_id}"
    if event_id == base:
        return 1
    rest = event_id[len(base) + 1 :] if event_id.startswith(f"{base}.") else ""
    return int(rest) if rest.isdigit() and rest[0] != "0" and int(rest) > 1 else None


def reversed_event_id(campaign_id: str, coupon_id: str, redemption: int) -> str:
    return f"reversed.{campaign_id}.{coupon_id}.{redemption}"  # one per redemption


def reversal_record_id(coupon_id: str, redemption: int) -> str:
    """The id of a reversed redemption's record (campaigns/{id}/reversals/…)."""
    return f"{coupon_id}-{redemption}"


def voided_event_id(campaign_id: str, coupon_id: str) -> str:
    return f"voided.{campaign_id}.{coupon_id}"  # a voided code stays voided


def assigned_event_id(job_id: str, first_line: int) -> str:
    # An assignment commit is known by its first line: that row's slot is created once.
    return f"assigned.{job_id}.{first_line}"


def released_record_id(claim_id: str, claimed_at: datetime) -> str:
    """The id of a released hold's record (campaigns/{id}/released_holds/…)."""
    return f"{claim_id}-{micros(claimed_at)}"


def low_stock(
    *, campaign_id: str, codes_total: int, remaining: int, threshold: int, now: datetime
) -> CampaignLowStock:
    # One announcement per pool size: an import that refills the pool re-arms it.
    return CampaignLowStock(
        event_id=f"low_stock.{campaign_id}.{codes_total}",
        campaign_id=campaign_id,
        occurred_at=now,
        remaining=remaining,
        threshold=threshold,
    )


def sold_out(*, campaign_id: str, codes_total: int, now: datetime) -> CampaignSoldOut:
    return CampaignSoldOut(
        event_id=f"sold_out.{campaign_id}.{codes_total}", campaign_id=campaign_id, occurred_at=now
    )
