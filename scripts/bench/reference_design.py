"""The baseline of the claim benchmark (scripts/bench/claims.py): the reference article's claim,
ported to Python.

The reference article ("How I Built a Zero-Duplicate Coupon System") claims a coupon like this,
and this module does exactly the same with google-cloud-firestore. It is NOT project code: it
exists so the benchmark can show, in the same run and on the same emulator, why codedrop's claim
deviates from "query inside a transaction".

1. Outside any transaction, the per-user check: query coupons where assigned_to == user and
   assigned == true, limit 1; if one is found, return it (the article's early return).
2. Cut [0, 1) into 10 ranges and shuffle them (Fisher-Yates, as the article writes it).
3. For each range, a transaction (the client's own retry loop, 5 attempts, like runTransaction)
   that queries unassigned coupons of the range ordered by random_float, limit 5, INSIDE the
   transaction; re-reads the first one by reference; if it is taken, re-reads the other four one
   by one; updates the first free one (assigned, assigned_to, ...).
4. A contention error (Aborted, or the client's ValueError "Failed to commit transaction in N
   attempts" wrapping it) moves on to the next range; any other error bubbles up.
5. None (here: SOLD_OUT) when every range failed.

One difference of the clients, not of the port: the Node SDK's runTransaction retries the whole
body on ABORTED, while the Python client retries only an aborted commit; a lock timeout on a read
inside the body reaches the caller at once, and the article's catch then moves to the next range.

Field names are the project's (random_float, assigned, assigned_to, claim_id, assigned_at), in the
coupons subcollection of a campaign of its own, so the benchmark can check the result the same
way. The only addition is `stop_at`: once the benchmark's time cap has passed, a request that is
still running stops before its next range and is reported as cut off (not answered).
"""

from __future__ import annotations

import math
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.gcp.firestore import coupons_collection

RANGE_COUNT = 10
FALLBACK_POOL = 5  # the article's .limit(5)

CREATED, HELD, SOLD_OUT, CUT = "created", "held", "SOLD_OUT", "CUT"


class ReferenceCounters:
    """How the reference claim's transactions went, safe to add to from any thread:

    claims; user_checks (the per-user query outside the transaction); transactions (range
    transactions started, one per range tried); attempts (runs of the transaction body, client
    retries included); commit_attempts (attempts whose body finished and went on to commit);
    transactions_done (committed, with or without a write); read_aborts (Aborted raised by a read
    inside the transaction: a lock timeout); gave_up_ranges (ranges abandoned on contention).

    Documents read and written are counted by the benchmark where the client sends its RPCs
    (devkit/firestore_rpcs.py).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, **deltas: int) -> None:
        with self._lock:
            self._counts.update(deltas)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


@dataclass(frozen=True, slots=True)
class ReferenceAnswer:
    outcome: str  # created, held, SOLD_OUT, CUT
    code: str | None


def shuffled_ranges(rng: random.Random) -> list[tuple[float, float]]:
    """The article's generateShuffledRanges(), Fisher-Yates included."""
    ranges = [(i / RANGE_COUNT, (i + 1) / RANGE_COUNT) for i in range(RANGE_COUNT)]
    for i in range(len(ranges) - 1, 0, -1):
        j = math.floor(rng.random() * (i + 1))
        ranges[i], ranges[j] = ranges[j], ranges[i]
    return ranges


def is_contention_error(exc: BaseException) -> bool:
    """Aborted (a lock timeout on a read, or a commit that lost), or the client's ValueError
    raised when every commit attempt aborted."""
    if isinstance(exc, gexc.Aborted):
        return True
    return isinstance(exc, ValueError) and (
        isinstance(exc.__cause__, gexc.Aborted)
        or str(exc).startswith("Failed to commit transaction")
    )


