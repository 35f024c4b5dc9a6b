"""Process-wide singletons, built on first use: one set per function instance."""

from __future__ import annotations

from functools import lru_cache

from shared import events
from shared.claim_engine import ClaimEngine
from shared.claim_service import ClaimService
from shared.clock import utcnow
from shared.event_bus import EventBus
from shared.firestore_db import get_db
from shared.import_service import IntakeService
from shared.models import JobRecord, JobState
from shared.settings import get_settings
from shared.storage_objects import get_storage
from shared.usage_counters import UsageCounters
from shared.usage_service import UsageService
from shared.waiting_room_service import WaitingRoomService


@lru_cache(maxsize=1)
def get_bus() -> EventBus:
    return EventBus(db=get_db(), settings=get_settings())


def _announce_sold_out(campaign_id: str, codes_total: int) -> None:
    now = utcnow()
    get_bus().announce_once(
        events.sold_out(campaign_id=campaign_id, codes_total=codes_total, now=now), now=now
    )


@lru_cache(maxsize=1)
def get_engine() -> ClaimEngine:
    return ClaimEngine(db=get_db(), settings=get_settings(), on_sold_out=_announce_sold_out)


@lru_cache(maxsize=1)
def get_room() -> WaitingRoomService:
    return WaitingRoomService(db=get_db(), settings=get_settings())


@lru_cache(maxsize=1)
def get_claims() -> ClaimService:
    return ClaimService(
        engine=get_engine(), bus=get_bus(), room=get_room(), usage=get_usage(), clock=utcnow
    )


def _announce_import(job: JobRecord) -> None:
    if job.state is JobState.DONE or job.imported:
        now = utcnow()
        get_bus().announce_once(events.codes_imported(job, now=now), now=now)


@lru_cache(maxsize=1)
def get_intake() -> IntakeService:
    return IntakeService(
        db=get_db(),
        storage_client=get_storage(),
        settings=get_settings(),
        clock=utcnow,
        on_job_finished=_announce_import,
    )


@lru_cache(maxsize=1)
def get_counters() -> UsageCounters:
    return UsageCounters(db=get_db(), settings=get_settings(), clock=utcnow)


@lru_cache(maxsize=1)
def get_usage() -> UsageService:
    return UsageService(db=get_db(), counters=get_counters(), bus=get_bus(), clock=utcnow)


def reset() -> None:
    """Forget every singleton (tests change the environment between sessions)."""
    for getter in (get_bus, get_engine, get_room, get_claims, get_intake, get_counters, get_usage):
        getter.cache_clear()
    get_storage.cache_clear()
