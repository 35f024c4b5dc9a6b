"""Process-wide singletons, built on first use: one per function instance."""

from __future__ import annotations

from functools import lru_cache

from shared.claim_engine import ClaimEngine
from shared.clock import utcnow
from shared.firestore_db import get_db
from shared.import_service import IntakeService
from shared.settings import get_settings
from shared.storage_objects import get_storage


@lru_cache(maxsize=1)
def get_engine() -> ClaimEngine:
    return ClaimEngine(db=get_db(), settings=get_settings())


@lru_cache(maxsize=1)
def get_intake() -> IntakeService:
    return IntakeService(
        db=get_db(), storage_client=get_storage(), settings=get_settings(), clock=utcnow
    )


def reset() -> None:
    """Forget every singleton (tests change the environment between sessions)."""
    get_engine.cache_clear()
    get_intake.cache_clear()
    get_storage.cache_clear()
