"""The drop control room (web/console) in real Chromium: a marketer signed in by the Auth
emulator runs a sale on admin_api over HTTP (functions-framework), uploads a CSV straight to the
Storage emulator (import_codes fed by the storage notifier), while shoppers claim through
claim_api; what the console shows is checked against Firestore and the API.

CODEDROP_CONSOLE_SCREENSHOTS=docs writes docs/console.png and docs/console-phone.png from the
run."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.storage import Client as StorageClient
from playwright.sync_api import Browser, FilePayload, Page, expect

from devkit.cleanup import delete_tree
from devkit.emulators import EmulatorStack, RunningEmulator, free_port
from devkit.emulators.auth import AuthEmulatorClient
from scripts.localstack.pages import ConsoleConfig, PageConfig, PageServer
from shared.clock import utcnow
from shared.gcp.firestore import (
    audit_collection,
    campaign_ref,
    claims_collection,
    jobs_collection,
)
from tests.browser.conftest import LOCAL_HOSTS, PHONE, claim_over_http
from tests.support.servers import fast_notifier, function_servers
from tests.support.stack import BUCKET, PROJECT, MakeCampaign

pytestmark = [pytest.mark.emulator, pytest.mark.browser]
# Two shared cores: an admin_api call may take seconds while other suites run.
expect.set_options(timeout=20_000)

REPO = Path(__file__).resolve().parents[2]
AXE = REPO / "node_modules" / "axe-core" / "axe.min.js"
DESKTOP = {"width": 1280, "height": 900}
ADMIN_PASSWORD = "console-admin-pw"
# Shoppers who claim during the sale, while the marketer watches.
SHOPPERS = 3


@dataclass(frozen=True)
class ConsoleStack:
    url: str
    admin_api: str
    claim_api: str
    auth: AuthEmulatorClient
    admin_email: str


@pytest.fixture(scope="module")
def console_stack(
    emulators: EmulatorStack,
    auth_emulator: RunningEmulator,
    auth_users: AuthEmulatorClient,
    storage_client: StorageClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ConsoleStack]:
    """admin_api, claim_api and import_codes over HTTP (admin_api's CORS allowing the console's
    origin), the storage notifier feeding import_codes, and the page server with the console."""
    page_port = free_port()
    origin = f"http://127.0.0.1:{page_port}"
    with contextlib.ExitStack() as stack:
        with pytest.MonkeyPatch.context() as mp:  # the servers' environment only
            mp.setenv("CODEDROP_CORS_ORIGINS", origin)
            mp.setenv("FIREBASE_AUTH_EMULATOR_HOST", auth_emulator.host_port)
            urls = stack.enter_context(
                function_servers(
                    ["admin_api", "claim_api", "import_codes"],
                    run_dir=tmp_path_factory.mktemp("console-functions"),
                )
            )
        notifier = fast_notifier(storage_client, f"{urls['import_codes']}/")
        notifier.start()
        stack.callback(notifier.stop)
        auth = f"http://{auth_emulator.host_port}"
        pages = stack.enter_context(
            PageServer(
                host="127.0.0.1",
                port=page_port,
                config=PageConfig(
                    api_base=urls["claim_api"], project=PROJECT, auth_emulator_url=auth
                ),
                console=ConsoleConfig(
                    admin_api_base=urls["admin_api"],
                    project=PROJECT,
                    auth_emulator_url=auth,
                ),
            )
        )
        email = f"marketer-{secrets.token_hex(3)}@codedrop.test"
        auth_users.ensure_user(email, ADMIN_PASSWORD, claims={"admin": True})
        yield ConsoleStack(
            url=f"{pages.url}/console/",
            admin_api=urls["admin_api"],
            claim_api=urls["claim_api"],
            auth=auth_users,
            admin_email=email,
        )


@dataclass
class Marketer:
    page: Page
    console_errors: list[str]
    external: list[str]


@contextlib.contextmanager
def open_console(browser: Browser, **context_options: Any) -> Iterator[Marketer]:
    context = browser.new_context(accept_downloads=True, **context_options)
    page = context.new_page()
    who = Marketer(page=page, console_errors=[], external=[])

    def only_local(route: Any, request: Any) -> None:
        host = request.url.split("/")[2].split(":")[0]
        if host in LOCAL_HOSTS:
            route.continue_()
        else:
            who.external.append(request.url)
            route.abort()

    context.route("**/*", only_local)
    page.on("console", lambda m: who.console_errors.append(m.text) if m.type == "error" else None)
    page.set_default_timeout(20_000)
    yield who
    context.close()
    assert who.external == [], f"the console reached outside 127.0.0.1: {who.external}"


@pytest.fixture
def marketer(browser: Browser) -> Iterator[Marketer]:
    with open_console(browser, viewport=DESKTOP) as who:
        yield who


def sign_in(page: Page, stack: ConsoleStack, email: str | None = None) -> None:
    page.goto(stack.url)
    form = page.get_by_test_id("sign-in")
    form.get_by_label("Email").fill(email or stack.admin_email)
    form.get_by_label("Password").fill(ADMIN_PASSWORD)
    form.get_by_role("button", name="Sign in").click()


@pytest.fixture
def forget_campaign(
    db: firestore.Client, cleanup: list[Callable[[], object]]
) -> Callable[[str], None]:
    """Register, before the console creates it, the deletion of a campaign and of its jobs and
    audit entries."""

    def forget(campaign_id: str) -> None:
        def delete() -> None:
            delete_tree(db, campaign_ref(db, campaign_id))
            for collection in (jobs_collection(db), audit_collection(db)):
                for snapshot in collection.where(
                    filter=FieldFilter("campaign_id", "==", campaign_id)
                ).stream():
                    snapshot.reference.delete()

        cleanup.append(delete)

    return forget


def local_minute(moment: datetime) -> str:
    """What an <input type=datetime-local> holds for `moment` in the browser's time zone (UTC
    in the test browser)."""
    return moment.strftime("%Y-%m-%dT%H:%M")


def create_campaign(page: Page, campaign_id: str, title: str) -> None:
    page.get_by_test_id("new-campaign").click()
    form = page.get_by_test_id("campaign-form")
    form.get_by_label("Title").fill(title)
    form.get_by_label("Campaign id (optional)").fill(campaign_id)
    form.get_by_test_id("save").click()
    expect(page.locator("#campaign-id")).to_have_text(campaign_id)


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations of the page as it is now."""
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("async () => (await axe.run(document)).violations")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:5]}
        for v in result
        if v["impact"] in ("serious", "critical")
    ]


