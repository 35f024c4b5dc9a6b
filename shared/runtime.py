"""Process-wide singletons, built on first use: one per function instance."""

from __future__ import annotations

from functools import lru_cache

from shared.claim_engine import ClaimEngine
from shared.firestore_db import get_db
from shared.settings import get_settings


@lru_cache(maxsize=1)
def get_engine() -> ClaimEngine:
    return ClaimEngine(db=get_db(), settings=get_settings())
