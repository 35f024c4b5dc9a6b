"""Upload a CSV of coupon codes into a campaign and follow its import job to the end.

The file goes to imports/{CAMPAIGN_ID}/{NAME} in the imports bucket with google-cloud-storage,
which is all the service needs (docs/contract.md, "The bucket"): the object-finalized event
starts import_codes. The job id is derived from the uploaded object's generation exactly as the
service derives it, and the job is followed through admin_api (GET /v1/jobs/{job_id}) with a
progress bar on stderr until it is done or failed; a summary with the first errors goes to
stdout. A 404 at first is normal: the job appears once import_codes has the event.

Locally (a project starting with demo-) the upload goes to the Storage emulator and admin_api
accepts an emulator-format admin token made here. With a real project, the upload uses the
application default credentials (unless STORAGE_EMULATOR_HOST or --storage-host says otherwise)
and admin_api wants a Firebase ID token with the admin claim: --id-token or
$CODEDROP_ADMIN_ID_TOKEN.

exit status: 0 the import is done, 1 it failed (the summary says why), 2 no outcome: usage
error, upload error, admin_api refusing the token or not answering for a minute, or --timeout
reached (the import may still finish).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from devkit import http
from devkit.emulators.tokens import emulator_id_token
from scripts.tools import command
from shared.intake.service import IMPORT_PATH, StoredObject, import_job_id
from shared.types import CAMPAIGN_ID_RULE

log = logging.getLogger("upload_codes")

EXIT_DONE, EXIT_FAILED, EXIT_NO_OUTCOME = 0, 1, 2
DEFAULT_PROJECT = "demo-codedrop"
POLL_INTERVAL = 0.5
SHOWN_ERRORS = 10
# After this long without a job, the bar says what to check.
NO_JOB_HINT_AFTER = 15.0
# An admin_api that does not answer for this long is gone (a stopped local stack): exit 2.
UNREACHABLE_LIMIT = 60.0
TOKEN_ENV = "CODEDROP_ADMIN_ID_TOKEN"  # noqa: S105 (a variable name)


class UsageError(Exception):
    """Bad arguments; exit 2 with the message."""


class NoOutcomeError(Exception):
    """The job's outcome cannot be known (upload failed, admin_api refused, timeout)."""


# --- arguments --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Options:
    campaign_id: str
    file: Path
    name: str
    admin_url: str
    storage_host: str | None  # None: the real Cloud Storage
    bucket: str
    project: str
    token: str | None
    follow: bool
    timeout: float
    folder: str = "imports"  # assignments/ for scripts/tools/assign_codes.py

    @property
    def object_name(self) -> str:
        return f"{self.folder}/{self.campaign_id}/{self.name}"


def local_url(env: str, default: int) -> str:
    return f"http://127.0.0.1:{os.environ.get(env) or default}"


def _parser() -> argparse.ArgumentParser:
    parser = command.parser("upload_codes", __doc__)
    parser.add_argument("campaign_id", metavar="CAMPAIGN_ID")
    parser.add_argument("file", metavar="FILE.csv", type=Path)
    parser.add_argument(
        "--name", help="object name under imports/CAMPAIGN_ID/ (default: the file's name)"
    )
    parser.add_argument(
        "--admin-url",
        default=local_url("CODEDROP_ADMIN_API_PORT", 8002),
        help="admin_api base URL (default http://127.0.0.1:$CODEDROP_ADMIN_API_PORT or :8002)",
    )
    parser.add_argument(
        "--storage-host",
        help="Storage emulator URL; default $STORAGE_EMULATOR_HOST, else for a demo- project "
        "http://127.0.0.1:$CODEDROP_STORAGE_PORT (or :9199), else the real Cloud Storage",
    )
    parser.add_argument(
        "--bucket",
        default=os.environ.get("CODEDROP_IMPORTS_BUCKET") or "codedrop-imports",
        help="imports bucket (default $CODEDROP_IMPORTS_BUCKET or codedrop-imports)",
    )
    parser.add_argument(
        "--project", default=DEFAULT_PROJECT, help="project id (default %(default)s)"
    )
    parser.add_argument(
        "--id-token",
        help=f"admin ID token for a real project (default ${TOKEN_ENV}); demo- projects get "
        "an emulator token",
    )
    parser.add_argument(
        "--no-follow",
        dest="follow",
        action="store_false",
        help="upload, print the job id and exit 0",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds to follow the job before giving up with exit 2 (default %(default)g)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="diagnostics of the clients on stderr"
    )
    return parser