# --- sign-in ----------------------------------------------------------------------------------


def test_only_admins_get_in(
    browser: Browser, console_stack: ConsoleStack, auth_users: AuthEmulatorClient
) -> None:
    email = f"shopper-{secrets.token_hex(3)}@codedrop.test"
    auth_users.ensure_user(email, ADMIN_PASSWORD)
    with open_console(browser, viewport=DESKTOP) as someone:
        page = someone.page
        sign_in(page, console_stack, "nobody@codedrop.test")
        expect(page.locator("#sign-in-error")).to_have_text(
            "That email and password do not match an account."
        )
        sign_in(page, console_stack, email)
        expect(page.get_by_test_id("not-allowed")).to_be_visible()
        expect(page.get_by_test_id("not-allowed")).to_contain_text(email)
        expect(page.get_by_test_id("campaign-list")).to_be_hidden()


def test_an_expired_sign_in_asks_to_sign_in_again(
    marketer: Marketer, console_stack: ConsoleStack
) -> None:
    page = marketer.page
    sign_in(page, console_stack)
    expect(page.get_by_test_id("campaign-list")).to_be_visible()
    # The refresh token no longer works (revoked, or the session outlived it): admin_api
    # refuses the ID token and the SDK cannot get another.
    page.route(
        f"{console_stack.admin_api}/**",
        lambda route: route.fulfill(
            status=401,
            content_type="application/json",
            headers={"Access-Control-Allow-Origin": "*"},
            body='{"error_code": "UNAUTHENTICATED", "error_message": "expired"}',
        ),
    )
    page.route(
        "**/securetoken.googleapis.com/**",
        lambda route: route.fulfill(
            status=400,
            content_type="application/json",
            headers={"Access-Control-Allow-Origin": "*"},
            body='{"error": {"code": 400, "message": "TOKEN_EXPIRED"}}',
        ),
    )
    page.reload()
    expect(page.get_by_test_id("sign-in")).to_be_visible()
    expect(page.locator("#notice")).to_have_text(
        "Your sign-in has expired. Sign in again to carry on."
    )


