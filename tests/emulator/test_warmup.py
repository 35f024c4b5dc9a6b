"""The warm-up writes then deletes throw-away documents in the campaign's new key ranges (its
claims and count_usage's markers), at the rate of each step, and leaves nothing behind."""

from __future__ import annotations

import pytest
from google.cloud import firestore

from scripts.deployment.warmup import COLLECTIONS, schedule, warm
from tests.support.stack import MakeCampaign

pytestmark = pytest.mark.emulator


class Clock:
    """Seconds pass only when the warm-up waits (its commits take no time)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def test_the_ranges_are_written_at_the_steps_rate_and_left_empty(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign()
    clock = Clock()

    report = warm(db, campaign_id, 40, step_seconds=3, clock=clock, sleep=clock.sleep)

    assert schedule(40) == [40]
    assert report.steps == 1
    # 3 seconds x 40 writes a second on each range, a document being its set and its delete.
    assert report.written == 3 * (40 // 2) * len(COLLECTIONS)
    assert clock.waits == [1.0, 1.0, 1.0]
    for name in COLLECTIONS:
        assert list(db.collection("campaigns", campaign_id, name).limit(1).stream()) == []
