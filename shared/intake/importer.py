"""Writes codes into a campaign in large atomic batches, several in flight at once.

Each batch creates coupons (document id derived from the code, so a duplicate can never become a
second document) and bumps the campaign's pool generation in the same commit, which invalidates
any claimer's "sold out" proof. `create()` never touches an existing coupon, so a re-run can never
reset a claimed code. When a batch hits a code that exists, the batch is re-read and classified:
written by this very job at this very line (an earlier attempt of the same import: counted as
imported), by this job at another line (a duplicate within the file), or by anything else (a
duplicate already in the campaign). Memory stays flat: one batch being filled, a bounded number
in flight.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.campaigns.store import record_pool_growth
from shared.coupons.store import coupon_fields, coupon_id_for
from shared.errors import shown
from shared.gcp.firestore import coupons_collection
from shared.gcp.in_flight import InFlight
from shared.intake.csv_rows import CodeRow
from shared.ratelimit.pacing import WriteLimiter

log = logging.getLogger(__name__)

# A batch whose codes keep appearing under it (a concurrent import of the same codes) is
# re-read and retried; after this many rounds something is badly wrong.
MAX_ROUNDS = 8


@dataclass(frozen=True, slots=True)
class CaseDuplicate:
    """A row whose code another code matches but for letter case (codes are matched in any
    case, shared.codes): skipped as a duplicate, and reported, since the file spelt it apart."""

    row: CodeRow
    reason: str


# Told of each duplicate row: its line, why, and its code (called from the committing threads).
DuplicateSink = Callable[[int, str, str], None]


@dataclass
class ImportCounts:
    imported: int = 0
    duplicates_in_file: int = 0
    duplicates_in_campaign: int = 0
    case_duplicates: list[CaseDuplicate] = field(default_factory=list)

    def add(self, other: ImportCounts) -> None:
        self.imported += other.imported
        self.duplicates_in_file += other.duplicates_in_file
        self.duplicates_in_campaign += other.duplicates_in_campaign
        self.case_duplicates += other.case_duplicates

    def totals(self) -> dict[str, int]:
        return {
            "imported": self.imported,
            "duplicates_in_file": self.duplicates_in_file,
            "duplicates_in_campaign": self.duplicates_in_campaign,
        }


def _case_duplicate(row: CodeRow, other: str, where: str) -> CaseDuplicate | None:
    if other == row.code:
        return None  # the very same code: counted, not reported
    return CaseDuplicate(row, f"the same code as {shown(other)} {where} but for letter case")


@dataclass(kw_only=True, eq=False)
class CodeImporter:
    db: firestore.Client
    campaign_id: str
    job_id: str
    generated: bool
    batch_size: int
    parallel_commits: int
    limiter: WriteLimiter
    clock: Callable[[], datetime]
    on_duplicate: DuplicateSink | None = None
    # Of finished batches, plus duplicates seen in a chunk.
    counts: ImportCounts = field(init=False, default_factory=ImportCounts)

    def __post_init__(self) -> None:
        self._collection = coupons_collection(self.db, self.campaign_id)
        self._batches = InFlight[ImportCounts](
            self.parallel_commits, name="import", collect=self._collect
        )
        self._chunk: dict[str, CodeRow] = {}
        self._lock = threading.Lock()

    def add(self, row: CodeRow) -> None:
        coupon_id = coupon_id_for(row.code)
        if (first := self._chunk.get(coupon_id)) is not None:
            with self._lock:
                self.counts.duplicates_in_file += 1
                self._note_duplicate(
                    self.counts,
                    row,
                    first.code,
                    f"on line {first.line}",
                    plain=f"duplicate of line {first.line}",
                )
            return
        self._chunk[coupon_id] = row
        if len(self._chunk) >= self.batch_size:
            self._submit()

    def finish(self) -> ImportCounts:
        """Write what is left and wait for every batch; re-raises a batch's failure."""
        self._batches.finish(self._submit)
        return self.counts

    def _submit(self) -> None:
        if not self._chunk:
            return
        rows = list(self._chunk.items())
        self._chunk = {}
        self._batches.submit(lambda: self._write(rows))

    def _collect(self, result: ImportCounts) -> None:
        with self._lock:
            self.counts.add(result)

    def _write(self, rows: list[tuple[str, CodeRow]]) -> ImportCounts:
        counts = ImportCounts()
        pending = rows
        for _ in range(MAX_ROUNDS):
            if not pending:
                return counts
            now = self.clock()
            batch = self.db.batch()
            for coupon_id, row in pending:
                batch.create(
                    self._collection.document(coupon_id),
                    coupon_fields(code=row.code, now=now, job_id=self.job_id, line=row.line),
                )
            record_pool_growth(
                batch,
                self.db,
                campaign_id=self.campaign_id,
                added=len(pending),
                now=now,
                generated=self.generated,
            )
            self.limiter.acquire(len(pending) + 1)
            try:
                batch.commit()
            except gexc.AlreadyExists:
                pending = self._classify(pending, counts)
                continue
            except (gexc.Aborted, gexc.DeadlineExceeded, gexc.ServiceUnavailable) as exc:
                # Every batch also bumps the campaign document, so parallel batches can time out
                # on its lock. A failed atomic batch wrote nothing: the same batch is retried.
                log.warning("import batch contended; retrying", extra={"error": repr(exc)})
                time.sleep(random.uniform(0.05, 0.2))
                continue
            counts.imported += len(pending)
            return counts
        raise RuntimeError(f"codes kept colliding after {MAX_ROUNDS} rounds; retry the import")

    def _classify(
        self, rows: list[tuple[str, CodeRow]], counts: ImportCounts
    ) -> list[tuple[str, CodeRow]]:
        """Count the rows whose coupon exists; return the rest, still to be written."""
        refs = [self._collection.document(coupon_id) for coupon_id, _ in rows]
        existing = {
            s.id: s.to_dict() or {}
            for s in self.db.get_all(refs, field_paths=["job_id", "line", "code"])
            if s.exists
        }
        still_new = []
        for coupon_id, row in rows:
            found = existing.get(coupon_id)
            if found is None:
                still_new.append((coupon_id, row))
            elif found.get("job_id") == self.job_id and found.get("line") == row.line:
                counts.imported += 1  # written by an earlier attempt of this same import
            elif found.get("job_id") == self.job_id:
                counts.duplicates_in_file += 1
                self._note_duplicate(
                    counts,
                    row,
                    found["code"],
                    f"on line {found.get('line')}",
                    plain=f"duplicate of line {found.get('line')}",
                )
            else:
                counts.duplicates_in_campaign += 1
                self._note_duplicate(
                    counts,
                    row,
                    found["code"],
                    "already in the campaign",
                    plain="already in the campaign",
                )
        return still_new

    def _note_duplicate(
        self, counts: ImportCounts, row: CodeRow, other: str, where: str, *, plain: str
    ) -> None:
        """Report a skipped duplicate: as a case duplicate when only letter case sets the two
        apart (also kept with the job), else with its plain reason."""
        case = _case_duplicate(row, other, where)
        if case is not None:
            counts.case_duplicates.append(case)
        if self.on_duplicate is not None:
            self.on_duplicate(row.line, case.reason if case else plain, row.code)