def parse_options(
    argv: Sequence[str] | None,
    *,
    parser: argparse.ArgumentParser | None = None,
    folder: str = "imports",
    pattern: re.Pattern[str] = IMPORT_PATH,
    purpose: str = "imported",
) -> Options:
    """The options, or UsageError (argparse itself exits 2 on malformed arguments)."""
    args = (parser or _parser()).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    path: Path = args.file
    if not path.is_file():
        raise UsageError(f"{path} is not a file")
    name: str = args.name or path.name
    object_name = f"{folder}/{args.campaign_id}/{name}"
    if not pattern.match(object_name):
        raise UsageError(
            f"{object_name} would not be {purpose}: a campaign id is {CAMPAIGN_ID_RULE}, and "
            "the name must end with .csv and hold no /"
        )
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    project: str = args.project
    demo = project.startswith("demo-")
    storage_host: str | None = args.storage_host or os.environ.get("STORAGE_EMULATOR_HOST")
    if storage_host is None and demo:
        # A demo- project has no real bucket: never send its files to Cloud Storage.
        storage_host = local_url("CODEDROP_STORAGE_PORT", 9199)
    if storage_host is not None and not storage_host.startswith(("http://", "https://")):
        raise UsageError(f"--storage-host {storage_host!r} must start with http://")
    admin_url: str = args.admin_url.rstrip("/")
    if not admin_url.startswith(("http://", "https://")):
        raise UsageError(f"--admin-url {admin_url!r} must start with http:// or https://")
    token: str | None = args.id_token or os.environ.get(TOKEN_ENV) or None
    if token is None and demo:
        token = emulator_id_token("upload-codes", project=project, admin=True)
    if token is None and args.follow:
        raise UsageError(
            f"following the job needs an admin ID token for project {project}: pass "
            f"--id-token or set {TOKEN_ENV} (or use --no-follow)"
        )
    return Options(
        campaign_id=args.campaign_id,
        file=path,
        name=name,
        admin_url=admin_url,
        storage_host=storage_host,
        bucket=args.bucket,
        project=project,
        token=token,
        follow=args.follow,
        timeout=args.timeout,
        folder=folder,
    )


# --- the upload -------------------------------------------------------------------------------


def count_lines(path: Path) -> int:
    """Lines as an editor counts them (a last line without a newline counts too)."""
    lines, last = 0, b"\n"
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


def upload(options: Options) -> StoredObject:
    """Upload the file (a new generation each time, so a new job); the stored object."""
    if options.storage_host is not None:
        # How google-cloud-storage is pointed at an emulator (anonymous, no credentials).
        os.environ["STORAGE_EMULATOR_HOST"] = options.storage_host
    from google.cloud.storage import Client

    try:
        client = Client(project=options.project)
        blob = client.bucket(options.bucket).blob(options.object_name)
        blob.upload_from_filename(str(options.file), content_type="text/csv")
    except Exception as exc:  # network, credentials, missing bucket: all end the same way
        where = options.storage_host or "Cloud Storage"
        raise NoOutcomeError(
            f"cannot upload to gs://{options.bucket}/{options.object_name} ({where}): {exc}"
        ) from exc
    if blob.generation is None:
        raise NoOutcomeError("the upload answered without a generation")
    return StoredObject(
        bucket=options.bucket, name=options.object_name, generation=str(blob.generation)
    )


# --- progress ---------------------------------------------------------------------------------


