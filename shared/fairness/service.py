"""Fair drops: a pre-queue whose entries are drawn at the start with a seed committed in
advance, admitted through the waiting room in place order (docs/fair-drops.md).

The draw is made by whichever instances first see the start, a piece at a time and without a
transaction over the list: each piece (a range of entry ids, shard) is stored once with create(),
so instances that make the same piece write the same thing and the second keeps the first's;
when every piece is stored, the digest is stored once, then the seed revealed. Every instance
then recomputes the places from what is stored (they follow from seed, digest and ids), keeps
them in memory, and the waiting room counts the drawn entries as one more instance's tickets.
"""

from __future__ import annotations

import logging
import math
import random
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from google.api_core.exceptions import GoogleAPIError
from google.cloud import firestore

from shared.campaigns.models import CampaignRecord, CampaignStatus
from shared.clock import utcnow
from shared.errors import CampaignNotActive, FairDropNotFound, RequestValidationFailed
from shared.fairness import store
from shared.fairness.draw import ALGORITHM, SHARDS, Draw, entries_digest, entry_id_for, order
from shared.fairness.models import (
    AdmissionPublic,
    DrawState,
    EntryPublic,
    Fairness,
    FairnessAdmissions,
    FairnessEntries,
    PlacedEntry,
    Transparency,
)
from shared.fairness.store import Admission, DropSecret, StoredDraw
from shared.types import Tally
from shared.usage.reading import UsageReader
from shared.waiting_room.service import DrawnQueue, RoomPass

log = logging.getLogger(__name__)

# The draw starts this long after the start, so that every join that was accepted before it
# has landed (a join's write gives up after store.JOIN_WRITE_TIMEOUT_SECONDS).
FREEZE_SECONDS = 3.0
# An instance that sees the draw unfinished works on it for about this long in one request.
WORK_SECONDS = 1.0
PAGE_SIZE = 1000
REFUSALS_FLUSH_SECONDS = 2.0
# An instance with no range of the draw to make looks for the others' this often.
CHECK_SECONDS = 2.0
TRANSPARENCY_CACHE_SECONDS = 30.0
# Statuses after which the transparency report is published.
_OVER = (CampaignStatus.ENDED, CampaignStatus.SOLD_OUT)


@dataclass
class DrawMetrics(Tally):
    """What this instance did for draws (the benchmark reads it)."""

    shards_made: int = 0
    entries_read: int = 0
    documents_read: int = 0
    documents_written: int = 0


@dataclass
class _Progress:
    """What an instance knows of a draw being made."""

    stored: dict[int, bytes] = field(default_factory=dict)  # range -> its packed entry ids
    leased: dict[int, float] = field(default_factory=dict)  # range -> when seen leased
    checked_at: float = -math.inf


@dataclass
class _Refusals:
    counts: dict[str, int]
    flushed_at: float = 0.0


