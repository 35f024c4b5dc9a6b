"""The example landing page in real Chromium: shoppers signed in by the Auth emulator claim
codes from claim_api over HTTP; what they see is checked against Firestore."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import requests
from google.cloud import firestore
from playwright.sync_api import expect

from shared.clock import utcnow
from shared.gcp.firestore import claims_collection
from tests.browser.conftest import Shopper, WebStack
from tests.support.stack import MakeCampaign

pytestmark = [pytest.mark.emulator, pytest.mark.browser]


def claims_of(db: firestore.Client, campaign_id: str) -> list[dict[str, object]]:
    return [s.to_dict() or {} for s in claims_collection(db, campaign_id).stream()]


def claim_over_http(stack: WebStack, campaign_id: str) -> requests.Response:
    """Another shopper, signed in anonymously on the Auth emulator, claims without a browser."""
    user = stack.auth.sign_up_anonymous()
    return requests.post(
        f"{stack.api_url}/v1/campaigns/{campaign_id}/claims",
        headers={"Authorization": f"Bearer {user.id_token}"},
        timeout=30,
    )


def test_a_shopper_claims_and_sees_the_code(
    shopper: Shopper, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    campaign_id = make_campaign(codes=5, title="Spring flash sale")
    page = shopper.open(campaign_id)
    button = page.get_by_test_id("claim-button")
    expect(button).to_be_enabled()
    expect(page.get_by_role("heading", level=1)).to_have_text("Spring flash sale")
    expect(page.get_by_test_id("remaining")).to_have_text("5")

    button.click()

    code = page.get_by_test_id("code")
    expect(code).to_have_text(re.compile(rf"^{campaign_id}-\d{{5}}$"))
    expect(page.get_by_test_id("status")).to_have_text("You got it! Here is your code.")
    [claim] = claims_of(db, campaign_id)
    assert claim["code"] == code.inner_text()
    # The shopper was signed in by the Auth emulator, and the claim is theirs.
    users = {u["localId"] for u in shopper.stack.auth.users()}
    assert claim["user_id"] in users
    assert shopper.sent(r"/identitytoolkit\.googleapis\.com/v1/accounts:signUp")
    assert shopper.console_errors == []


def test_a_reload_shows_the_same_code(
    shopper: Shopper, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    campaign_id = make_campaign(codes=5)
    page = shopper.open(campaign_id)
    page.get_by_test_id("claim-button").click()
    code = page.get_by_test_id("code")
    expect(code).to_have_text(re.compile(campaign_id))
    first = code.inner_text()

    page.reload()

    expect(page.get_by_test_id("code")).to_have_text(first)
    assert len(shopper.claims_sent()) == 1  # found with claims/me, not claimed again
    assert shopper.sent(r"/claims/me$")
    assert len(claims_of(db, campaign_id)) == 1


def test_a_double_click_sends_one_claim(
    shopper: Shopper, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    campaign_id = make_campaign(codes=5)
    page = shopper.open(campaign_id)
    button = page.get_by_test_id("claim-button")
    expect(button).to_be_enabled()

    button.dblclick()

    expect(page.get_by_test_id("code")).to_have_text(re.compile(campaign_id))
    assert len(shopper.claims_sent()) == 1
    assert len(claims_of(db, campaign_id)) == 1
    # One shopper signed in once: a second anonymous user would be a second shopper.
    assert len(shopper.sent(r"accounts:signUp")) == 1


def test_the_waiting_room_makes_the_shopper_wait_then_shows_the_code(
    shopper: Shopper, make_campaign: MakeCampaign, web_stack: WebStack, db: firestore.Client
) -> None:
    campaign_id = make_campaign(codes=10, waiting_room_enabled=True, admissions_per_second=1)
    # Three shoppers ahead: the first passes at once, the next two queue, so the room engages.
    answers = [claim_over_http(web_stack, campaign_id).status_code for _ in range(3)]
    assert answers[0] == 201
    assert 429 in answers[1:]
    page = shopper.open(campaign_id)
    page.get_by_test_id("claim-button").click()

    waiting = page.get_by_test_id("waiting")
    expect(waiting).to_be_visible()
    expect(page.locator("#estimate")).to_have_text(re.compile(r"second|Almost|Hang tight"))
    expect(page.get_by_test_id("code")).to_have_text(re.compile(campaign_id), timeout=30_000)
    expect(waiting).to_be_hidden()

    sent = shopper.claims_sent()
    assert len(sent) >= 2
    tickets = [r.headers.get("x-waiting-room-ticket") for r in sent]
    assert tickets[0] is None
    assert all(tickets[1:]), "the ticket goes back with every retry"
    assert len({r.headers["idempotency-key"] for r in sent}) == 1
    mine = [
        c
        for c in claims_of(db, campaign_id)
        if c["code"] == page.get_by_test_id("code").inner_text()
    ]
    assert len(mine) == 1


def test_sold_out_shows_the_sold_out_state(
    shopper: Shopper, make_campaign: MakeCampaign, web_stack: WebStack
) -> None:
    campaign_id = make_campaign(codes=1)
    page = shopper.open(campaign_id)
    expect(page.get_by_test_id("remaining")).to_have_text("1")
    assert claim_over_http(web_stack, campaign_id).status_code == 201  # someone was quicker

    page.get_by_test_id("claim-button").click()

    expect(page.get_by_test_id("sold-out")).to_be_visible()
    expect(page.get_by_test_id("claim-button")).to_be_hidden()
    expect(page.get_by_test_id("code")).to_be_hidden()
    assert shopper.status() == "sold_out"

    page.reload()  # the campaign itself now says sold out: no button at all
    expect(page.get_by_test_id("sold-out")).to_be_visible()
    expect(page.get_by_test_id("claim-button")).to_be_hidden()


def test_a_campaign_that_has_not_started_counts_down_then_claims(
    shopper: Shopper, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    starts_at = utcnow() + timedelta(seconds=8)
    campaign_id = make_campaign(codes=3, starts_at=starts_at)
    page = shopper.open(campaign_id)
    countdown = page.get_by_test_id("countdown")
    button = page.get_by_test_id("claim-button")
    expect(countdown).to_be_visible()
    expect(button).to_be_disabled()
    seconds = page.locator('[data-part="seconds"]')
    before = seconds.inner_text()
    expect(seconds).not_to_have_text(before)  # it ticks

    expect(button).to_be_enabled(timeout=20_000)
    assert utcnow() >= starts_at - timedelta(seconds=1)
    expect(countdown).to_be_hidden()
    button.click()

    expect(page.get_by_test_id("code")).to_have_text(re.compile(campaign_id))
    assert len(claims_of(db, campaign_id)) == 1


def test_a_keyboard_shopper_claims_and_copies_the_code(
    shopper: Shopper, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=2)
    shopper.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = shopper.open(campaign_id)
    expect(page.get_by_test_id("claim-button")).to_be_enabled()

    page.keyboard.press("Tab")  # the skip link comes first
    page.keyboard.press("Tab")
    expect(page.get_by_test_id("claim-button")).to_be_focused()
    page.keyboard.press("Enter")

    code = page.get_by_test_id("code")
    expect(code).to_have_text(re.compile(campaign_id))
    copy = page.get_by_test_id("copy-button")
    expect(copy).to_be_focused()  # focus moves to the next thing to do
    page.keyboard.press("Enter")
    expect(copy).to_have_text("Copied!")
    expect(page.locator("#announce")).to_contain_text(code.inner_text())
    assert page.evaluate("navigator.clipboard.readText()") == code.inner_text()
