"""The segment queries against the emulator: where an instance's look for open segments starts,
in the order Firestore really answers (drained_generation first, then the id)."""

from __future__ import annotations

import pytest
from google.cloud import firestore

from shared.campaigns import segments
from shared.gcp.firestore import segments_collection
from tests.support.stack import MakeCampaign

pytestmark = pytest.mark.emulator


def _ids(found: list[segments.Segment]) -> list[int]:
    return [int(s.segment_id) for s in found]


def _drain_all(db: firestore.Client, campaign_id: str, *, generation: int) -> None:
    batch = db.batch()
    for index in range(segments.COUNT):
        ref = segments_collection(db, campaign_id).document(segments.segment_id(index))
        batch.update(ref, {"drained_generation": generation})
    batch.commit()


def test_a_first_look_starts_at_its_own_place_and_goes_round(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign()

    found = segments.open_segments(db, campaign_id=campaign_id, generation=1, start=60, limit=8)

    assert _ids(found) == [60, 61, 62, 63, 0, 1, 2, 3]


def test_after_a_release_the_look_starts_at_its_place_among_the_segments_drained_before(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    """Every segment drained at generation 3, the campaign now at 4: told where the open
    segments are, the query starts where asked; told nothing, every instance would get the
    same first segments."""
    campaign_id = make_campaign()
    _drain_all(db, campaign_id, generation=3)

    told = segments.open_segments(
        db, campaign_id=campaign_id, generation=4, start=60, limit=8, drained_at=3
    )
    untold = segments.open_segments(db, campaign_id=campaign_id, generation=4, start=60, limit=8)

    assert _ids(told) == [60, 61, 62, 63, 0, 1, 2, 3]
    assert _ids(untold) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert segments.open_segments(db, campaign_id=campaign_id, generation=3, start=0, limit=8) == []
