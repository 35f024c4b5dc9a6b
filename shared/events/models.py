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

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from shared.types import CampaignId, UtcTime

EventId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")]


class EventType(StrEnum):
    COUPON_CLAIMED = "coupon.claimed"
    CODES_IMPORTED = "codes.imported"
    CODES_ASSIGNED = "codes.assigned"
    LOW_STOCK = "campaign.low_stock"
    SOLD_OUT = "campaign.sold_out"


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    event_id: EventId
    campaign_id: CampaignId
    occurred_at: UtcTime


class CouponClaimed(_Event):
    type: Literal[EventType.COUPON_CLAIMED] = EventType.COUPON_CLAIMED
    coupon_id: str
    user_id: str
    claim_id: str


class CodesImported(_Event):
    type: Literal[EventType.CODES_IMPORTED] = EventType.CODES_IMPORTED
    count: int = Field(ge=0)
    job_id: str


class CodesAssigned(_Event):
    """Codes handed to a recipient list by one commit of an assignment job: one event per
    commit instead of one per code. The id derives from the job and the commit's first line."""

    type: Literal[EventType.CODES_ASSIGNED] = EventType.CODES_ASSIGNED
    count: int = Field(ge=1)
    job_id: str


class CampaignLowStock(_Event):
    type: Literal[EventType.LOW_STOCK] = EventType.LOW_STOCK
    remaining: int
    threshold: int


class CampaignSoldOut(_Event):
    type: Literal[EventType.SOLD_OUT] = EventType.SOLD_OUT


Event = Annotated[
    CouponClaimed | CodesImported | CodesAssigned | CampaignLowStock | CampaignSoldOut,
    Field(discriminator="type"),
]
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


class MalformedEvent(ValueError):
    """The message can never be processed: acknowledge it, log it, never retry it."""


def parse_event(payload: bytes) -> Event:
    try:
        return _EVENT.validate_json(payload)
    except ValidationError as exc:
        raise MalformedEvent(
            f"not a codedrop event: {exc.error_count()} problem(s): {exc}"
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
