"""The claim engine: give a shopper a code of their own, under any concurrency.

Invariants: no code to two shoppers (guarded commit), never more than the pool (a coupon is
assigned once), never more than the campaign allows a shopper (claim slots created in the same
commit), never SOLD_OUT while an unassigned code exists (proof query + guarded campaign write),
and a retry or double click gets the code already held.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.campaigns import store as campaign_store
from shared.campaigns.live import LiveCampaigns, Version, version_of
from shared.campaigns.models import CampaignRecord, CampaignStatus
from shared.claims import store as claim_store
from shared.claims.candidate_pool import CandidatePool, Exhausted, PoolTimeout
from shared.claims.events import ClaimEvents
from shared.claims.models import ClaimRecord
from shared.claims.store import Hold
from shared.claims.supply import FirestoreSupply
from shared.clock import utcnow
from shared.coupons import store as coupon_store
from shared.coupons.store import Candidate
from shared.errors import CampaignNotActive, Contended, SoldOut
from shared.gcp import writes
from shared.gcp.batched_reads import ReadCoalescer
from shared.settings import Settings
from shared.types import Tally

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    claim: ClaimRecord
    # True: a new code was assigned by this request (or it replays one with the same
    # Idempotency-Key); False: the shopper already held every code the campaign allows.
    created: bool
    campaign: CampaignRecord  # the record the answer was decided on

    @property
    def valid_until(self) -> datetime | None:
        """Until when the code may be redeemed, as redemption will judge it."""
        return self.campaign.valid_until(self.claim.claimed_at)


@dataclass
class _Attempt:
    """One claim request on its way through the pool."""

    campaign: CampaignRecord
    user_id: str
    holder: str  # the key of the campaign's identity: what the per-user limit counts
    idempotency_key: str | None
    slot: int
    deadline: float


class _Retry(Enum):
    FREE = "free"  # lost a race to another instance: costs no attempt
    COUNTED = "counted"


@dataclass
class ClaimMetrics(Tally):
    """How the engine's claims went, for the benchmark and for logs. Firestore reads and
    writes are not counted here: benchmarks count them where the client sends them."""

    claims: int = 0
    commits: int = 0
    conflicts: int = 0  # guarded commit lost: the coupon was taken by another instance
    slot_taken: int = 0  # the shopper's slot existed: a double click
    transient: int = 0
    sold_out_answers: int = 0
    contended_answers: int = 0


class ClaimEngine:
    def __init__(
        self,
        *,
        db: firestore.Client,
        settings: Settings,
        clock: Callable[[], datetime] = utcnow,
        events: ClaimEvents | None = None,
    ) -> None:
        self._db = db
        self._events = events  # None: a sell-out is recorded, not announced (engine benchmarks)
        self._settings = settings
        self._clock = clock
        self._pools: dict[str, CandidatePool] = {}
        self._pools_lock = threading.Lock()
        self._campaigns = LiveCampaigns.on_firestore(
            db,
            max_age=settings.campaign_cache_seconds,
            trust_seconds=settings.campaign_listen_seconds,
        )
        self.metrics = ClaimMetrics()
        self._reader = ReadCoalescer(db=db)

    def pool(self, campaign_id: str) -> CandidatePool:
        with self._pools_lock:
            pool = self._pools.get(campaign_id)
            if pool is None:
                pool = CandidatePool(
                    supply=FirestoreSupply(db=self._db, campaign_id=campaign_id),
                    settings=self._settings,
                    clock=self._clock,
                )
                self._pools[campaign_id] = pool
            return pool

    def close(self) -> None:
        """Stop the campaign listeners (tests and benchmarks; an instance keeps them)."""
        self._campaigns.close()

    # --- reads --------------------------------------------------------------------------------
    def campaign(self, campaign_id: str) -> CampaignRecord:
        """The instance's copy of the campaign (shared/campaigns/live.py): kept current by a
        listener, so a pause, a window change or codes added after a sell-out take effect as
        soon as Firestore delivers them. Only a copy that says `sold_out` answers SOLD_OUT:
        this instance's proof alone never does."""
        return self._campaigns.get(campaign_id)[0]

    def _held(self, campaign: CampaignRecord, holder: str) -> list[ClaimRecord]:
        return claim_store.held_claims(
            self._reader, campaign_id=campaign.campaign_id, holder=holder, slots=campaign.slots
        )

    def _fresh_with_held(
        self, campaign_id: str, holder: str, slots: int
    ) -> tuple[CampaignRecord, list[ClaimRecord]]:
        """The campaign and the shopper's claims, read after this request arrived. Concurrent
        requests share the read (the campaign is fetched once for all of them)."""
        asked = time.monotonic()
        snapshot, held = claim_store.campaign_with_held_claims(
            self._reader, campaign_id=campaign_id, holder=holder, slots=slots
        )
        version = version_of(snapshot)
        self._campaigns.offer(campaign_id, version, read_at=asked)
        return version.existing(campaign_id)[0], held

    def sold_out(self, campaign: CampaignRecord) -> bool:
        """Recorded on the campaign as read, or proven by this instance's pool."""
        return campaign.sold_out or self.pool(campaign.campaign_id).sold_out

    # --- the claim ----------------------------------------------------------------------------
    def claim(
        self,
        campaign: CampaignRecord,
        *,
        user_id: str,
        holder: str,
        idempotency_key: str | None = None,
    ) -> ClaimOutcome:
        """Give `user_id` a code of `campaign` (the instance's copy, as `campaign()` read it).
        `holder` is the key the per-user limit counts (the campaign's identity,
        shared/claims/policy.py)."""
        # A request in progress: the instance has its CPU, its campaign listeners keep up.
        with self._campaigns.serving():
            return self._claim(campaign, user_id, holder, idempotency_key)

    def _claim(
        self, campaign: CampaignRecord, user_id: str, holder: str, idempotency_key: str | None
    ) -> ClaimOutcome:
        deadline = time.monotonic() + self._settings.claim_deadline_seconds
        self.metrics.add(claims=1)
        campaign_id = campaign.campaign_id
        pool = self.pool(campaign_id)
        held: list[ClaimRecord] | None = None

        if campaign.sold_out:
            # Recorded on the campaign as read at most campaign_cache_seconds ago: the answer
            # needs only the shopper's own slots (a holder gets their code back).
            held = self._held(campaign, holder)
        elif pool.sold_out:
            # Proven here, but this copy predates the record (or an import reopened the sale
            # since): read both afresh, together.
            campaign, held = self._fresh_with_held(campaign_id, holder, campaign.slots)
        elif idempotency_key is not None or campaign.max_per_user > 1:
            held = self._held(campaign, holder)
        # With one code per shopper and no key, slot 0 is the only slot: no read is needed
        # before the commit, whose create() of the slot tells whether the shopper holds it.
        if held is not None and (answer := _held_answer(held, campaign, idempotency_key)):
            return answer

        status = campaign.status_at(self._clock())
        if status not in (CampaignStatus.ACTIVE, CampaignStatus.SOLD_OUT):
            # Paused or ended: no new code, but a holder asking again (a retry, a double click,
            # with or without a key) gets the code already held.
            held = self._held(campaign, holder) if held is None else held
            if held:
                return _held_answer(held, campaign, idempotency_key) or ClaimOutcome(
                    claim=held[-1], created=False, campaign=campaign
                )
            raise CampaignNotActive(f"Campaign {campaign_id!r} is {status.value}.")
        pool.observe_generation(campaign.pool_generation, campaign.codes_total)
        if status is CampaignStatus.SOLD_OUT:
            self.metrics.add(sold_out_answers=1)
            raise SoldOut(f"Every code of campaign {campaign_id!r} has been claimed.")
        attempt = _Attempt(
            campaign=campaign,
            user_id=user_id,
            holder=holder,
            idempotency_key=idempotency_key,
            slot=_free_slot(held or []),
            deadline=deadline,
        )
        return self._claim_from_pool(attempt, pool)

    def _claim_from_pool(self, attempt: _Attempt, pool: CandidatePool) -> ClaimOutcome:
        campaign_id = attempt.campaign.campaign_id

        def prove(limit: int) -> Sequence[Candidate] | Exhausted:
            return self._prove_sold_out(campaign_id, pool, limit)

        attempts_left = self._settings.claim_attempts
        tried: Counter[str] = Counter()  # what each attempt met, logged if the claim gives up
        started, in_pool = time.monotonic(), 0.0
        while attempts_left > 0 and time.monotonic() < attempt.deadline:
            attempts_left -= 1
            waited = time.monotonic()
            try:
                candidate = pool.take(deadline=attempt.deadline, prove=prove)
            except PoolTimeout:
                tried["pool_timeout"] += 1
                break
            finally:
                in_pool += time.monotonic() - waited
            if candidate is None:
                # Proven and recorded: this instance found no unassigned code anywhere.
                campaign, held = self._fresh_with_held(
                    campaign_id, attempt.holder, attempt.campaign.slots
                )
                attempt.campaign = campaign  # the newest record decides from here on
                if held and len(held) >= campaign.max_per_user:
                    return ClaimOutcome(claim=held[-1], created=False, campaign=campaign)
                if campaign.sold_out:
                    self.metrics.add(sold_out_answers=1)
                    raise SoldOut(f"Every code of campaign {campaign_id!r} has been claimed.")
                pool.observe_generation(campaign.pool_generation, campaign.codes_total)
                continue
            outcome = self._commit(attempt, pool, candidate)
            if isinstance(outcome, ClaimOutcome):
                return outcome
            tried[outcome.value] += 1
            if outcome is _Retry.FREE:
                attempts_left += 1

        self.metrics.add(contended_answers=1)
        log.warning(
            "claim contended",
            extra={
                "campaign_id": campaign_id,
                "seconds": round(time.monotonic() - started, 3),
                "seconds_waiting_for_the_pool": round(in_pool, 3),
                "tried": dict(tried),
                "pool": pool.state(),
            },
        )
        raise Contended(retry_after=self._settings.contended_retry_after_seconds)

    def _commit(
        self, attempt: _Attempt, pool: CandidatePool, candidate: Candidate
    ) -> ClaimOutcome | _Retry:
        try:
            claim = claim_store.commit_claim(
                self._db,
                campaign_id=attempt.campaign.campaign_id,
                candidate=candidate,
                user_id=attempt.user_id,
                holder=attempt.holder,
                slot=attempt.slot,
                now=self._clock(),
                idempotency_key=attempt.idempotency_key,
                hold=self._hold(attempt.campaign),
            )
        except gexc.FailedPrecondition:
            pool.settle(candidate, taken_elsewhere=True)
            self.metrics.add(commits=1, conflicts=1)
            # A lost race costs one fast commit and no attempt: the deadline bounds these.
            return _Retry.FREE
        except gexc.AlreadyExists:
            pool.release(candidate)  # still free: the shopper's slot was the problem
            self.metrics.add(commits=1, slot_taken=1)
            held = self._held(attempt.campaign, attempt.holder)
            if answer := _held_answer(held, attempt.campaign, attempt.idempotency_key):
                return answer
            attempt.slot = _free_slot(held)
            return _Retry.COUNTED
        except writes.TRANSIENT as exc:
            pool.release(candidate)  # still free: the same request may try again
            self.metrics.add(commits=1, transient=1)
            log.warning("claim commit failed transiently", extra={"error": repr(exc)})
            time.sleep(random.uniform(0.005, 0.02))
            return _Retry.COUNTED
        pool.settle(candidate)
        self.metrics.add(commits=1)
        return ClaimOutcome(claim=claim, created=True, campaign=attempt.campaign)

    def _hold(self, campaign: CampaignRecord) -> Hold | None:
        if campaign.hold_seconds is None:
            return None
        return Hold(
            seconds=campaign.hold_seconds, bucket_seconds=self._settings.hold_bucket_seconds
        )

    def _prove_sold_out(
        self, campaign_id: str, pool: CandidatePool, limit: int
    ) -> Sequence[Candidate] | Exhausted:
        """Run when every segment is drained: look at the whole collection, and record sold_out
        guarded by the update time of the copy of the campaign it started from, so an import
        that landed since (it bumps the campaign) makes the write fail instead of lying,
        however old that copy. The look starts at a random pivot, so instances finding codes
        still in flight do not all find the same."""
        campaign, read_at = self._campaigns.get(campaign_id)
        if pool.observe_generation(campaign.pool_generation, campaign.codes_total):
            # Codes were imported or holds released since this pool last looked: its segments
            # open again, and find those codes without a scan of the whole collection.
            return Exhausted.LOOK_AGAIN
        if campaign.sold_out:
            return Exhausted.SOLD_OUT
        pivot = random.random()
        unassigned = functools.partial(
            coupon_store.stream_unassigned, self._db, campaign_id=campaign_id, limit=limit
        )
        found = list(unassigned(low=pivot)) or list(unassigned(high=pivot))
        if found:
            # Codes freed after the campaign was read (a release or an import committing in
            # between) are no miss of the ranges: their commit bumped the generation.
            if pool.observe_generation(self.campaign(campaign_id).pool_generation):
                return Exhausted.LOOK_AGAIN
            return found
        now = self._clock()
        written = campaign_store.mark_sold_out(
            self._db, campaign_id=campaign_id, read_at=read_at, now=now
        )
        if written is not None:
            # Guarded by the copy's update time: the document is that copy plus this write.
            marked = campaign.model_copy(update={"sold_out": True, "sold_out_at": now})
            self._campaigns.offer(campaign_id, Version(record=marked, update_time=written))
            log.info("campaign sold out", extra={"campaign_id": campaign_id})
            if self._events is not None:
                self._events.sold_out(campaign)
            return Exhausted.SOLD_OUT
        return Exhausted.LOOK_AGAIN


def _held_answer(
    held: list[ClaimRecord], campaign: CampaignRecord, idempotency_key: str | None
) -> ClaimOutcome | None:
    """The answer the shopper's own claims give: a replay of the same Idempotency-Key (201
    again), or the code already held when the campaign allows no more (200)."""
    if idempotency_key is not None:
        replay = next((c for c in held if c.idempotency_key == idempotency_key), None)
        if replay is not None:
            return ClaimOutcome(claim=replay, created=True, campaign=campaign)
    if len(held) >= campaign.max_per_user:
        return ClaimOutcome(claim=held[-1], created=False, campaign=campaign)
    return None


def _free_slot(held: list[ClaimRecord]) -> int:
    taken = {c.slot for c in held}
    return next(slot for slot in range(len(taken) + 1) if slot not in taken)