def _n(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"


class Progress:
    """One status line on stderr: redrawn with \\r on a terminal; elsewhere (CI logs) a line
    when something changed, at most every few seconds."""

    WIDTH = 28
    PLAIN_EVERY = 5.0
    # The job's counts shown after the lines read: (label, field of the job).
    COUNTS: tuple[tuple[str, str], ...] = (
        ("imported", "imported"),
        ("duplicates", "duplicates"),
        ("invalid", "invalid"),
    )

    def __init__(self, stream: TextIO, *, total_lines: int) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._total = total_lines
        self._started = time.monotonic()
        self._last_len = 0
        self._last_text = ""
        self._last_plain = 0.0

    def bar(self, done: int | None, *, full: bool = False) -> str:
        if full:
            fraction = 1.0
        elif done is None or self._total <= 0:
            fraction = 0.0
        else:
            fraction = min(done / self._total, 1.0)
        filled = round(fraction * self.WIDTH)
        return f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {fraction:4.0%}"

    def waiting(self, note: str) -> None:
        elapsed = time.monotonic() - self._started
        self._draw(f"{self.bar(None)}  {note}  {elapsed:4.1f}s", key=note)

    def job(self, job: Mapping[str, Any]) -> None:
        finished = job.get("state") in ("done", "failed")
        rows = job.get("rows_read")
        counts = "  ".join(
            [f"rows {_n(rows)}/{_n(self._total)} lines"]
            + [f"{label} {_n(job.get(key))}" for label, key in self.COUNTS]
        )
        elapsed = time.monotonic() - self._started
        self._draw(
            f"{self.bar(rows if isinstance(rows, int) else None, full=finished)}  {counts}  "
            f"{job.get('state')}  {elapsed:4.1f}s",
            key=counts + str(job.get("state")),
            force=finished,
        )

    def _draw(self, text: str, *, key: str, force: bool = False) -> None:
        if self._tty:
            padding = " " * max(0, self._last_len - len(text))
            self._stream.write(f"\r{text}{padding}")
            self._last_len = len(text)
        else:
            now = time.monotonic()
            changed = key != self._last_text
            if not (force or (changed and now - self._last_plain >= self.PLAIN_EVERY)):
                return
            self._last_text, self._last_plain = key, now
            self._stream.write(text + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._tty and self._last_len:
            self._stream.write("\n")
            self._stream.flush()


# --- following the job ------------------------------------------------------------------------


def follow(
    options: Options,
    job_id: str,
    *,
    total_lines: int,
    err: TextIO,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Poll the job until it is done or failed; the job's last state. NoOutcomeError on a
    refusal or timeout."""
    url = f"{options.admin_url}/v1/jobs/{job_id}"
    progress = progress or Progress(err, total_lines=total_lines)
    deadline = time.monotonic() + options.timeout
    started = time.monotonic()
    note = "waiting for import_codes to pick the file up"
    unreachable_since: float | None = None
    try:
        while True:
            try:
                status, body = http.call_json("GET", url, token=options.token)
            except http.Unreachable as exc:
                status, body = 0, None
                note = f"admin_api unreachable ({type(exc).__name__}); retrying"
                now = time.monotonic()
                unreachable_since = unreachable_since or now
                if now - unreachable_since >= UNREACHABLE_LIMIT:
                    raise NoOutcomeError(
                        f"admin_api at {options.admin_url} has not answered for "
                        f"{UNREACHABLE_LIMIT:g} s ({exc}); the import may still finish: "
                        f"GET {url}"
                    ) from exc
            else:
                unreachable_since = None
            if status == 200 and isinstance(body, dict):
                progress.job(body)
                if body.get("state") in ("done", "failed"):
                    return body
            elif status in (401, 403):
                raise NoOutcomeError(f"admin_api refused the token ({status}): {_error(body)}")
            elif status == 404:
                note = "waiting for import_codes to pick the file up"
                if time.monotonic() - started > NO_JOB_HINT_AFTER:
                    note = "no job yet: is import_codes running (and, locally, the stack)?"
                progress.waiting(note)
            elif status:
                note = f"admin_api answered {status}: {_error(body)}; retrying"
                progress.waiting(note)
            else:
                progress.waiting(note)
            if time.monotonic() >= deadline:
                raise NoOutcomeError(
                    f"timed out after {options.timeout:g} s ({note}); the import may still "
                    f"finish: GET {url}"
                )
            time.sleep(POLL_INTERVAL)
    finally:
        progress.close()


def _error(body: object) -> str:
    if isinstance(body, dict) and "error_message" in body:
        return f"{body.get('error_code')}: {body['error_message']}"
    return "no error body"


def summary(job: Mapping[str, Any], out: TextIO) -> None:
    rows = [
        ("source", job.get("source")),
        ("rows read", _n(job.get("rows_read"))),
        ("imported", _n(job.get("imported"))),
        (
            "duplicates",
            f"{_n(job.get('duplicates'))} (in the file {_n(job.get('duplicates_in_file'))}, "
            f"already in the campaign {_n(job.get('duplicates_in_campaign'))})",
        ),
        ("invalid", _n(job.get("invalid"))),
    ]
    write_job(job, rows, out, width=11)


def write_job(
    job: Mapping[str, Any],
    rows: list[tuple[str, object]],
    out: TextIO,
    *,
    width: int,
    notes: Sequence[str] = (),
) -> None:
    """A finished job of a tool: its state and time, its figures (`rows`, labels padded to
    `width`), `notes`, and its first invalid rows."""
    duration = job.get("duration_seconds")
    took = f" in {duration:.1f} s" if isinstance(duration, int | float) else ""
    if job.get("failure_reason"):
        rows.append(("failure", job["failure_reason"]))
    out.write(f"job {job.get('job_id')} {job.get('state')}{took}\n")
    for label, value in rows:
        out.write(f"  {label:<{width}} {value}\n")
    for note in notes:
        out.write(f"  {note}\n")
    errors = [e for e in job.get("errors") or [] if isinstance(e, dict)]
    if errors:
        invalid = job.get("invalid")
        total = invalid if isinstance(invalid, int) and invalid >= len(errors) else len(errors)
        shown = errors[:SHOWN_ERRORS]
        out.write(f"  first {len(shown)} of {total} invalid rows:\n")
        for error in shown:
            out.write(f"    line {error.get('line')}: {error.get('reason')}\n")
    out.flush()


# --- main -------------------------------------------------------------------------------------


def start_job(
    options: Options, job_id_of: Callable[[StoredObject], str], out: TextIO, err: TextIO
) -> tuple[str, int]:
    """Upload the file and name its job on `out` (and, when not following it, how to); the
    job's id and the file's lines."""
    total_lines = count_lines(options.file)
    stored = upload(options)
    job_id = job_id_of(stored)
    where = f" (Storage emulator {options.storage_host})" if options.storage_host else ""
    err.write(f"uploaded {options.file} ({total_lines:,} lines) to {stored.uri}{where}\n")
    out.write(f"job {job_id}\n")
    out.flush()
    if not options.follow:
        err.write(f"follow it with GET {options.admin_url}/v1/jobs/{job_id}\n")
    return job_id, total_lines


def main(argv: Sequence[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    try:
        options = parse_options(argv)
    except UsageError as exc:
        err.write(f"upload_codes: {exc}\n")
        return EXIT_NO_OUTCOME
    try:
        job_id, total_lines = start_job(options, import_job_id, out, err)
        if not options.follow:
            return EXIT_DONE
        job = follow(options, job_id, total_lines=total_lines, err=err)
    except NoOutcomeError as exc:
        err.write(f"upload_codes: {exc}\n")
        return EXIT_NO_OUTCOME
    except OSError as exc:  # the file could not be read
        err.write(f"upload_codes: {exc}\n")
        return EXIT_NO_OUTCOME
    except KeyboardInterrupt:
        err.write("\nupload_codes: interrupted; the import goes on without us\n")
        return 130
    summary(job, out)
    return EXIT_DONE if job.get("state") == "done" else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
