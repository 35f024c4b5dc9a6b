"""--demo and --check: a campaign with codes to claim, and one claim over HTTP."""

from __future__ import annotations

import secrets
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from emulator.tokens import emulator_id_token
from scripts.localstack.config import HOST, Config
from scripts.localstack.errors import StackError
from scripts.localstack.output import say
from scripts.support import http
from scripts.tools import upload_codes
from shared.intake.service import import_job_id

DEMO_CAMPAIGN = "demo"
DEMO_CODES = 100
DEMO_ADMIN = "demo-admin"
DEMO_SHOPPER = "demo-shopper-1"


@dataclass(frozen=True, slots=True)
class Demo:
    campaign_id: str
    shopper_token: str


def run_demo(config: Config) -> Demo:
    """Campaign `demo` through admin_api over HTTP, then 100 codes uploaded as a CSV into the
    imports bucket and imported by import_codes, as a marketer's file would be."""
    admin_token = emulator_id_token(DEMO_ADMIN, project=config.project, admin=True)
    now = datetime.now(UTC)
    body = {
        "campaign_id": DEMO_CAMPAIGN,
        "title": "codedrop demo",
        "starts_at": (now - timedelta(minutes=1)).isoformat(),
        "ends_at": (now + timedelta(days=1)).isoformat(),
    }
    status, answer = http.call_json(
        "POST", f"{config.url('admin_api')}/v1/campaigns", body=body, token=admin_token
    )
    if status == 201:
        say(f"demo: created campaign {DEMO_CAMPAIGN} through admin_api")
    elif status == 409:
        say(f"demo: campaign {DEMO_CAMPAIGN} already exists; reusing it")
    else:
        raise StackError(f"admin_api answered {status} to creating the demo campaign: {answer}")

    batch = secrets.token_hex(3).upper()  # codes stay new when the campaign is reused
    codes = [f"DEMO-{batch}-{n:03d}" for n in range(1, DEMO_CODES + 1)]
    job = _import(config, codes, admin_token=admin_token)
    say(f"demo: imported {job.get('imported')} codes ({codes[0]} … {codes[-1]})")

    shopper_token = emulator_id_token(
        DEMO_SHOPPER, project=config.project, lifetime_seconds=7 * 24 * 3600
    )
    claim = f"{config.url('claim_api')}/v1/campaigns/{DEMO_CAMPAIGN}/claims"
    say(f"claim a code as {DEMO_SHOPPER}:")
    say(f'  curl -s -X POST {claim} -H "Authorization: Bearer {shopper_token}"')
    say("see the campaign:")
    say(f"  curl -s {config.url('claim_api')}/v1/campaigns/{DEMO_CAMPAIGN}")
    return Demo(campaign_id=DEMO_CAMPAIGN, shopper_token=shopper_token)


def run_check(config: Config, demo: Demo) -> None:
    """The printed curl, over HTTP: one claim must answer 201 with a code."""
    base = f"{config.url('claim_api')}/v1/campaigns/{demo.campaign_id}"
    status, answer = http.call_json("POST", f"{base}/claims", token=demo.shopper_token)
    if status != 201 or not isinstance(answer, dict) or not answer.get("code"):
        raise StackError(f"check: claim answered {status} {answer}, expected 201 with a code")
    say(f"check: claim answered 201 with code {answer['code']}")
    status, answer = http.call_json("GET", base)
    if status != 200 or not isinstance(answer, dict):
        raise StackError(f"check: GET campaign answered {status} {answer}, expected 200")
    say(f"check: campaign is {answer.get('status')} with {answer.get('remaining')} codes left")
    say("local stack check passed")


def _import(config: Config, codes: list[str], *, admin_token: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        csv = Path(folder) / "demo-codes.csv"
        csv.write_text("code\n" + "".join(f"{code}\n" for code in codes))
        options = upload_codes.Options(
            campaign_id=DEMO_CAMPAIGN,
            file=csv,
            name=f"demo-{codes[0].split('-')[1].lower()}.csv",
            admin_url=config.url("admin_api"),
            storage_host=f"http://{HOST}:{config.ports['storage']}",
            bucket=config.bucket,
            project=config.project,
            token=admin_token,
            follow=True,
            timeout=config.timeout,
        )
        try:
            stored = upload_codes.upload(options)
            job = upload_codes.follow(
                options, import_job_id(stored), total_lines=len(codes) + 1, err=sys.stderr
            )
        except upload_codes.NoOutcomeError as exc:
            raise StackError(f"demo: importing the codes failed: {exc}") from exc
    if job.get("state") != "done":
        raise StackError(f"demo: the import job ended {job.get('state')}: {job}")
    return job
