"""--demo and --check: a campaign with codes to claim, the demo users in the Auth emulator, the
example landing page, and (--check) one claim over HTTP and the page's files."""

from __future__ import annotations

import json
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from devkit import http
from devkit.emulators.auth import AuthEmulatorClient, AuthEmulatorError
from scripts.localstack.config import HOST, Config
from scripts.localstack.errors import StackError
from scripts.localstack.output import say
from scripts.localstack.users import ADMIN, SHOPPER
from scripts.tools import upload_codes
from shared.intake.service import import_job_id

DEMO_CAMPAIGN = "demo"
DEMO_TITLE = "Flash sale: 30% off everything"
DEMO_CODES = 100
# A fair drop (docs/fair-drops.md): its pre-queue opens soon after the stack is up, and the draw
# is a few minutes later; ./scripts/verify_drop checks it from its public URLs afterwards.
FAIR_DEMO_CAMPAIGN = "fair-demo"
FAIR_DEMO_OPENS_IN = timedelta(seconds=30)
FAIR_DEMO_PRE_QUEUE = timedelta(minutes=3)
FAIR_DEMO_CODES = 50


@dataclass(frozen=True, slots=True)
class Demo:
    campaign_id: str
    shopper_token: str


def run_demo(config: Config) -> Demo:
    """The demo users signed in on the Auth emulator; campaign `demo` through admin_api over
    HTTP with the admin's token, then 100 codes uploaded as a CSV into the imports bucket and
    imported by import_codes, as a marketer's file would be."""
    users = AuthEmulatorClient(config.auth_host, project=config.project)
    try:
        admin_token = ADMIN.sign_in(users).id_token
        shopper_token = SHOPPER.sign_in(users).id_token
    except (AuthEmulatorError, http.Unreachable) as exc:
        raise StackError(f"demo: signing the demo users in failed: {exc}") from exc
    now = datetime.now(UTC)
    body = {
        "campaign_id": DEMO_CAMPAIGN,
        "title": DEMO_TITLE,
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
    _fair_demo(config, admin_token=admin_token)
    return Demo(campaign_id=DEMO_CAMPAIGN, shopper_token=shopper_token)


def announce_demo(config: Config) -> None:
    """How to sign in as the demo users and claim a code, for a person trying the stack."""
    claim = f"{config.url('claim_api')}/v1/campaigns/{DEMO_CAMPAIGN}/claims"
    sign_in = (
        f"{config.url('auth')}/identitytoolkit.googleapis.com/v1/accounts:signInWithPassword"
        "?key=any"
    )
    say(f"demo users in the Auth emulator ({config.auth_host}), email and password:")
    say(f"  admin    {ADMIN.email} / {ADMIN.password}   (custom claim admin: true)")
    say(f"  shopper  {SHOPPER.email} / {SHOPPER.password}")
    say("sign in (an ID token, valid 1 h) from another shell: ./scripts/token admin|shopper,")
    say("or as a console would (the answer's idToken):")
    payload = json.dumps(
        {"email": ADMIN.email, "password": ADMIN.password, "returnSecureToken": True},
        separators=(",", ":"),
    )
    say(f"  curl -s '{sign_in}' -H 'Content-Type: application/json' -d '{payload}'")
    say("claim a code as the shopper:")
    say(f'  curl -s -X POST {claim} -H "Authorization: Bearer $(./scripts/token shopper)"')
    say("see the campaign:")
    say(f"  curl -s {config.url('claim_api')}/v1/campaigns/{DEMO_CAMPAIGN}")


def _fair_demo(config: Config, *, admin_token: str) -> None:
    """Campaign `fair-demo`: a fair drop whose pre-queue opens in 30 s, drawn 3 minutes later."""
    now = datetime.now(UTC)
    starts_at = now + FAIR_DEMO_OPENS_IN + FAIR_DEMO_PRE_QUEUE
    body = {
        "campaign_id": FAIR_DEMO_CAMPAIGN,
        "title": "Fair drop: 50 pairs, drawn at the start",
        "starts_at": starts_at.isoformat(),
        "ends_at": (now + timedelta(days=1)).isoformat(),
        "pre_queue_seconds": int(FAIR_DEMO_PRE_QUEUE.total_seconds()),
        "waiting_room_enabled": True,
        "admissions_per_second": 2,
    }
    admin = f"{config.url('admin_api')}/v1/campaigns"
    status, answer = http.call_json("POST", admin, body=body, token=admin_token)
    if status == 409:
        say(f"demo: campaign {FAIR_DEMO_CAMPAIGN} already exists; reusing it")
        return
    if status != 201:
        raise StackError(f"admin_api answered {status} to creating the fair drop: {answer}")
    generate = f"{admin}/{FAIR_DEMO_CAMPAIGN}/codes:generate"
    status, answer = http.call_json(
        "POST", generate, body={"count": FAIR_DEMO_CODES}, token=admin_token
    )
    if status != 202:
        raise StackError(
            f"admin_api answered {status} to generating the fair drop's codes: {answer}"
        )
    campaign = f"{config.url('claim_api')}/v1/campaigns/{FAIR_DEMO_CAMPAIGN}"
    opens_at = now + FAIR_DEMO_OPENS_IN
    say(f"demo: fair drop {FAIR_DEMO_CAMPAIGN}: join from {opens_at:%H:%M:%S} UTC, drawn at")
    say(f"  {starts_at:%H:%M:%S} UTC (the landing page with ?campaign={FAIR_DEMO_CAMPAIGN});")
    say(f"  its proof: curl -s {campaign}/fairness")
    say(f"  verify it after the start: ./scripts/verify_drop {campaign}")


def announce_page(url: str, config: Config, app_check_token_url: str | None) -> None:
    say("the drop control room, the console where marketers run the sale (docs/console.md):")
    say(f"  {config.url('web')}/console/   sign in as {ADMIN.email} / {ADMIN.password}")
    say("the example landing page (shoppers sign in anonymously on the Auth emulator, or with a")
    say("phone number when the campaign's identity is phone):")
    say(f"  {url}")
    say("  the emulator sends no SMS: the code is in the Auth emulator's log, or")
    codes = f"{config.url('auth')}/emulator/v1/projects/{config.project}/verificationCodes"
    say(f"  curl -s {codes}")
    if app_check_token_url is not None:
        say(f"  App Check tokens for the page (development keys): {app_check_token_url}")


PUSH_CHECK_SECONDS = 30


def _remaining(base: str) -> int:
    status, answer = http.call_json("GET", base)
    remaining = answer.get("remaining") if isinstance(answer, dict) else None
    if status != 200 or not isinstance(remaining, int):
        raise StackError(f"check: GET campaign answered {status} {answer}, expected 200")
    return remaining


def run_check(config: Config, demo: Demo) -> None:
    """The printed curl, over HTTP: one claim must answer 201 with a code."""
    base = f"{config.url('claim_api')}/v1/campaigns/{demo.campaign_id}"
    before = _remaining(base)
    status, answer = http.call_json("POST", f"{base}/claims", token=demo.shopper_token)
    if status != 201 or not isinstance(answer, dict) or not answer.get("code"):
        raise StackError(f"check: claim answered {status} {answer}, expected 201 with a code")
    say(f"check: claim answered 201 with code {answer['code']}")
    # `remaining` comes from count_usage's counters: the claim's event has to travel the
    # emulator's push subscription, the signing relay and count_usage's token check.
    deadline = time.monotonic() + PUSH_CHECK_SECONDS
    while (left := _remaining(base)) != before - 1:
        if time.monotonic() > deadline:
            raise StackError(
                f"check: {left} codes left {PUSH_CHECK_SECONDS} s after the claim, expected "
                f"{before - 1}: count_usage did not count its signed push (see count_usage.log)"
            )
        time.sleep(0.2)  # the emulator pushes on its own schedule
    say(f"check: count_usage counted the claim from a signed push: {left} codes left")
    status, answer = http.call_json("GET", f"{config.url('app-check')}/token")
    if status != 200 or not isinstance(answer, dict) or not answer.get("token"):
        raise StackError(f"check: the App Check token URL answered {status}, expected a token")
    say("check: development App Check tokens are served")
    page = f"{config.url('web')}/"
    for path in ("", "config.json", "codedrop.js", "app.js"):
        response = http.request("GET", page + path, timeout=10)
        if response.status_code != 200:
            raise StackError(f"check: {page + path} answered {response.status_code}, expected 200")
    say(f"check: the landing page answers at {page}")
    console = f"{config.url('web')}/console/"
    for path in ("", "config.json", "app.js", "vendor/uPlot.esm.js"):
        response = http.request("GET", console + path, timeout=10)
        if response.status_code != 200:
            raise StackError(
                f"check: {console + path} answered {response.status_code}, expected 200"
            )
    say(f"check: the console answers at {console}")
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
