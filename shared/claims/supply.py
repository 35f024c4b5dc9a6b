"""The candidate pool's view of Firestore for one campaign: its segments and its coupons."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from google.cloud import firestore

from shared.campaigns import segments
from shared.campaigns.segments import Lease, Segment
from shared.coupons import store as coupon_store
from shared.coupons.store import Candidate


@dataclass(frozen=True)
class FirestoreSupply:
    db: firestore.Client
    campaign_id: str

    def open_segments(
        self, *, generation: int, start: float, limit: int, drained_at: int
    ) -> list[Segment]:
        return segments.open_segments(
            self.db,
            campaign_id=self.campaign_id,
            generation=generation,
            start=int(start * segments.COUNT),
            limit=limit,
            drained_at=drained_at,
        )

    def get_segments(self, segment_ids: Sequence[str]) -> list[Segment]:
        return segments.get_segments(self.db, campaign_id=self.campaign_id, segment_ids=segment_ids)

    def lease_run(self, run: Sequence[Segment], lease: Lease) -> list[Segment] | None:
        return segments.lease_run(self.db, campaign_id=self.campaign_id, run=run, lease=lease)

    def record_progress(
        self, run: Sequence[Segment], *, reached: float, lease: Lease
    ) -> list[Segment] | None:
        return segments.record_progress(
            self.db, campaign_id=self.campaign_id, run=run, reached=reached, lease=lease
        )

    def lower_top(self, segment: Segment, *, top: float, generation: int) -> Segment | None:
        return segments.lower_top(
            self.db, campaign_id=self.campaign_id, segment=segment, top=top, generation=generation
        )

    def fetch(self, *, low: float, low_inclusive: bool, high: float, limit: int) -> list[Candidate]:
        return list(
            coupon_store.stream_unassigned(
                self.db,
                campaign_id=self.campaign_id,
                low=low,
                low_inclusive=low_inclusive,
                high=high,
                limit=limit,
            )
        )
