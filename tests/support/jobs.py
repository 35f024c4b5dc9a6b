"""What the tools that follow a job of an upload (upload_codes, assign_codes) print."""

from __future__ import annotations

from collections.abc import Callable

from devkit.standins.storage_notifier import StorageNotifier
from shared.intake.service import StoredObject
from tests.support.stack import BUCKET, PROJECT


def tool_options(admin_url: str, storage_host: str, *, timeout: int) -> list[str]:
    """The options that point a tool at the suite's admin_api, Storage emulator and bucket."""
    return [
        *("--admin-url", admin_url, "--storage-host", storage_host),
        *("--bucket", BUCKET, "--project", PROJECT, "--timeout", str(timeout)),
    ]


def followed_to_done(
    out: str, notifier: StorageNotifier, name: str, job_id: Callable[[StoredObject], str]
) -> tuple[list[str], str]:
    """The lines a tool printed, checked to name the job of the upload `name` and to say it is
    done; and the upload's generation."""
    (generation,) = [g for n, g in notifier.announced if n == name]
    job = job_id(StoredObject(bucket=BUCKET, name=name, generation=generation))
    lines = out.splitlines()
    assert lines[0] == f"job {job}"
    assert lines[1].startswith(f"job {job} done in ")
    return lines, generation