class ReferenceClaimer:
    """dbClaimRandomCoupon() of the article for one campaign; safe to share between threads."""

    def __init__(
        self, db: firestore.Client, campaign_id: str, *, rng: random.Random | None = None
    ) -> None:
        self._db = db
        self._coupons = coupons_collection(db, campaign_id)
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()
        self.counters = ReferenceCounters()

    def claim(self, user_id: str, *, stop_at: float | None = None) -> ReferenceAnswer:
        self.counters.add(claims=1, user_checks=1)
        # First, check if the user already has a coupon (outside any transaction).
        existing = list(
            self._coupons.where(filter=FieldFilter("assigned_to", "==", user_id))
            .where(filter=FieldFilter("assigned", "==", True))
            .limit(1)
            .stream()
        )
        if existing:
            return ReferenceAnswer(HELD, (existing[0].to_dict() or {}).get("code"))

        with self._rng_lock:
            ranges = shuffled_ranges(self._rng)
        for range_start, range_end in ranges:
            if stop_at is not None and time.perf_counter() >= stop_at:
                return ReferenceAnswer(CUT, None)
            self.counters.add(transactions=1)
            # runTransaction(): a fresh transaction and a fresh retry wrapper per call (the
            # wrapper keeps the transaction ids, so one shared between threads would mix them).
            run = firestore.transactional(self._try_claim_from_range)
            try:
                code: str | None = run(self._db.transaction(), range_start, range_end, user_id)
            except (gexc.Aborted, ValueError) as exc:
                if is_contention_error(exc):
                    self.counters.add(
                        gave_up_ranges=1, read_aborts=int(isinstance(exc, gexc.Aborted))
                    )
                    continue  # try the next range
                raise
            self.counters.add(transactions_done=1)
            if code is not None:
                return ReferenceAnswer(CREATED, code)
        # All ranges exhausted.
        return ReferenceAnswer(SOLD_OUT, None)

    def _try_claim_from_range(
        self,
        transaction: firestore.Transaction,
        range_start: float,
        range_end: float,
        user_id: str,
    ) -> str | None:
        """tryClaimFromRange(): the body of one transaction attempt."""
        self.counters.add(attempts=1)
        query = (
            self._coupons.where(filter=FieldFilter("assigned", "==", False))
            .where(filter=FieldFilter("random_float", ">=", range_start))
            .where(filter=FieldFilter("random_float", "<", range_end))
            .order_by("random_float")
            .limit(FALLBACK_POOL)
        )
        # Query for unassigned coupons within this range, inside the transaction.
        docs = list(transaction.get(query))
        if not docs:
            self.counters.add(commit_attempts=1)
            return None

        # Re-read the first one within the transaction to detect conflicts.
        first = docs[0]
        snapshot = first.reference.get(transaction=transaction)
        if not snapshot.exists or (snapshot.to_dict() or {}).get("assigned") is True:
            # Already claimed: try the fallback coupons.
            for alternative in docs[1:]:
                alt_snapshot = alternative.reference.get(transaction=transaction)
                if alt_snapshot.exists and (alt_snapshot.to_dict() or {}).get("assigned") is False:
                    self._assign(transaction, alternative.reference, user_id)
                    return _code(alternative)
            self.counters.add(commit_attempts=1)
            return None  # all fallbacks claimed

        self._assign(transaction, first.reference, user_id)
        return _code(first)

    def _assign(
        self, transaction: firestore.Transaction, ref: firestore.DocumentReference, user_id: str
    ) -> None:
        transaction.update(
            ref,
            {
                "assigned": True,
                "assigned_to": user_id,
                "claim_id": uuid.uuid4().hex,
                "assigned_at": datetime.now(UTC),
            },
        )
        self.counters.add(commit_attempts=1)


def _code(snapshot: Any) -> str | None:
    code = (snapshot.to_dict() or {}).get("code")
    return str(code) if code is not None else None


class ReferenceCheck(TypedDict):
    codes_total: int
    assigned: int
    unassigned: int
    users_holding_codes: int
    users_with_two_codes: int
    max_codes_per_user: int
    codes_answered_twice: int
    answers_not_in_db: int


def check_reference(
    db: firestore.Client, *, campaign_id: str, created: Iterable[tuple[str, str | None]]
) -> ReferenceCheck:
    """Read the reference campaign back: who holds what, against what the claims answered.

    `created` is (user_id, code) for every answer that said a new code was assigned.
    """
    coupons = {
        s.id: s.to_dict() or {}
        for s in coupons_collection(db, campaign_id)
        .select(["code", "assigned", "assigned_to"])
        .stream()
    }
    holder_by_code = {
        str(c.get("code")): c.get("assigned_to") for c in coupons.values() if c.get("assigned")
    }
    per_user = Counter(holder_by_code.values())
    answered = list(created)
    answered_codes = Counter(code for _, code in answered)
    return ReferenceCheck(
        codes_total=len(coupons),
        assigned=len(holder_by_code),
        unassigned=len(coupons) - len(holder_by_code),
        users_holding_codes=len(per_user),
        users_with_two_codes=sum(1 for n in per_user.values() if n >= 2),
        max_codes_per_user=max(per_user.values(), default=0),
        codes_answered_twice=sum(1 for n in answered_codes.values() if n > 1),
        answers_not_in_db=sum(
            1 for user, code in answered if code is None or holder_by_code.get(code) != user
        ),
    )
