"""What the fair-drop routes answer (docs/fair-drops.md). Nothing here names a person: entries
are their ids, admissions their entry id (or nothing, for later arrivals)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from shared.types import RequestBody, UtcTime


class DrawState(StrEnum):
    SCHEDULED = "scheduled"  # the commitment is published; the pre-queue is not open yet
    OPEN = "open"  # shoppers join
    DRAWING = "drawing"  # the start has passed: the list is being frozen
    FROZEN = "frozen"  # the digest is published; the seed is being revealed
    DRAWN = "drawn"  # the seed is revealed: every place can be recomputed


class EntryCreate(RequestBody):
    """Joining takes no fields; unknown ones are refused rather than silently ignored."""


class EntryPublic(BaseModel):
    entry_id: str
    # Once drawn: the entry's place (1 first); null before the start.
    place: int | None = None


class Fairness(BaseModel):
    campaign_id: str
    state: DrawState
    algorithm: str
    seed_commitment: str
    pre_queue_opens_at: UtcTime
    starts_at: UtcTime
    entries: int | None = None  # from the freeze
    entries_digest: str | None = None  # from the freeze
    seed: str | None = None  # hex, once revealed (after the start)


class PlacedEntry(BaseModel):
    entry_id: str
    place: int


class FairnessEntries(BaseModel):
    entries: list[PlacedEntry]
    next_page_token: str | None


class AdmissionPublic(BaseModel):
    """One identity's first admission: an entrant's entry id and place, or a later arrival's
    (no id). `released`: the places the room had reached then (all of them for a later
    arrival, if the draw went first)."""

    entry_id: str | None
    place: int | None
    admitted_at: float  # epoch seconds, the admitting instance's clock
    released: int


class FairnessAdmissions(BaseModel):
    admissions: list[AdmissionPublic]
    next_page_token: str | None


class PageQuery(RequestBody):
    page_token: str | None = Field(default=None, max_length=64, pattern=r"^[0-9a-f]{1,64}$")


class Transparency(BaseModel):
    campaign_id: str
    codes_available: int
    entries: int
    admitted: int
    claimed: int
    refused: dict[str, int]
    queue_seconds_p50: float | None
    queue_seconds_p95: float | None
