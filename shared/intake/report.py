"""An import's report: every row it did not take as it was (invalid, duplicate) and every code it
took with a warning (one a spreadsheet would run as a formula), with its line, written to the
bucket as the rows are found. The job keeps counts and the first rows; the report has them all,
in bounded memory (streamed 1 MiB at a time)."""

from __future__ import annotations

import csv
import threading
from typing import TextIO

from shared.gcp import storage as storage_objects
from shared.gcp.storage import StorageClient
from shared.intake.csv_rows import FORMULA_PREFIXES, report_value, spreadsheet_safe

COLUMNS = ("line", "reason", "value")


def formula_warning(code: str) -> str | None:
    """Why an imported code deserves a warning, or None."""
    if code.startswith(FORMULA_PREFIXES):
        return (
            f"imported, but it starts with {code[0]!r}: a spreadsheet opening a list of these "
            "codes would run it as a formula (codedrop's exports write it as text)"
        )
    return None


class RowReport:
    """Rows reported by the reader and by the importer's committing threads, in one CSV object
    written only if there is something to report."""

    def __init__(self, storage: StorageClient, *, bucket: str, name: str, job_id: str) -> None:
        self._storage = storage
        self._bucket = bucket
        self._name = name
        self._job_id = job_id
        self._lock = threading.Lock()
        self._file: TextIO | None = None
        self._out: csv.DictWriter[str] | None = None
        self.rows = 0

    def add(self, line: int, reason: str, value: str) -> None:
        with self._lock:
            if self._file is None:
                self._file = storage_objects.open_text_writer(
                    self._storage,
                    bucket=self._bucket,
                    name=self._name,
                    metadata={"codedrop-import-job": self._job_id},
                )
                self._out = csv.DictWriter(self._file, COLUMNS, lineterminator="\r\n")
                self._out.writeheader()
            assert self._out is not None
            self._out.writerow(
                {"line": line, "reason": spreadsheet_safe(reason), "value": report_value(value)}
            )
            self.rows += 1

    def close(self) -> str | None:
        """Finish the object; its gs:// URI, or None when nothing was reported."""
        with self._lock:
            if self._file is None:
                return None
            self._file.close()
            return f"gs://{self._bucket}/{self._name}"
