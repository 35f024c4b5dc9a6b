"""Console upload benchmark: a CSV of N codes uploaded from the console in Chromium and imported.

    .venv/bin/python -m scripts.bench.console_upload [--rows 1000000]
        [--json docs/bench/console_upload.json] [-v]

Starts the local stack (scripts/localstack: the emulators, every function, the storage notifier
and the console) on free ports, in process groups of its own, and stops it at the end. Writes a
CSV of N distinct codes (14 bytes a line: 1,000,000 rows are 14 MB), creates a campaign
through admin_api, then drives the console in Chromium (Playwright) as a marketer does: signs in
as the demo admin, opens the campaign's Codes tab and chooses the file. The browser sends it to
the Storage emulator through the resumable session admin_api opened (web/console/upload.js, in
1 MiB chunks), the notifier delivers the object's event, import_codes imports it, and the console
follows the job until it is done.

Reports the upload time (the file chosen until the progress bar is full), the import time (then
until the console shows the job done; the job's own duration too), the rows imported, and the
memory of import_codes: its worker processes' peak RSS (VmHWM) over the run and the highest RSS
sampled every 200 ms during the import, against the RSS before it. Exit code 1: the import did
not take exactly the rows of the file; 2: the benchmark failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil

from devkit import http
from devkit.browser import CHROMIUM_HINT, find_chromium
from devkit.emulators import free_port
from devkit.emulators.auth import AuthEmulatorClient
from scripts.bench.harness import level, setup_logging, stop_on_sigterm, write_json
from scripts.localstack.config import (
    DEFAULT_BUCKET,
    DEFAULT_TOPIC,
    PORTS,
    Config,
    page_origins,
)
from scripts.localstack.stack import LocalStack
from scripts.localstack.users import ADMIN

log = logging.getLogger("bench.console_upload")

PROJECT = "demo-codedrop-bench"
SAMPLE_SECONDS = 0.2
# A browser waiting on the import: generous, the import of a million rows takes minutes here.
IMPORT_TIMEOUT_MS = 30 * 60 * 1000


def write_csv(path: Path, rows: int) -> int:
    """`rows` distinct codes of 13 characters under a `code` header; the file's size."""
    with path.open("w", encoding="utf-8", newline="") as out:
        out.write("code\n")
        for n in range(rows):
            out.write(f"BULK-{n:08d}\n")
    return path.stat().st_size


class Memory:
    """RSS of a process tree (gunicorn's arbiter and its workers), sampled on a thread."""

    def __init__(self, pid: int) -> None:
        self._root = psutil.Process(pid)
        self.highest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def processes(self) -> list[psutil.Process]:
        return [self._root, *self._root.children(recursive=True)]

    def rss(self) -> int:
        total = 0
        for process in self.processes():
            try:
                total += process.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return total

    def peak_worker_bytes(self) -> int:
        """The highest VmHWM of the tree's processes (the worker that ran the import)."""
        peaks = []
        for process in self.processes():
            status = Path(f"/proc/{process.pid}/status").read_text()
            peaks += [
                int(line.split()[1]) * 1024
                for line in status.splitlines()
                if line.startswith("VmHWM:")
            ]
        return max(peaks, default=0)

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.highest = max(self.highest, self.rss())

    def __enter__(self) -> Memory:
        self.highest = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def drive_console(
    *, console_url: str, campaign_id: str, csv_path: Path, memory: Memory
) -> dict[str, Any]:
    """Sign in, choose the file on the campaign's Codes tab; the upload and import times."""
    from playwright.sync_api import expect, sync_playwright

    chromium = find_chromium()
    if chromium is None:
        raise RuntimeError(f"no Chromium found. {CHROMIUM_HINT}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium))
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)
            page.goto(console_url)
            form = page.get_by_test_id("sign-in")
            form.get_by_label("Email").fill(ADMIN.email)
            form.get_by_label("Password").fill(ADMIN.password)
            form.get_by_role("button", name="Sign in").click()
            expect(page.get_by_test_id("campaign-list")).to_be_visible()
            page.goto(f"{console_url}#/c/{campaign_id}/codes")
            expect(page.get_by_test_id("upload-input")).to_be_visible()
            rss_before = memory.rss()
            with memory:
                started = time.perf_counter()
                page.get_by_test_id("upload-input").set_input_files(csv_path)
                progress = page.get_by_test_id("upload-progress")
                expect(progress).to_have_attribute("value", "100", timeout=IMPORT_TIMEOUT_MS)
                uploaded = time.perf_counter()
                job = page.get_by_test_id("job").first
                expect(job.get_by_test_id("job-state")).to_have_attribute(
                    "data-state", "done", timeout=IMPORT_TIMEOUT_MS
                )
                imported = time.perf_counter()
            job_id = job.get_attribute("data-job-id")
        finally:
            browser.close()
    return {
        "job_id": job_id,
        "upload_seconds": round(uploaded - started, 1),
        "import_seconds": round(imported - uploaded, 1),
        "import_codes_rss_before_mb": round(rss_before / 2**20, 1),
        "import_codes_rss_highest_mb": round(memory.highest / 2**20, 1),
    }


