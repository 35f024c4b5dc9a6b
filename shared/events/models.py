"""Events on the `coupon-events` topic: `{event_id, type, campaign_id, occurred_at, …}`.

Delivery is at least once, so every event id is derived from what happened (a claim, a job, a
campaign crossing a threshold): publishing the same fact twice yields the same id, and consumers
deduplicate on it.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    TypeAdapter,
    ValidationError,
)

from shared.types import CampaignId, InputTime, rfc3339

EventId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")]
# Ids that name Firestore documents (claims, coupons, jobs): no "/", never "__…__".
DocumentId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")]
# Firebase uids are at most 128 characters.
UserId = Annotated[str, StringConstraints(min_length=1, max_length=128)]
# More than any import or generation job can hold, and inside Firestore's int64.
MAX_EVENT_COUNT = 1_000_000_000


class EventType(StrEnum):
    COUPON_CLAIMED = "coupon.claimed"
    CODES_IMPORTED = "codes.imported"
    LOW_STOCK = "campaign.low_stock"
    SOLD_OUT = "campaign.sold_out"


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    event_id: EventId
    campaign_id: CampaignId
    occurred_at: Annotated[InputTime, PlainSerializer(rfc3339, return_type=str)]


class CouponClaimed(_Event):
    type: Literal[EventType.COUPON_CLAIMED] = EventType.COUPON_CLAIMED
    coupon_id: DocumentId
    user_id: UserId
    claim_id: DocumentId


class CodesImported(_Event):
    type: Literal[EventType.CODES_IMPORTED] = EventType.CODES_IMPORTED
    count: int = Field(ge=0, le=MAX_EVENT_COUNT)
    job_id: DocumentId


class CampaignLowStock(_Event):
    type: Literal[EventType.LOW_STOCK] = EventType.LOW_STOCK
    remaining: int = Field(ge=0, le=MAX_EVENT_COUNT)
    threshold: int = Field(ge=0, le=MAX_EVENT_COUNT)


class CampaignSoldOut(_Event):
    type: Literal[EventType.SOLD_OUT] = EventType.SOLD_OUT


Event = Annotated[
    CouponClaimed | CodesImported | CampaignLowStock | CampaignSoldOut,
    Field(discriminator="type"),
]
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


class MalformedEvent(ValueError):
    """The message can never be processed: acknowledge it, log it, never retry it."""


def parse_event(payload: bytes) -> Event:
    """An event from the topic, strictly typed: a count of 1e20 or "5", an epoch number for a
    time, or a time at the ends of the calendar is malformed, never coerced."""
    try:
        return _EVENT.validate_json(payload, strict=True)
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


def event_from_dict(data: dict[str, Any]) -> Event:
    return _EVENT.validate_python(data)


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