# --- campaigns --------------------------------------------------------------------------------


def test_a_save_over_another_admins_edit_is_refused_in_words(
    marketer: Marketer,
    console_stack: ConsoleStack,
    forget_campaign: Callable[[str], None],
) -> None:
    page = marketer.page
    campaign_id = f"t-{secrets.token_hex(5)}"
    forget_campaign(campaign_id)
    sign_in(page, console_stack)
    create_campaign(page, campaign_id, "Autumn drop")
    page.locator(".tabs").get_by_role("link", name="Settings").click()
    form = page.get_by_test_id("campaign-form")
    expect(form.get_by_label("Title")).to_have_value("Autumn drop")
    # Another admin renames it meanwhile (their token, their If-Match).
    other = console_stack.auth.sign_in(console_stack.admin_email, ADMIN_PASSWORD)
    answer = requests.patch(
        f"{console_stack.admin_api}/v1/campaigns/{campaign_id}",
        json={"title": "Autumn drop (final)"},
        headers={"Authorization": f"Bearer {other.id_token}", "If-Match": '"1"'},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text

    form.get_by_label("Codes per shopper").fill("2")
    form.get_by_test_id("save").click()

    error = form.get_by_role("alert")
    expect(error).to_contain_text(
        "Someone else changed this campaign while you were editing it. Your changes were not saved"
    )
    expect(form.get_by_test_id("conflict-changes")).to_contain_text(
        "title: Autumn drop → Autumn drop (final)"
    )
    answer = requests.get(
        f"{console_stack.admin_api}/v1/campaigns/{campaign_id}",
        headers={"Authorization": f"Bearer {other.id_token}"},
        timeout=30,
    )
    assert answer.json()["max_per_user"] == 1  # not silently applied
    # Saved again, knowingly: applied over the other admin's version.
    form.get_by_test_id("save").click()
    expect(page.locator("#notice")).to_have_text("Changes saved.")
    # Chromium logs the refused save's 409; nothing else went wrong.
    assert all("409" in e for e in marketer.console_errors), marketer.console_errors


# --- the whole drop ---------------------------------------------------------------------------


def test_a_marketer_runs_a_drop(
    marketer: Marketer,
    console_stack: ConsoleStack,
    forget_campaign: Callable[[str], None],
    db: firestore.Client,
    pump_events: Callable[[], list[dict[str, Any]]],
    tmp_path: Path,
) -> None:
    page = marketer.page
    campaign_id = f"t-{secrets.token_hex(5)}"
    forget_campaign(campaign_id)
    sign_in(page, console_stack)
    expect(page.get_by_test_id("campaign-list")).to_be_visible()

    # Create: the sale opens in an hour by default.
    create_campaign(page, campaign_id, "Midnight sneaker drop")
    expect(page.locator("#campaign-status")).to_have_text("Scheduled")

    # Upload a CSV with three invalid rows and a repeated one among eight good codes.
    good = [f"SNKR-{n:04d}" for n in range(1, 9)]
    lines = ["code", *good[:3], "BAD CODE", *good[3:6], "X" * 200, '"OPEN', *good[6:], good[1]]
    bad_lines = {
        5: "whitespace inside the code",
        9: "code longer than",
        10: "unterminated quote",
        13: "duplicate of line 3",
    }
    upload: FilePayload = {
        "name": "sneakers.csv",
        "mimeType": "text/csv",
        "buffer": "\n".join(lines).encode(),
    }
    page.get_by_test_id("upload-input").set_input_files(files=[upload])
    expect(page.get_by_test_id("upload-progress")).to_have_attribute("value", "100")
    job = page.get_by_test_id("job").first
    expect(job.get_by_test_id("job-state")).to_have_attribute("data-state", "done", timeout=60_000)
    rejected = job.get_by_test_id("job-rejected").locator("tbody tr")
    expect(rejected).to_have_count(len(bad_lines))
    for row, (line, reason) in zip(rejected.all(), bad_lines.items(), strict=True):
        expect(row.locator("td").nth(0)).to_have_text(str(line))
        expect(row.locator("td").nth(1)).to_contain_text(reason)
    with page.expect_download() as download:
        job.get_by_test_id("download-rejected").click()
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert sorted(int(r["line"]) for r in rows) == list(bad_lines)

    # Start the sale: the window now opens this minute.
    page.locator(".tabs").get_by_role("link", name="Settings").click()
    form = page.get_by_test_id("campaign-form")
    form.get_by_label("Sale opens").fill(local_minute(utcnow()))
    form.get_by_test_id("save").click()
    expect(page.locator("#campaign-status")).to_have_text("On sale")

    # Watch: remaining falls while shoppers claim through the API.
    page.locator(".tabs").get_by_role("link", name="Live").click()
    expect(page.get_by_test_id("stat-remaining")).to_have_text(str(len(good)))
    for _ in range(SHOPPERS):
        assert claim_over_http(console_stack, campaign_id).status_code == 201
    pump_events()
    expect(page.get_by_test_id("stat-remaining")).to_have_text(str(len(good) - SHOPPERS))
    expect(page.get_by_test_id("stat-claimed")).to_have_text(str(SHOPPERS))
    expect(page.get_by_test_id("burn-down").locator("canvas")).to_be_visible()

    # Pause: claims are refused; resume: they are served again.
    page.get_by_test_id("pause").click()
    expect(page.locator("#campaign-status")).to_have_text("Paused")
    refused = claim_over_http(console_stack, campaign_id)
    assert refused.status_code == 409
    assert refused.json()["error_code"] == "CAMPAIGN_NOT_ACTIVE"
    page.get_by_test_id("resume").click()
    expect(page.locator("#campaign-status")).to_have_text("On sale")
    assert claim_over_http(console_stack, campaign_id).status_code == 201

    # Export the claims: the downloaded CSV is what Firestore holds.
    page.locator(".tabs").get_by_role("link", name="Exports").click()
    page.get_by_label("What to export").select_option("claims")
    page.get_by_test_id("export").click()
    with page.expect_download(timeout=60_000) as download:
        page.get_by_test_id("export-download").first.click()
    exported = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    stored = [s.to_dict() or {} for s in claims_collection(db, campaign_id).stream()]
    assert sorted(r["code"] for r in exported) == sorted(str(c["code"]) for c in stored)
    assert len(exported) == SHOPPERS + 1
    # Who claimed what, in the console too.
    page.locator(".tabs").get_by_role("link", name="Claims").click()
    listed = page.get_by_test_id("claims").locator("tbody tr")
    expect(listed).to_have_count(SHOPPERS + 1)
    codes = listed.locator("td:first-child").all_inner_texts()
    assert sorted(codes) == sorted(str(c["code"]) for c in stored)

    # Every one of those actions is in the audit log, newest first.
    page.locator(".tabs").get_by_role("link", name="Audit log").click()
    log = page.get_by_test_id("audit-log")
    expect(log.locator("li").first).to_have_attribute("data-action", "export")
    actions = log.locator("li").evaluate_all("items => items.map(i => i.dataset.action)")
    for action in ("create", "upload", "update", "pause", "resume", "export"):
        assert action in actions, actions
    assert actions.index("pause") > actions.index("resume") > actions.index("export") - 1
    expect(log).to_contain_text(console_stack.admin_email)
    assert marketer.console_errors == []


# The console's upload chunk (web/console/upload.js CHUNK_BYTES).
UPLOAD_CHUNK = 1024 * 1024


def test_an_interrupted_upload_resumes_from_what_the_bucket_holds(
    marketer: Marketer,
    console_stack: ConsoleStack,
    make_campaign: MakeCampaign,
    forget_campaign: Callable[[str], None],
    storage_client: StorageClient,
    tmp_path: Path,
) -> None:
    """The connection drops after the first chunk: the console retries, then stops and offers
    to resume; after a reload, choosing the same file asks the session what it holds and sends
    only the rest. The import sees every row once. Each row carries a note (a column the import
    ignores), so that the file passes one chunk with 6,500 codes rather than 20,000: a third of
    the codes to import, and to delete after."""
    campaign_id = make_campaign(title="Resumed upload")
    forget_campaign(campaign_id)
    codes = [f"RESUME-{n:05d}" for n in range(6_500)]
    note = "n" * 190
    path = tmp_path / "resumed.csv"
    path.write_text("code,note\n" + "".join(f"{code},{note}\n" for code in codes))  # 1.3 chunks
    size = path.stat().st_size
    assert UPLOAD_CHUNK < size < 2 * UPLOAD_CHUNK
    page = marketer.page
    sent: list[str] = []
    offline = {"on": True}

    def network(route: Any, request: Any) -> None:
        content_range = request.headers.get("content-range", "")
        if request.method == "PUT":
            sent.append(content_range)
            # Down after the first chunk: later chunks and status queries get no answer.
            if offline["on"] and not content_range.startswith("bytes 0-"):
                route.abort("internetdisconnected")
                return
        route.fallback()

    page.route(re.compile(r".*[?&]upload_id="), network)
    sign_in(page, console_stack)
    page.goto(f"{console_stack.url}#/c/{campaign_id}/codes")
    page.get_by_test_id("upload-input").set_input_files(path)
    expect(page.get_by_test_id("upload-resume")).to_be_visible(timeout=30_000)
    stopped_at = f"stopped at {100 * UPLOAD_CHUNK // size}%"
    expect(page.locator(".form-error", has_text=stopped_at)).to_be_visible()
    assert sent[0] == f"bytes 0-{UPLOAD_CHUNK - 1}/{size}"
    # Retried three times, each after asking the session what it holds.
    assert sent.count(f"bytes */{size}") == 3
    assert f"bytes {UPLOAD_CHUNK}-{size - 1}/{size}" in sent

    offline["on"] = False
    interrupted = len(sent)
    page.reload()
    page.goto(f"{console_stack.url}#/c/{campaign_id}/codes")
    page.get_by_test_id("upload-input").set_input_files(path)
    job = page.get_by_test_id("job").first
    expect(job.get_by_test_id("job-state")).to_have_attribute("data-state", "done", timeout=90_000)

    # Never the first chunk again: the rest of the file only.
    assert sent[interrupted:] == [f"bytes */{size}", f"bytes {UPLOAD_CHUNK}-{size - 1}/{size}"]
    counts = job.locator("dl.counts dd").all_inner_texts()
    assert [re.sub(r"\D", "", c) for c in counts] == [str(len(codes)), str(len(codes)), "0", "0"]
    [stored] = list(storage_client.list_blobs(BUCKET, prefix=f"imports/{campaign_id}/"))
    assert stored.download_as_bytes() == path.read_bytes()
    assert page.evaluate("localStorage.getItem('codedrop.uploads')") == "{}"
    # Chromium logs each request that got no answer; nothing else went wrong.
    assert [e for e in marketer.console_errors if "ERR_INTERNET_DISCONNECTED" not in e] == []


def test_webhooks_show_their_secret_once(
    marketer: Marketer, console_stack: ConsoleStack, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=1)
    page = marketer.page
    page.on("dialog", lambda dialog: dialog.accept())
    sign_in(page, console_stack)
    expect(page.get_by_test_id("campaign-list")).to_be_visible()
    page.goto(f"{console_stack.url}#/c/{campaign_id}/webhooks")
    webhooks = page.get_by_test_id("webhooks")
    webhooks.get_by_label("Endpoint address").fill("https://127.0.0.1:9/codedrop")
    webhooks.get_by_label("The sale sells out").check()
    webhooks.get_by_role("button", name="Add the webhook").click()

    secret = webhooks.get_by_test_id("webhook-secret")
    expect(secret).not_to_be_empty()
    expect(webhooks).to_contain_text("Copy this signing secret now: it is shown only once.")
    endpoint = webhooks.locator("article", has_text="https://127.0.0.1:9/codedrop")
    expect(endpoint).to_contain_text("The sale sells out, A code is claimed")
    endpoint.get_by_role("button", name="Recent deliveries").click()
    expect(endpoint).to_contain_text("Nothing delivered yet.")
    endpoint.get_by_role("button", name="Send a test event").click()
    expect(endpoint.locator("tbody tr")).to_have_count(1)
    expect(endpoint.locator("tbody tr")).to_contain_text("webhook.test")
    first_secret = secret.inner_text()
    endpoint.get_by_role("button", name="New secret").click()
    expect(secret).not_to_have_text(first_secret)
    expect(secret).not_to_be_empty()
    # Listed again (another visit), the secret is nowhere.
    page.reload()
    expect(webhooks.locator("article")).to_have_count(1)
    expect(webhooks.get_by_test_id("webhook-secret")).to_have_count(0)
    webhooks.locator("article").get_by_role("button", name="Delete").click()
    expect(webhooks).to_contain_text("No webhooks yet.")

    page.locator(".tabs").get_by_role("link", name="Audit log").click()
    entries = page.get_by_test_id("audit-log").locator("li")
    expect(entries).to_have_count(4)
    actions = entries.evaluate_all("items => items.map(i => i.dataset.action)")
    assert actions == ["webhook.delete", "webhook.rotate_secret", "webhook.test", "webhook.create"]
    assert marketer.console_errors == []


def test_a_sale_ended_now_then_archived_leaves_the_list_then_is_deleted(
    marketer: Marketer,
    console_stack: ConsoleStack,
    make_campaign: MakeCampaign,
    db: firestore.Client,
    forget_campaign: Callable[[str], None],
) -> None:
    campaign_id = make_campaign(codes=2, title="Over soon")
    forget_campaign(campaign_id)
    page = marketer.page
    # The delete button asks for the campaign's id to be typed; the others for an OK.
    page.on(
        "dialog",
        lambda dialog: dialog.accept(campaign_id if dialog.type == "prompt" else None),
    )
    sign_in(page, console_stack)
    row = page.locator(f"[data-testid=campaign-row][data-campaign-id={campaign_id}]")
    row.get_by_role("link").click()
    expect(page.get_by_test_id("delete")).to_be_hidden()  # the sale is running
    page.get_by_test_id("end").click()
    expect(page.locator("#campaign-status")).to_have_text("Ended")
    expect(page.get_by_test_id("pause")).to_be_hidden()
    expect(page.get_by_test_id("delete")).to_be_hidden()  # ended, not archived
    refused = claim_over_http(console_stack, campaign_id)
    assert refused.json()["error_code"] == "CAMPAIGN_NOT_ACTIVE"
    page.get_by_test_id("archive").click()
    expect(page.locator("#notice")).to_have_text("“Over soon” is archived.")
    expect(page.get_by_test_id("campaign-list")).to_be_visible()
    expect(row).to_have_count(0)

    page.get_by_test_id("show-archived").check()
    row.get_by_role("link").click()
    page.get_by_test_id("delete").click()
    expect(page.locator("#notice")).to_contain_text("“Over soon” is deleted")
    page.get_by_test_id("show-archived").check()
    expect(page.get_by_test_id("campaign-list")).to_be_visible()
    expect(row).to_have_count(0)
    # The job runs from its request object's event (the storage notifier here).
    deadline = time.monotonic() + 30
    while campaign_ref(db, campaign_id).get().exists:
        assert time.monotonic() < deadline, "the deletion job did not remove the campaign"
        time.sleep(0.2)
    assert list(claims_collection(db, campaign_id).limit(1).stream()) == []
    page.get_by_role("link", name="Audit log").first.click()
    entry = page.get_by_test_id("audit-log").locator("li[data-action=delete]", has_text=campaign_id)
    expect(entry).to_contain_text("Deleted the campaign")
    assert marketer.console_errors == []


def test_owners_invite_and_remove_admins(
    browser: Browser, console_stack: ConsoleStack, auth_users: AuthEmulatorClient
) -> None:
    owner = f"owner-{secrets.token_hex(3)}@codedrop.test"
    auth_users.ensure_user(owner, ADMIN_PASSWORD, claims={"admin": True, "owner": True})
    invited = f"colleague-{secrets.token_hex(3)}@codedrop.test"
    with open_console(browser, viewport=DESKTOP) as who:
        page = who.page
        page.on("dialog", lambda dialog: dialog.accept())
        sign_in(page, console_stack, owner)
        page.get_by_role("link", name="Admins").click()
        admins = page.get_by_test_id("admins")
        admins.get_by_label("Email").fill(invited)
        admins.get_by_role("button", name="Invite").click()
        row = admins.locator("tbody tr", has_text=invited)
        expect(row).to_contain_text(f"by {owner}")
        [user] = [u for u in auth_users.users() if u.get("email") == invited]
        assert '"admin":true' in user.get("customAttributes", "").replace(" ", "")

        row.get_by_role("button", name=f"Remove {invited}").click()
        expect(row).to_have_count(0)
        [user] = [u for u in auth_users.users() if u.get("email") == invited]
        assert '"admin"' not in user.get("customAttributes", "")
        assert who.console_errors == []
    # An admin who is not an owner sees who the admins are, and no way to change them.
    with open_console(browser, viewport=DESKTOP) as who:
        page = who.page
        sign_in(page, console_stack)
        page.get_by_role("link", name="Admins").click()
        admins = page.get_by_test_id("admins")
        expect(admins).to_contain_text("Only owners invite and remove admins.")
        expect(admins.get_by_role("button", name="Invite")).to_have_count(0)


# --- accessibility, phone, screenshots ------------------------------------------------------


def test_no_serious_accessibility_violation_on_desktop_and_phone(
    browser: Browser,
    console_stack: ConsoleStack,
    make_campaign: MakeCampaign,
    pump_events: Callable[[], list[dict[str, Any]]],
) -> None:
    """axe-core on every view, on a desktop and on a phone, during a sale that is selling."""
    campaign_id = make_campaign(codes=40, title="Spring flash sale")
    shots = os.environ.get("CODEDROP_CONSOLE_SCREENSHOTS")
    left = 40
    for name, options in (
        ("console", {"viewport": DESKTOP}),
        ("console-phone", {"viewport": PHONE, "is_mobile": True, "has_touch": True}),
    ):
        with open_console(browser, **options) as who:
            page = who.page
            sign_in(page, console_stack)
            expect(page.get_by_test_id("campaign-row").first).to_be_visible()
            assert axe_violations(page) == [], name
            page.goto(f"{console_stack.url}#/c/{campaign_id}/live")
            for wave in (4, 7, 5):  # shoppers claim in waves; the chart steps down
                expect(page.get_by_test_id("stat-remaining")).to_have_text(str(left))
                for _ in range(wave):
                    assert claim_over_http(console_stack, campaign_id).status_code == 201
                pump_events()
                left -= wave
            expect(page.get_by_test_id("stat-remaining")).to_have_text(str(left))
            assert axe_violations(page) == [], name
            if shots:
                page.screenshot(path=str(REPO / shots / f"{name}.png"), full_page=True)
            for tab in ("Settings", "Codes", "Claims", "Exports", "Webhooks", "Audit log"):
                page.locator(".tabs").get_by_role("link", name=tab).click()
                expect(page.locator(".tabs [aria-current=page]")).to_have_text(tab)
                assert axe_violations(page) == [], f"{name}: {tab}"
            for view, ready in (("admins", "admins"), ("audit", "audit-log")):
                page.goto(f"{console_stack.url}#/{view}")
                expect(page.get_by_test_id(ready)).to_be_visible()
                assert axe_violations(page) == [], f"{name}: {view}"
            assert who.console_errors == []


def test_the_console_is_usable_with_the_keyboard(
    marketer: Marketer, console_stack: ConsoleStack
) -> None:
    page = marketer.page
    page.goto(console_stack.url)
    expect(page.get_by_test_id("sign-in")).to_be_visible()
    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_text("Skip to the content")
    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_attribute("id", "email")
    page.keyboard.type(console_stack.admin_email)
    page.keyboard.press("Tab")
    page.keyboard.type(ADMIN_PASSWORD)
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("campaign-list")).to_be_visible()
    page.get_by_test_id("new-campaign").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("campaign-form").get_by_label("Title")).to_be_focused()


def test_phone_layout_has_no_sideways_scroll(
    browser: Browser, console_stack: ConsoleStack, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=3, title="A sale with a rather long title for a phone")
    with open_console(browser, viewport=PHONE, is_mobile=True, has_touch=True) as who:
        page = who.page
        sign_in(page, console_stack)
        row = page.locator(f"[data-testid=campaign-row][data-campaign-id={campaign_id}]")
        expect(row).to_be_visible()
        expect(row.locator("td").nth(4)).to_have_text("3")
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        row.get_by_role("link").click()
        expect(page.get_by_test_id("stat-remaining")).to_have_text("3")
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
