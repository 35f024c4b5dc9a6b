"""The test stack's names: the project, bucket, topic and the functions' source."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MAIN = str(ROOT / "functions" / "main.py")
INDEXES = ROOT / "firestore.indexes.json"
RULES = ROOT / "firestore.rules"
PROJECT = "demo-codedrop-test"
BUCKET = "codedrop-imports-test"
CORS_ORIGIN = "https://shop.example"
EVENTS_TOPIC = "coupon-events"
PUMP_SUBSCRIPTION = "test-pump"

# make_campaign(codes=..., **CampaignCreate fields) -> campaign id
MakeCampaign = Callable[..., str]
# pump() -> the events delivered to count_usage
Pump = Callable[[], list[dict[str, Any]]]


def reset_instance() -> None:
    """Forget this process's settings and service container (the environment changed)."""
    from shared import container, settings

    if container.instance_services.cache_info().currsize:
        container.instance_services().close()
    settings.get_settings.cache_clear()
    container.instance_services.cache_clear()
