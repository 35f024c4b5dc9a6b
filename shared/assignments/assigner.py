"""Giving recipients codes in large atomic batches, several in flight at once.

Each recipient's code is assigned as a claim is (shared/claims/store.commit_claim): the coupon
updated guarded by the update time it was read with, and the recipient's claim slot
`claims/{identity_key}-0` created, in one atomic commit. A batch commits up to 249 such pairs
plus its `codes.assigned` event in the outbox (at most 500 writes), so the count reaches the
counters exactly once however the job ends: the event is committed with the codes it counts.

A batch fails whole on one conflict. Then its slots and coupons are read back in one call and
settled: a recipient whose slot exists holds a code already (this job's own, at this line: an
earlier attempt of the job, counted as assigned; at another line: a repeat in the file;
anything else: already held); a coupon changed since it was read was taken by someone else and
is dropped; coupons still free go back to the supply. The rest is committed again. While batches
keep meeting existing slots (a re-upload, a resumed attempt) the next batch reads its slots
before committing instead of failing first.

Results come back in line order, batch after batch, so the caller can stream them to the result
file; memory stays flat: one batch filling, a bounded number in flight.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.assignments.recipients import RecipientRow
from shared.assignments.supply import CandidateSupply
from shared.claims.store import claim_id_for
from shared.coupons.store import Candidate, CouponState
from shared.events.models import COMMIT_COUNT, CodesAssigned, assigned_event_id
from shared.gcp import writes
from shared.gcp.firestore import Snapshot, claims_collection, coupons_collection
from shared.gcp.in_flight import InFlight
from shared.ratelimit.pacing import WriteLimiter
from shared.types import Tally

log = logging.getLogger(__name__)

# A batch whose items keep being taken from under it is settled and committed again; after this
# many refusals something is badly wrong (the job fails and its event is delivered again).
MAX_ROUNDS = 16
# The slot a bulk assignment fills: one code per recipient, whatever max_per_user allows the
# landing page, so a re-upload never hands out a second one.
SLOT = 0


class Outcome(StrEnum):
    ASSIGNED = "assigned"  # a code given by this job
    HELD = "already_held"  # the recipient held a code before this job
    DUPLICATE = "duplicate"  # the recipient appears earlier (or later) in the file
    UNASSIGNED = "unassigned"  # no code left


@dataclass(frozen=True, slots=True)
class RowOutcome:
    row: RecipientRow
    outcome: Outcome
    code: str | None = None


class EventSink(Protocol):
    """Where a batch's event goes: into the batch's commit (the outbox), then out to Pub/Sub."""

    def stage(self, batch: firestore.WriteBatch, event: Any, *, now: datetime) -> None: ...

    def deliver_staged(self, staged: Sequence[Any]) -> int: ...


@dataclass
class AssignerMetrics(Tally):
    batches: int = 0
    commits: int = 0
    conflicts: int = 0  # commits refused: a slot existed or a coupon was taken meanwhile
    transient: int = 0
    settled_reads: int = 0  # documents read back to settle a batch (or before committing it)
    coupons_taken_elsewhere: int = 0


Pair = tuple[RecipientRow, Candidate]


def claim_fields(
    *, campaign_id: str, row: RecipientRow, candidate: Candidate, now: datetime, job_id: str
) -> dict[str, Any]:
    """The recipient's claim document: a final (not held) ClaimRecord's fields, built as a
    plain dict (a model per row costs more than the rest of the row's Python), plus `job_id`
    and `line`, so a later attempt of the job recognises its own rows. No `sweep_bucket`: the
    sweep re-publishes single claims, and these are counted by their commit's event."""
    return {
        "campaign_id": campaign_id,
        "user_id": row.identity,
        "coupon_id": candidate.coupon_id,
        "code": candidate.code,
        "slot": SLOT,
        "claimed_at": now,
        "idempotency_key": None,
        "state": CouponState.CLAIMED.value,
        "expires_at": None,
        "redeemed_at": None,
        "order_id": None,
        "job_id": job_id,
        "line": row.line,
    }


def coupon_claimed_fields(*, row: RecipientRow, claim_id: str, now: datetime) -> dict[str, Any]:
    """A coupon given to a recipient: claimed for good, as a landing page's final claim."""
    return {
        "assigned": True,
        "state": CouponState.CLAIMED.value,
        "assigned_to": row.identity,
        "claim_id": claim_id,
        "assigned_at": now,
        "expires_at": None,
    }


@dataclass(kw_only=True, eq=False)
class BulkAssigner:
    db: firestore.Client
    campaign_id: str
    job_id: str
    supply: CandidateSupply
    events: EventSink
    emit: Callable[[Sequence[RowOutcome]], None]
    batch_size: int
    parallel_commits: int
    limiter: WriteLimiter
    clock: Callable[[], datetime]
    # Read slots before committing: on for a resumed attempt, then while slots keep turning
    # up (a re-upload) and off again once a batch finds none.
    read_first: bool = False
    metrics: AssignerMetrics = field(init=False, default_factory=AssignerMetrics)

    def __post_init__(self) -> None:
        self._coupons = coupons_collection(self.db, self.campaign_id)
        self._claims = claims_collection(self.db, self.campaign_id)
        # Each pair's two writes are built and sent as raw protobufs (shared/gcp/writes),
        # skipping the library's proto-plus wrappers and their CPU per write.
        self._coupon_prefix = writes.document_prefix(self._coupons)
        self._claim_prefix = writes.document_prefix(self._claims)
        self._batches = InFlight[list[RowOutcome]](
            self.parallel_commits, name="assign", collect=self.emit
        )
        self._chunk: dict[str, RecipientRow] = {}
        self._repeats: list[RecipientRow] = []

    def add(self, row: RecipientRow) -> None:
        if row.key in self._chunk:
            self._repeats.append(row)  # settled with its batch, so results stay in order
            return
        self._chunk[row.key] = row
        if len(self._chunk) >= self.batch_size:
            self._submit()

    def finish(self) -> None:
        """Assign what is left and hand every result on; re-raises a batch's failure."""
        try:
            self._batches.finish(self._submit)
        finally:
            self.supply.close()

    def abandon(self) -> None:
        """The job stops half-way: let running batches end (what they commit is recognised by
        the next attempt), start no other."""
        self._batches.stop()
        self.supply.close()

    def _submit(self) -> None:
        if not self._chunk and not self._repeats:
            return
        rows, repeats = list(self._chunk.values()), self._repeats
        self._chunk, self._repeats = {}, []
        self._batches.submit(lambda: self._assign(rows, repeats))

    # --- one batch ------------------------------------------------------------------------
    def _assign(self, rows: list[RecipientRow], repeats: list[RecipientRow]) -> list[RowOutcome]:
        self.metrics.add(batches=1)
        outcomes = [RowOutcome(row, Outcome.DUPLICATE) for row in repeats]
        pending = self._without_holders(rows, outcomes) if self.read_first else rows
        refused = 0
        while pending:
            candidates = self.supply.take(len(pending))
            if not candidates:
                # The pool is empty: whoever has no code yet gets none.
                left = self._without_holders(pending, outcomes)
                outcomes += [RowOutcome(row, Outcome.UNASSIGNED) for row in left]
                break
            pairs = list(zip(pending, candidates, strict=False))
            still = self._commit_round(pairs, outcomes)
            refused = 0 if still is None else refused + 1
            if refused > MAX_ROUNDS:
                raise RuntimeError(f"a batch was refused {refused} times in a row")
            pending = (still or []) + pending[len(pairs) :]
        return sorted(outcomes, key=lambda o: o.row.line)

    def _commit_round(
        self, pairs: list[Pair], outcomes: list[RowOutcome]
    ) -> list[RecipientRow] | None:
        """Commit the pairs: None when committed, else the rows still to be assigned."""
        candidates = [candidate for _, candidate in pairs]
        try:
            codes = self._commit(pairs)
        except (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound):
            # NotFound: a coupon was deleted since it was read; settled like one taken.
            self.metrics.add(commits=1, conflicts=1)
            return self._settle(pairs, outcomes)
        except writes.TRANSIENT as exc:
            # Nothing was written (or, after a deadline, maybe all: the next round recognises
            # this job's own slots).
            self.metrics.add(commits=1, transient=1)
            log.warning("assignment batch failed transiently", extra={"error": repr(exc)})
            self.supply.give_back(candidates)
            time.sleep(random.uniform(0.05, 0.2))
            return [row for row, _ in pairs]
        self.supply.settle(candidates)
        self.metrics.add(commits=1)
        outcomes += [RowOutcome(row, Outcome.ASSIGNED, code) for row, code in codes]
        return None

    def _commit(self, pairs: list[Pair]) -> list[tuple[RecipientRow, str]]:
        now = self.clock()
        batch = self.db.batch()
        pbs = []
        for row, candidate in pairs:
            claim_id = claim_id_for(row.key, SLOT)
            pbs.append(
                writes.update(
                    self._coupon_prefix + candidate.coupon_id,
                    coupon_claimed_fields(row=row, claim_id=claim_id, now=now),
                    last_update_time=candidate.read_at,
                )
            )
            fields = claim_fields(
                campaign_id=self.campaign_id,
                row=row,
                candidate=candidate,
                now=now,
                job_id=self.job_id,
            )
            if row is pairs[0][0]:
                # The commit's first claim records its size: count_usage checks the event by it.
                fields[COMMIT_COUNT] = len(pairs)
            pbs.append(writes.create(self._claim_prefix + claim_id, fields))
        writes.add_writes(batch, pbs)
        first = pairs[0][0]
        event = CodesAssigned(
            # One commit per first line succeeds (its slot is created once), in any attempt.
            event_id=assigned_event_id(self.job_id, first.line),
            campaign_id=self.campaign_id,
            occurred_at=now,
            count=len(pairs),
            job_id=self.job_id,
            claim_id=claim_id_for(first.key, SLOT),
        )
        self.events.stage(batch, event, now=now)
        self.limiter.acquire(2 * len(pairs) + 1)
        writes.commit(batch)
        self.events.deliver_staged([event])
        return [(row, candidate.code) for row, candidate in pairs]

    def _settle(self, pairs: list[Pair], outcomes: list[RowOutcome]) -> list[RecipientRow]:
        """After a refused commit: settle recipients holding a code, drop coupons taken
        elsewhere, give free coupons back; the rows still to be assigned."""
        slots = [self._claims.document(claim_id_for(row.key, SLOT)) for row, _ in pairs]
        coupons = [self._coupons.document(candidate.coupon_id) for _, candidate in pairs]
        found = self._read([*slots, *coupons])
        still: list[RecipientRow] = []
        free: list[Candidate] = []
        taken: list[Candidate] = []
        for (row, candidate), slot, coupon in zip(pairs, slots, coupons, strict=True):
            held = found[slot.path]
            if held.exists:
                outcomes.append(self._holder(row, held))
            else:
                still.append(row)
            if found[coupon.path].update_time == candidate.read_at:
                free.append(candidate)
            else:
                taken.append(candidate)
        if len(still) < len(pairs):
            self.read_first = True
        self.metrics.add(coupons_taken_elsewhere=len(taken))
        self.supply.settle(taken, taken_elsewhere=len(taken))
        self.supply.give_back(free)
        return still

    def _without_holders(
        self, rows: list[RecipientRow], outcomes: list[RowOutcome]
    ) -> list[RecipientRow]:
        """Settle the rows whose recipient holds a code (one read each); the others."""
        slots = [self._claims.document(claim_id_for(row.key, SLOT)) for row in rows]
        found = self._read(slots)
        rest = []
        for row, slot in zip(rows, slots, strict=True):
            held = found[slot.path]
            if held.exists:
                outcomes.append(self._holder(row, held))
            else:
                rest.append(row)
        self.read_first = len(rest) < len(rows)
        return rest

    def _read(self, refs: list[firestore.DocumentReference]) -> dict[str, Snapshot]:
        self.metrics.add(settled_reads=len(refs))
        return {s.reference.path: s for s in self.db.get_all(refs)}

    def _holder(self, row: RecipientRow, slot: Snapshot) -> RowOutcome:
        data = slot.to_dict() or {}
        if data.get("job_id") == self.job_id:
            if data.get("line") == row.line:
                # Committed by an earlier attempt of this job (or a commit whose answer was lost).
                return RowOutcome(row, Outcome.ASSIGNED, data.get("code"))
            return RowOutcome(row, Outcome.DUPLICATE)
        return RowOutcome(row, Outcome.HELD, data.get("code"))