def run(rows: int, work: Path) -> dict[str, Any]:
    ports = {port.key: free_port() for port in PORTS}
    config = Config(
        project=PROJECT,
        ports=ports,
        log_dir=work / "logs",
        bucket=DEFAULT_BUCKET,
        topic=DEFAULT_TOPIC,
        cors_origins=page_origins(ports["web"]),
        timeout=180.0,
        demo=False,
        check=False,
    )
    csv_path = work / "codes.csv"
    size = write_csv(csv_path, rows)
    log.info("%d rows written to %s (%.1f MB)", rows, csv_path, size / 1e6)
    stack = LocalStack(config)
    try:
        stack.start()
        users = AuthEmulatorClient(config.auth_host, project=config.project)
        token = ADMIN.sign_in(users).id_token
        campaign_id = f"upload-{secrets.token_hex(4)}"
        now = datetime.now(UTC)
        status, answer = http.call_json(
            "POST",
            f"{config.url('admin_api')}/v1/campaigns",
            body={
                "campaign_id": campaign_id,
                "title": "Console upload bench",
                "starts_at": (now + timedelta(days=1)).isoformat(),
                "ends_at": (now + timedelta(days=2)).isoformat(),
            },
            token=token,
        )
        if status != 201:
            raise RuntimeError(f"admin_api answered {status} to creating the campaign: {answer}")
        stack.serve_pages(campaign_id)
        [importer] = [f for f in stack.functions if f.function.name == "import_codes"]
        memory = Memory(importer.process.pid)
        timings = drive_console(
            console_url=f"{config.url('web')}/console/",
            campaign_id=campaign_id,
            csv_path=csv_path,
            memory=memory,
        )
        peak = memory.peak_worker_bytes()
        status, job = http.call_json(
            "GET", f"{config.url('admin_api')}/v1/jobs/{timings['job_id']}", token=token
        )
        if status != 200:
            raise RuntimeError(f"admin_api answered {status} to reading the job: {job}")
    finally:
        stack.stop()
    return {
        "rows": rows,
        "file_mb": round(size / 1e6, 1),
        **{k: v for k, v in timings.items() if k != "job_id"},
        "job_duration_seconds": job.get("duration_seconds"),
        "imported": job.get("imported"),
        "duplicates": job.get("duplicates"),
        "invalid": job.get("invalid"),
        "rows_per_second": round(rows / timings["import_seconds"])
        if timings["import_seconds"]
        else None,
        "import_codes_peak_rss_mb": round(peak / 2**20, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    setup_logging(level(args.verbose), role="console_upload")
    stop_on_sigterm()  # a stopped run still stops its stack
    try:
        with tempfile.TemporaryDirectory(prefix="codedrop-console-upload-") as work:
            result = run(args.rows, Path(work))
    except Exception:
        log.exception("the benchmark failed")
        return 2
    print(json.dumps(result, indent=2))
    write_json(args.json, {"results": [result]})
    exact = result["imported"] == args.rows and not result["duplicates"] and not result["invalid"]
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
