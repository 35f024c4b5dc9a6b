"""Webhook models: what admin_api accepts, the stored records, and the views it returns."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from shared.events.models import EventType
from shared.types import RequestBody, UtcTime

MAX_WEBHOOKS_PER_CAMPAIGN = 10
DEFAULT_MAX_PER_SECOND = 10
DEFAULT_MAX_IN_FLIGHT = 4

Url = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2048)]


class WebhookCreate(RequestBody):
    url: Url
    events: list[EventType] = Field(min_length=1, max_length=len(EventType))
    # Per endpoint, whatever the sale's rate: requests started in any second, and at once.
    max_per_second: int = Field(default=DEFAULT_MAX_PER_SECOND, ge=1, le=1000)
    max_in_flight: int = Field(default=DEFAULT_MAX_IN_FLIGHT, ge=1, le=32)

    @field_validator("events")
    @classmethod
    def _distinct(cls, events: list[EventType]) -> list[EventType]:
        return sorted(set(events))


class WebhookRecord(BaseModel):
    """`webhooks/{webhook_id}`: the subscription, its sealed secret and its drain lease."""

    webhook_id: str
    campaign_id: str
    url: str
    events: list[EventType]
    secret_sealed: str
    max_per_second: int
    max_in_flight: int
    created_at: datetime
    # Whoever drains this endpoint's queue holds the lease until `lease_until`; an endpoint
    # that looked down is held by nobody until then (its cool-down).
    lease_owner: str | None = None
    lease_until: datetime | None = None
    down_streak: int = 0

    def lease_free(self, now: datetime) -> bool:
        return self.lease_until is None or self.lease_until <= now


class WebhookView(BaseModel):
    webhook_id: str
    campaign_id: str
    url: str
    events: list[EventType]
    max_per_second: int
    max_in_flight: int
    created_at: UtcTime

    @classmethod
    def of(cls, record: WebhookRecord) -> WebhookView:
        return cls.model_validate(record.model_dump(include=set(cls.model_fields)))


class WebhookCreated(WebhookView):
    secret: str  # shown once, in this answer only


class WebhookList(BaseModel):
    webhooks: list[WebhookView]


class DeliveryState(StrEnum):
    PENDING = "pending"  # not attempted yet
    RETRYING = "retrying"  # attempted and failed; `due_at` says when it goes again
    DELIVERED = "delivered"
    FAILED = "failed"  # gave up: 24 hours of failures


class DeliveryRecord(BaseModel):
    """`webhooks/{webhook_id}/deliveries/{event_id}`: one event, one endpoint."""

    event_id: str
    event_type: str
    body: str  # the event's JSON as published: the exact bytes signed and sent
    state: DeliveryState
    attempts: int = 0
    last_status: int | None = None
    last_error: str | None = None
    created_at: datetime
    last_attempt_at: datetime | None = None
    due_at: datetime | None = None  # present while pending or retrying


class DeliveryView(BaseModel):
    event_id: str
    event_type: str
    state: DeliveryState
    attempts: int
    last_status: int | None
    last_error: str | None
    created_at: UtcTime
    last_attempt_at: UtcTime | None
    next_attempt_at: UtcTime | None

    @classmethod
    def of(cls, record: DeliveryRecord) -> DeliveryView:
        return cls(**record.model_dump(exclude={"body", "due_at"}), next_attempt_at=record.due_at)


class DeliveryList(BaseModel):
    webhook_id: str
    deliveries: list[DeliveryView]


class DeliveryQueued(BaseModel):
    """A delivery queued for the endpoint now (a test event, or one sent again): follow it in
    the webhook's deliveries."""

    webhook_id: str
    event_id: str
    state: DeliveryState


class DeliveriesQuery(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    limit: int = Field(default=50, ge=1, le=200)
