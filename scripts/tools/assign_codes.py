"""Upload a recipient list for a campaign and follow its assignment job to the end.

The file goes to assignments/{CAMPAIGN_ID}/{NAME} in the imports bucket (docs/contract.md, "The
bucket"): the object-finalized event starts the assignment job in import_codes. The
job id is derived from the uploaded object's generation exactly as the service derives it, and
the job is followed through admin_api (GET /v1/jobs/{job_id}) with a progress bar on stderr
until it is done or failed; a summary with the first invalid rows and the unassigned lines goes
to stdout, and with --output the result file (recipient, code, then the list's other columns)
is downloaded. The list needs a `recipient` column (a customer id, email or phone number, as
the campaign's identity says); a list of one column may omit the header.

Uploading, tokens, storage hosts and exit statuses work as for ./scripts/upload_codes (the two
share scripts/tools/upload_codes.py): 0 the job is done, 1 it failed, 2 no outcome.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from scripts.tools import upload_codes
from scripts.tools.upload_codes import (
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_NO_OUTCOME,
    SHOWN_ERRORS,
    NoOutcomeError,
    Options,
    Progress,
    UsageError,
    _n,
)
from shared.assignments.service import ASSIGNMENT_PATH, assignment_job_id

FOLDER = "assignments"


class AssignmentProgress(Progress):
    COUNTS = (
        ("assigned", "assigned"),
        ("already held", "already_held"),
        ("unassigned", "unassigned"),
        ("invalid", "invalid"),
    )


def _parser() -> argparse.ArgumentParser:
    parser = upload_codes._parser()
    parser.prog = "scripts/assign_codes"
    parser.description = __doc__
    for action in parser._actions:
        if action.dest == "name":
            action.help = "object name under assignments/CAMPAIGN_ID/ (default: the file's name)"
    parser.add_argument(
        "--output",
        type=Path,
        metavar="PATH",
        help="download the result file (recipient, code, the list's other columns) here",
    )
    return parser


def parse(argv: Sequence[str] | None) -> tuple[Options, Path | None]:
    parser = _parser()
    options = upload_codes.parse_options(
        argv, parser=parser, folder=FOLDER, pattern=ASSIGNMENT_PATH, purpose="assigned"
    )
    output: Path | None = parser.parse_args(argv).output
    return options, output


def summary(job: Mapping[str, Any], out: TextIO) -> None:
    rows: list[tuple[str, object]] = [
        ("source", job.get("source")),
        ("result", job.get("result") or "-"),
        ("rows read", _n(job.get("rows_read"))),
        ("assigned", _n(job.get("assigned"))),
        ("already held", _n(job.get("already_held"))),
        ("repeated", _n(job.get("duplicates_in_file"))),
        ("unassigned", _n(job.get("unassigned"))),
        ("invalid", _n(job.get("invalid"))),
    ]
    notes = []
    ranges = [r for r in job.get("unassigned_lines") or [] if isinstance(r, dict)]
    if ranges:
        shown = ", ".join(_lines(r) for r in ranges[:SHOWN_ERRORS])
        more = " …" if len(ranges) > SHOWN_ERRORS else ""
        notes.append(f"no code left for lines {shown}{more}")
    upload_codes.write_job(job, rows, out, width=12, notes=notes)


def _lines(span: Mapping[str, Any]) -> str:
    first, last = span.get("first"), span.get("last")
    return str(first) if first == last else f"{first}-{last}"


def download(options: Options, job: Mapping[str, Any], path: Path) -> None:
    from google.cloud.storage import Client

    uri = job.get("result")
    if not isinstance(uri, str):
        raise NoOutcomeError("the job wrote no result file")
    name = uri.removeprefix(f"gs://{options.bucket}/")
    try:
        Client(project=options.project).bucket(options.bucket).blob(name).download_to_filename(
            str(path)
        )
    except Exception as exc:  # network, credentials: the job's outcome stands, the copy failed
        raise NoOutcomeError(f"cannot download {uri}: {exc}") from exc


def main(argv: Sequence[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    try:
        options, output = parse(argv)
    except UsageError as exc:
        err.write(f"assign_codes: {exc}\n")
        return EXIT_NO_OUTCOME
    try:
        job_id, total_lines = upload_codes.start_job(options, assignment_job_id, out, err)
        if not options.follow:
            return EXIT_DONE
        job = upload_codes.follow(
            options,
            job_id,
            total_lines=total_lines,
            err=err,
            progress=AssignmentProgress(err, total_lines=total_lines),
        )
        summary(job, out)
        if output is not None and job.get("result"):
            download(options, job, output)
            err.write(f"result written to {output}\n")
    except (NoOutcomeError, OSError) as exc:
        err.write(f"assign_codes: {exc}\n")
        return EXIT_NO_OUTCOME
    except KeyboardInterrupt:
        err.write("\nassign_codes: interrupted; the job goes on without us\n")
        return 130
    return EXIT_DONE if job.get("state") == "done" else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
