"""Maintenance models: the scheduled sweep's request and result."""

from __future__ import annotations

from pydantic import BaseModel, Field

from shared.types import RequestBody


class SweepRequest(RequestBody):
    # Claims are checked for a lost event from where the campaign's last sweep stopped, but from
    # no further back than the window (a first sweep, one after an outage), up to the grace
    # before now (shared/claims/recovery.py).
    window_minutes: int = Field(default=60, ge=1, le=7 * 24 * 60)
    grace_seconds: int = Field(default=120, ge=0, le=3600)
    # Expired holds released per sweep at most; the rest wait for the next one.
    max_releases: int = Field(default=50_000, ge=0, le=1_000_000)


class SweepResult(BaseModel):
    holds_released: int
    outbox_published: int
    claims_republished: int
    webhook_attempts: int  # deliveries attempted by the webhook drains
    webhook_deliveries: int  # of which answered 2xx
    failures: list[str]
