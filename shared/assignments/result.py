"""The result file of an assignment job: `recipient,code`, then the carried columns.

It is streamed to a temporary object as results come (the email tool must never see half a
file) and moved to `assignments/{campaign_id}/{name}.result.csv` when the job ends. The
temporary name does not end in `.csv`, so its own object-finalized event is ignored. Every cell
is safe to open in a spreadsheet (recipients.result_cell).
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TextIO

from shared.assignments.recipients import RecipientRow, result_cell
from shared.gcp import storage as storage_objects
from shared.gcp.storage import StorageClient

log = logging.getLogger(__name__)

JOB_METADATA = "codedrop-assignment-job"


class ResultFile:
    def __init__(self, storage: StorageClient, *, bucket: str, name: str, job_id: str) -> None:
        self._storage = storage
        self._bucket = bucket
        self.name = name
        self._temporary = f"{name}.{job_id}.partial"
        self._job_id = job_id
        self._out: TextIO | None = None
        self._writerow: Callable[[Iterable[str]], object] | None = None
        self.rows = 0

    @property
    def uri(self) -> str:
        return f"gs://{self._bucket}/{self.name}"

    def start(self, columns: Sequence[str]) -> None:
        """Open the temporary object and write the header (once)."""
        if self._writerow is not None:
            return
        self._out = storage_objects.open_text_writer(
            self._storage,
            bucket=self._bucket,
            name=self._temporary,
            metadata={JOB_METADATA: self._job_id},
        )
        self._writerow = csv.writer(self._out).writerow
        self._writerow(["recipient", "code", *(result_cell(c) for c in columns)])

    def write(self, row: RecipientRow, code: str) -> None:
        if self._writerow is None:
            raise RuntimeError("start() the result file first")
        self._writerow(
            [result_cell(row.recipient), result_cell(code), *map(result_cell, row.carried)]
        )
        self.rows += 1

    def publish(self, columns: Sequence[str]) -> str:
        """Finish the upload and put the file under its final name; its gs:// URI."""
        self.start(columns)  # a list without a single row still gets its header
        if self._out is not None:
            self._out.close()
            self._out = None
        storage_objects.move_object(
            self._storage, bucket=self._bucket, source=self._temporary, destination=self.name
        )
        return self.uri

    def abandon(self) -> None:
        """The job stopped half-way: drop the temporary object (its next attempt writes the
        whole file again)."""
        if self._out is None:
            return
        try:
            self._out.close()  # the library finishes the upload on close; then it is deleted
        except Exception:  # a failed upload leaves nothing to delete
            log.warning("closing a partial result failed", exc_info=True)
        self._out = None
        storage_objects.delete_if_exists(self._storage, bucket=self._bucket, name=self._temporary)