class FairnessService:
    def __init__(
        self,
        *,
        db: firestore.Client,
        usage: UsageReader,
        tick_seconds: float,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._db = db
        self._usage = usage
        self._tick = tick_seconds
        self._clock = clock
        self._instance_id = uuid.uuid4().hex[:12]
        self._secrets: dict[str, DropSecret] = {}
        self._draws: dict[str, Draw] = {}
        self._progress: dict[str, _Progress] = {}
        self._working: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._admitted: set[tuple[str, str]] = set()
        self._refusals: dict[str, _Refusals] = {}
        self._reports: dict[str, tuple[float, Transparency]] = {}
        self.metrics = DrawMetrics()

    # --- entries ------------------------------------------------------------------------------
    def _secret(self, campaign: CampaignRecord) -> DropSecret:
        secret = self._secrets.get(campaign.campaign_id)
        if secret is None:
            secret = store.read_secret(self._db, campaign.campaign_id)
            if secret is None:
                raise FairDropNotFound(f"Campaign {campaign.campaign_id!r} has no pre-queue.")
            self._secrets[campaign.campaign_id] = secret
        return secret

    def entry_id(self, campaign: CampaignRecord, holder: str) -> str:
        return entry_id_for(self._secret(campaign).entry_key, holder)

    def join(self, campaign: CampaignRecord, holder: str) -> tuple[EntryPublic, bool]:
        """The identity's entry: a new one while the pre-queue is open (True), or the one it
        has (False). After the start, only the one it has."""
        opens_at = campaign.pre_queue_opens_at
        if opens_at is None:
            raise FairDropNotFound(f"Campaign {campaign.campaign_id!r} has no pre-queue.")
        now = self._clock()
        entry_id = self.entry_id(campaign, holder)
        if now >= campaign.starts_at:
            draw = self.draw(campaign)
            place = draw.place_of(entry_id) if draw is not None else None
            if place is None and not store.entry_exists(self._db, campaign.campaign_id, entry_id):
                raise CampaignNotActive(
                    "The pre-queue closed at the start: you queue through the waiting room."
                )
            return EntryPublic(entry_id=entry_id, place=place), False
        if now < opens_at:
            raise CampaignNotActive("The pre-queue is not open yet.")
        created = store.create_entry(self._db, campaign.campaign_id, entry_id, now)
        return EntryPublic(entry_id=entry_id), created

    # --- the draw -----------------------------------------------------------------------------
    def draw(self, campaign: CampaignRecord) -> Draw | None:
        """The drop's draw, once made (this instance works on it when it can)."""
        draw = self._draws.get(campaign.campaign_id)
        if draw is not None or campaign.pre_queue_opens_at is None:
            return draw
        if self._clock() < campaign.starts_at + timedelta(seconds=FREEZE_SECONDS):
            return None
        with self._lock:
            working = self._working.setdefault(campaign.campaign_id, threading.Lock())
        if not working.acquire(blocking=False):
            return None  # another request of this instance is at it
        try:
            return self._advance(campaign)
        except GoogleAPIError as exc:
            # The request that helped is told to retry like the others; a range it had leased
            # is taken over once the lease runs out.
            log.warning(
                "fair drop: the draw's work failed; it goes on at the next request",
                extra={"campaign_id": campaign.campaign_id, "error": repr(exc)},
            )
            return None
        finally:
            working.release()

    def _advance(self, campaign: CampaignRecord) -> Draw | None:
        campaign_id = campaign.campaign_id
        secret = self._secret(campaign)
        stored = store.read_draw(self._db, campaign_id)
        self.metrics.add(documents_read=1)
        if stored is None:
            progress = self._progress.setdefault(campaign_id, _Progress())
            if not self._make_ranges(campaign_id, progress):
                return None
            ids = store.all_shard_ids(progress.stored)
            drawn_at = self._clock().timestamp()
            store.create_draw(
                self._db,
                campaign_id,
                StoredDraw(
                    digest=entries_digest(ids), count=len(ids), drawn_at=drawn_at, seed=None
                ),
            )
            stored = store.read_draw(self._db, campaign_id)
            self.metrics.add(documents_read=1, documents_written=1)
            assert stored is not None  # created just now, or before by another instance
        if stored.seed is None:
            # The digest is out: only now may the seed be known.
            store.reveal_seed(self._db, campaign_id, secret.seed.hex())
            self.metrics.add(documents_written=1)
        shards = self._progress.setdefault(campaign_id, _Progress()).stored
        self._refresh(campaign_id, shards)
        ids = store.all_shard_ids(shards)
        if entries_digest(ids) != stored.digest:
            # Never expected: the stored pieces are the frozen list.
            log.error(
                "fair drop: stored shards do not match the digest",
                extra={"campaign_id": campaign_id},
            )
            return None
        draw = Draw(
            starts_at=campaign.starts_at.timestamp(),
            drawn_at=stored.drawn_at,
            digest=stored.digest,
            seed=secret.seed.hex(),
            by_place=order(secret.seed, stored.digest, ids),
        )
        self._draws[campaign_id] = draw
        self._progress.pop(campaign_id, None)
        log.info("fair drop drawn", extra={"campaign_id": campaign_id, "entries": draw.count})
        return draw

    def _refresh(self, campaign_id: str, stored: dict[int, bytes]) -> None:
        """Learn which ranges are stored (those known stay: they never change)."""
        missing = [shard for shard in range(SHARDS) if shard not in stored]
        if missing:
            stored.update(store.read_shards(self._db, campaign_id, missing))
            self.metrics.add(documents_read=len(missing))

    def _make_ranges(self, campaign_id: str, progress: _Progress) -> bool:
        """Make ranges of the list for about WORK_SECONDS; whether every range is stored.

        Ranges leased by others are left to them (until their lease could have run out), and
        what others stored is looked up after each range made here and every CHECK_SECONDS,
        so an instance with nothing to make costs one read a request."""
        now = time.monotonic()
        if now - progress.checked_at > CHECK_SECONDS:
            self._refresh(campaign_id, progress.stored)
            progress.checked_at = now
        free = [
            shard
            for shard in range(SHARDS)
            if shard not in progress.stored
            and now - progress.leased.get(shard, -math.inf) > store.LEASE_SECONDS
        ]
        # Instances take the ranges left in different orders, so they seldom want the same.
        random.shuffle(free)
        until = now + WORK_SECONDS
        for shard in free:
            if time.monotonic() > until:
                break
            if shard in progress.stored:
                continue
            if not store.lease_shard(self._db, campaign_id, shard, self._clock().timestamp()):
                progress.leased[shard] = time.monotonic()
                self.metrics.add(documents_read=1, documents_written=1)
                continue
            ids = store.shard_entry_ids(self._db, campaign_id, shard)
            progress.stored[shard] = store.write_shard(self._db, campaign_id, shard, ids)
            self.metrics.add(
                shards_made=1,
                entries_read=len(ids),
                documents_read=max(1, len(ids)),
                documents_written=2,  # the lease and the range
            )
            self._refresh(campaign_id, progress.stored)
            progress.checked_at = time.monotonic()
        return len(progress.stored) == SHARDS

    # --- admission ----------------------------------------------------------------------------
    def queue(self, campaign: CampaignRecord, holder: str) -> DrawnQueue:
        """What the waiting room needs for this shopper in a fair drop."""
        draw = self.draw(campaign)
        if draw is None:
            return DrawnQueue(share=None)
        place = draw.place_of(self.entry_id(campaign, holder))
        tick = self._tick
        return DrawnQueue(
            share=lambda threshold: draw.share(threshold, tick_seconds=tick),
            first_attempt=draw.first_attempt(place) if place is not None else None,
        )

    def entry_of(self, campaign: CampaignRecord, holder: str) -> dict[str, object]:
        """An entrant's entry id and drawn place, for the waiting room's answer ({} for anyone
        else, or before the draw)."""
        draw = self._draws.get(campaign.campaign_id)
        if draw is None:
            return {}
        entry_id = self.entry_id(campaign, holder)
        place = draw.place_of(entry_id)
        return {} if place is None else {"entry_id": entry_id, "place": place}

    def admitted(self, campaign: CampaignRecord, holder: str, room_pass: RoomPass) -> None:
        """Record the identity's first admission (once per instance; the store keeps the
        first of all instances)."""
        draw = self._draws.get(campaign.campaign_id)
        if draw is None or room_pass.first_attempt is None or room_pass.threshold is None:
            return
        key = self.entry_id(campaign, holder)
        if (campaign.campaign_id, key) in self._admitted:
            return
        place = draw.place_of(key)
        now = self._clock().timestamp()
        store.record_admission(
            self._db,
            campaign.campaign_id,
            Admission(
                key=key,
                place=place,
                queued_since=max(room_pass.first_attempt, draw.starts_at),
                admitted_at=now,
                released=draw.released(room_pass.threshold),
            ),
        )
        self._admitted.add((campaign.campaign_id, key))

    def refused(self, campaign: CampaignRecord, reason: str) -> None:
        """Count a claim refused in a fair drop (this instance's counts, saved every few
        seconds: the report counts every instance's)."""
        now = time.monotonic()
        with self._lock:
            tally = self._refusals.setdefault(campaign.campaign_id, _Refusals(counts={}))
            tally.counts[reason] = tally.counts.get(reason, 0) + 1
            if now - tally.flushed_at < REFUSALS_FLUSH_SECONDS:
                return
            tally.flushed_at = now
            counts = dict(tally.counts)
        store.save_refusals(self._db, campaign.campaign_id, self._instance_id, counts)

    # --- public views -------------------------------------------------------------------------
    def _drop(self, campaign: CampaignRecord) -> tuple[datetime, str]:
        if campaign.pre_queue_opens_at is None or campaign.seed_commitment is None:
            raise FairDropNotFound(f"Campaign {campaign.campaign_id!r} has no pre-queue.")
        return campaign.pre_queue_opens_at, campaign.seed_commitment

    def fairness(self, campaign: CampaignRecord) -> Fairness:
        opens_at, commitment = self._drop(campaign)
        now = self._clock()
        view = Fairness(
            campaign_id=campaign.campaign_id,
            state=DrawState.OPEN if now >= opens_at else DrawState.SCHEDULED,
            algorithm=ALGORITHM,
            seed_commitment=commitment,
            pre_queue_opens_at=opens_at,
            starts_at=campaign.starts_at,
        )
        if now < campaign.starts_at:
            return view
        draw = self.draw(campaign)
        if draw is not None:
            return view.model_copy(
                update={
                    "state": DrawState.DRAWN,
                    "entries": draw.count,
                    "entries_digest": draw.digest,
                    "seed": draw.seed,
                }
            )
        stored = store.read_draw(self._db, campaign.campaign_id)
        if stored is None:
            return view.model_copy(update={"state": DrawState.DRAWING})
        frozen = {"entries": stored.count, "entries_digest": stored.digest}
        return view.model_copy(update={"state": DrawState.FROZEN, **frozen})

    def _drawn(self, campaign: CampaignRecord) -> Draw:
        self._drop(campaign)
        draw = self.draw(campaign) if self._clock() >= campaign.starts_at else None
        if draw is None:
            raise CampaignNotActive("The entries are published once the draw is made.")
        return draw

    def entries(self, campaign: CampaignRecord, page_token: str | None) -> FairnessEntries:
        draw = self._drawn(campaign)
        offset = _offset(page_token)
        ids = draw.by_place[offset : offset + PAGE_SIZE]
        entries = [PlacedEntry(entry_id=e, place=offset + i + 1) for i, e in enumerate(ids)]
        end = offset + len(ids)
        return FairnessEntries(
            entries=entries, next_page_token=str(end) if end < draw.count else None
        )

    def admissions(self, campaign: CampaignRecord, page_token: str | None) -> FairnessAdmissions:
        self._drawn(campaign)
        page = list(
            store.iter_admissions(self._db, campaign.campaign_id, after=page_token, limit=PAGE_SIZE)
        )
        return FairnessAdmissions(
            admissions=[
                AdmissionPublic(
                    entry_id=a.key if a.place is not None else None,
                    place=a.place,
                    admitted_at=a.admitted_at,
                    released=a.released,
                )
                for a in page
            ],
            next_page_token=page[-1].key if len(page) == PAGE_SIZE else None,
        )

    def transparency(self, campaign: CampaignRecord) -> Transparency:
        self._drop(campaign)
        now = self._clock()
        if campaign.status_at(now) not in _OVER:
            raise CampaignNotActive("The transparency report is published after the drop.")
        cached = self._reports.get(campaign.campaign_id)
        if cached is not None and time.monotonic() - cached[0] < TRANSPARENCY_CACHE_SECONDS:
            return cached[1]
        draw = self.draw(campaign)
        waits: list[float] = []
        after: str | None = None
        while True:
            page = list(
                store.iter_admissions(self._db, campaign.campaign_id, after=after, limit=PAGE_SIZE)
            )
            waits.extend(max(0.0, a.admitted_at - a.queued_since) for a in page)
            if len(page) < PAGE_SIZE:
                break
            after = page[-1].key
        stats = self._usage.stats(campaign, now=now)
        report = Transparency(
            campaign_id=campaign.campaign_id,
            codes_available=campaign.codes_total,
            entries=draw.count if draw is not None else 0,
            admitted=len(waits),
            claimed=stats.claimed,
            refused=store.total_refusals(self._db, campaign.campaign_id),
            queue_seconds_p50=_percentile(waits, 50),
            queue_seconds_p95=_percentile(waits, 95),
        )
        self._reports[campaign.campaign_id] = (time.monotonic(), report)
        return report


def _offset(page_token: str | None) -> int:
    if page_token is None:
        return 0
    if not page_token.isdigit() or len(page_token) > 12:
        raise RequestValidationFailed("page_token is not one this API gave.")
    return int(page_token)


def _percentile(values: list[float], percent: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[percent - 1], 3)
