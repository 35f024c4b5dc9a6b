"""The example landing page in real Chromium: shoppers signed in by the Auth emulator claim
codes from claim_api over HTTP; what they see is checked against Firestore."""

from __future__ import annotations

import re
import secrets
import time
from datetime import timedelta

import pytest
from google.cloud import firestore
from playwright.sync_api import Page, expect

from shared.claims.identity import IdentityKind
from shared.clock import utcnow
from shared.gcp.firestore import claims_collection
from tests.browser.conftest import Shopper, WebStack, claim_over_http
from tests.support.stack import MakeCampaign

pytestmark = [pytest.mark.emulator, pytest.mark.browser]


def claims_of(db: firestore.Client, campaign_id: str) -> list[dict[str, object]]:
    return [s.to_dict() or {} for s in claims_collection(db, campaign_id).stream()]


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
    page, first = shopper.claim(campaign_id)

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
    # Three shoppers ahead, queued (a new room queues its first moments, and they are more than
    # a second's worth), so the room engages.
    answers = [claim_over_http(web_stack, campaign_id).status_code for _ in range(3)]
    assert 429 in answers
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


# --- bot defense: phone sign-in and App Check ------------------------------------------------


def new_phone_number() -> str:
    """A number of its own per test: the Auth emulator's accounts outlive each test."""
    return f"+1555{secrets.randbelow(10**7):07d}"


def sign_in_by_phone(page: Page, stack: WebStack, phone_number: str) -> None:
    """Claim, and sign in with the phone number and the code the Auth emulator made for it
    (keyboard only: the form must work without a pointer)."""
    expect(page.get_by_test_id("claim-button")).to_be_enabled()
    page.get_by_test_id("claim-button").focus()
    page.keyboard.press("Enter")
    phone = page.get_by_test_id("phone")
    expect(phone).to_be_focused()
    expect(page.get_by_label("Phone number")).to_be_visible()
    expect(page.get_by_test_id("claim-button")).to_be_hidden()
    page.keyboard.type("555 0100")  # no country code: refused with a message, focus stays
    page.keyboard.press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("country code")
    expect(phone).to_have_attribute("aria-invalid", "true")
    expect(phone).to_be_focused()
    phone.fill("")
    page.keyboard.type(phone_number)
    page.keyboard.press("Enter")
    code_field = page.get_by_test_id("phone-code")
    expect(code_field).to_be_focused()
    deadline = time.monotonic() + 20
    while (code := stack.auth.verification_code(phone_number)) is None:
        assert time.monotonic() < deadline, "the Auth emulator made no verification code"
        time.sleep(0.2)
    page.keyboard.type(code)
    page.keyboard.press("Enter")


def accounts_with(stack: WebStack, phone_number: str) -> list[str]:
    return [u["localId"] for u in stack.auth.users() if u.get("phoneNumber") == phone_number]


def test_a_phone_sale_signs_shoppers_in_by_phone_and_one_phone_gets_one_code(
    shopper: Shopper,
    second_shopper: Shopper,
    make_campaign: MakeCampaign,
    web_stack: WebStack,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign(codes=5, identity=IdentityKind.PHONE, require_app_check=True)
    phone_number = new_phone_number()
    page = shopper.open(campaign_id)

    sign_in_by_phone(page, web_stack, phone_number)

    code = page.get_by_test_id("code")
    expect(code).to_have_text(re.compile(rf"^{campaign_id}-\d{{5}}$"))
    expect(page.get_by_test_id("sign-in")).to_be_hidden()
    [claim] = shopper.claims_sent()
    response = claim.response()
    assert response is not None
    assert response.status == 201
    # The page fetched a token from the development key set and sent it: the sale requires it.
    assert shopper.sent(r"/token$")
    assert claim.headers.get("x-firebase-appcheck")
    [first_account] = accounts_with(web_stack, phone_number)
    # The SDK asks for a reCAPTCHA Enterprise config first, which the emulator does not
    # implement (501), then uses its stand-in verifier: the one error the console may show.
    assert [e for e in shopper.console_errors if "/v2/recaptchaConfig" not in e] == []

    # The same person makes a new account with the same phone number (the old one deleted, as
    # Firebase allows one account per number): the sale counts the phone, not the account.
    web_stack.auth.delete_user(first_account)
    again = second_shopper.open(campaign_id)
    sign_in_by_phone(again, web_stack, phone_number)

    expect(again.get_by_test_id("code")).to_have_text(code.inner_text())
    [second_claim] = second_shopper.claims_sent()
    second_response = second_claim.response()
    assert second_response is not None
    assert second_response.status == 200
    [second_account] = accounts_with(web_stack, phone_number)
    assert second_account != first_account
    assert [c["code"] for c in claims_of(db, campaign_id)] == [code.inner_text()]


def test_the_page_promises_the_campaigns_own_limit(
    shopper: Shopper, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=5, max_per_user=2)

    page = shopper.open(campaign_id)

    expect(page.get_by_test_id("claim-button")).to_be_enabled()
    expect(page.locator("#limit")).to_have_text("Up to 2 codes per shopper.")


def test_an_unknown_campaign_says_so_without_stock_or_a_button(shopper: Shopper) -> None:
    page = shopper.open("no-such-sale")

    expect(page.get_by_test_id("status")).to_have_text(re.compile("not|exist|find", re.I))
    expect(page.get_by_test_id("claim-button")).to_be_hidden()
    expect(page.get_by_test_id("remaining")).to_be_hidden()
    assert shopper.claims_sent() == []
