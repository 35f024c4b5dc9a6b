"""Staging and running the sale: the campaign through admin_api, its codes through the bucket
and import_codes, then the shoppers (scripts/load_test/shoppers.py)."""

from __future__ import annotations

import resource
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from devkit import http
from scripts.load_test import SetupError, say
from scripts.load_test.cpu import CLIENT, CpuSampler
from scripts.load_test.options import REPO, Options
from scripts.load_test.stack import Target
from scripts.tools import upload_codes
from shared.intake.service import import_job_id

RECORDS = "responses.jsonl"
IMPORT_TIMEOUT = 600.0
PROGRESS_EVERY = 5.0


def create_campaign(options: Options, target: Target, token: str) -> str:
    now = datetime.now(UTC)
    campaign_id = f"lt-{now.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    body: dict[str, Any] = {
        "campaign_id": campaign_id,
        "title": f"load test {options.shoppers:,} shoppers for {options.codes:,} codes",
        "starts_at": (now - timedelta(minutes=1)).isoformat(),
        "ends_at": (now + timedelta(days=1)).isoformat(),
        "max_per_user": options.max_per_user,
    }
    if options.waiting_room:
        body["waiting_room_enabled"] = True
        if options.admissions_per_second:
            body["admissions_per_second"] = options.admissions_per_second
    status, answer = http.call_json(
        "POST", f"{target.admin_url}/v1/campaigns", body=body, token=token
    )
    if status != 201:
        raise SetupError(f"admin_api answered {status} to creating the campaign: {answer}")
    return campaign_id


def load_pool(
    options: Options, target: Target, campaign_id: str, token: str, directory: Path
) -> dict[str, Any]:
    """The codes as a CSV through the bucket and import_codes, exactly as ./scripts/upload_codes
    drops and follows one; the finished job."""
    tag = campaign_id.rsplit("-", 1)[-1].upper()
    csv_path = directory / "codes.csv"
    with csv_path.open("w") as handle:
        handle.write("code\n")
        for number in range(1, options.codes + 1):
            handle.write(f"LT{tag}-{number:07d}\n")
    upload = upload_codes.Options(
        campaign_id=campaign_id,
        file=csv_path,
        name="loadtest.csv",
        admin_url=target.admin_url,
        storage_host=target.storage_host,
        bucket=target.bucket,
        project=target.project,
        token=token,
        follow=True,
        timeout=IMPORT_TIMEOUT,
    )
    started = time.monotonic()
    try:
        job_id = import_job_id(upload_codes.upload(upload))
        say(f"dropped {options.codes:,} codes at gs://{target.bucket}/{upload.object_name}")
        job = upload_codes.follow(upload, job_id, total_lines=options.codes + 1, err=sys.stdout)
    except upload_codes.NoOutcomeError as exc:
        raise SetupError(f"import of the codes: {exc}") from exc
    if job.get("state") != "done" or job.get("imported") != options.codes:
        raise SetupError(f"import job {job_id} ended {job.get('state')}: {job}")
    seconds = time.monotonic() - started
    say(f"import job done: {job['imported']:,} codes in {seconds:.1f} s")
    return {"job_id": job_id, "seconds": round(seconds, 2), "job": job}


def wait_until_claimable(target: Target, campaign_id: str, codes: int) -> None:
    """claim_api sees the campaign active with its codes (its caches are short)."""
    deadline = time.monotonic() + 30
    answer: Any = None
    while time.monotonic() < deadline:
        status, answer = http.call_json("GET", f"{target.claim_url}/v1/campaigns/{campaign_id}")
        if status == 200 and isinstance(answer, dict) and answer.get("status") == "active":
            return
        time.sleep(0.25)
    raise SetupError(f"claim_api does not show campaign {campaign_id} active: {answer}")


@dataclass
class ClientRun:
    command: list[str]
    exit_code: int
    seconds: float
    cpu_seconds: float
    records_path: Path


def threads_command(
    options: Options, target: Target, campaign_id: str, records: Path | None
) -> list[str]:
    """The shoppers' client (scripts/load_test/shoppers.py) for this sale."""
    command = [
        *(sys.executable, "-m", "scripts.load_test.shoppers"),
        *("--shoppers", str(options.shoppers), "--threads", str(options.threads)),
        *("--ramp-seconds", f"{options.arrival_seconds:g}"),
        *("--host", target.claim_url, "--campaign", campaign_id, "--project", target.project),
        *("--double-click-share", f"{options.double_click_share:g}"),
        *("--claim-attempts", str(options.claim_attempts)),
        *("--give-up-after", f"{options.give_up_after:g}"),
    ]
    return command + (["--record", str(records)] if records is not None else [])


def run_shoppers(
    options: Options, target: Target, campaign_id: str, directory: Path, sampler: CpuSampler
) -> ClientRun:
    """The shoppers, to the end; every response recorded."""
    records_path = directory / RECORDS
    records_path.unlink(missing_ok=True)
    arrival = (
        "all at once"
        if options.pattern == "burst"
        else f"over {options.ramp_seconds:g} s ({options.spawn_rate:.0f}/s)"
    )
    command = threads_command(options, target, campaign_id, records_path)
    say(f"{CLIENT} client: {options.shoppers:,} shoppers, {arrival}, {options.threads} threads")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with (directory / f"{CLIENT}.log").open("w") as log:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        sampler.client_pid = process.pid
        try:
            _follow(process, records_path, options.shoppers, started)
        except KeyboardInterrupt:
            process.send_signal(signal.SIGINT)
            process.wait(30)
            raise
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    seconds = time.monotonic() - started
    say(f"{CLIENT} client finished in {seconds:.1f} s (exit {process.returncode}, {cpu:.1f} CPU s)")
    return ClientRun(
        command=command,
        exit_code=process.returncode,
        seconds=round(seconds, 2),
        cpu_seconds=round(cpu, 2),
        records_path=records_path,
    )


def _follow(process: subprocess.Popen[bytes], records: Path, shoppers: int, started: float) -> None:
    """Wait for the client, printing progress read from the records file."""
    offset = 0
    lines = journeys = 0
    last_print = time.monotonic()
    while process.poll() is None:
        time.sleep(0.5)
        if records.exists():
            with records.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            cut = chunk.rfind(b"\n") + 1
            offset += cut
            lines += chunk.count(b"\n", 0, cut)
            journeys += chunk.count(b'"kind":"journey"', 0, cut)
        if time.monotonic() - last_print >= PROGRESS_EVERY:
            last_print = time.monotonic()
            say(
                f"  [{last_print - started:5.0f} s] {lines - journeys:,} responses, "
                f"{journeys:,}/{shoppers:,} shoppers done"
            )
