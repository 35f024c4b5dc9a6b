"""Keeping the code on another device, in real Chromium on the Auth emulator: an anonymous
shopper links an email address by email link, or a phone number by text message
(web/example/keep.js), and in another browser, signed in with it, the page shows the same
code."""

from __future__ import annotations

import secrets
import time
import uuid
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
import requests
from google.cloud import firestore
from playwright.sync_api import expect

from shared.gcp.firestore import claims_collection
from tests.browser.conftest import Shopper, WebStack
from tests.support.stack import MakeCampaign

pytestmark = [pytest.mark.emulator, pytest.mark.browser]


def email_link(stack: WebStack, email: str, *, used: set[str]) -> str:
    """The newest sign-in link the Auth emulator made for `email` (it sends no mail; its REST
    API lists them), as the page receives it: Firebase's action handler opens the link's
    continue URL with the link's parameters added."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        answer = requests.get(
            f"{stack.auth.base}/emulator/v1/projects/{stack.auth.project}/oobCodes", timeout=30
        )
        answer.raise_for_status()
        links = [
            entry
            for entry in answer.json().get("oobCodes", [])
            if entry.get("email") == email
            and entry.get("requestType") == "EMAIL_SIGNIN"
            and entry["oobCode"] not in used
        ]
        if links:
            used.add(links[-1]["oobCode"])
            params = dict(parse_qsl(urlsplit(links[-1]["oobLink"]).query))
            page = params.pop("continueUrl")
            return f"{page}{'&' if '?' in page else '?'}{urlencode(params)}"
        time.sleep(0.2)
    raise AssertionError(f"the Auth emulator made no sign-in link for {email}")


def test_a_shopper_links_an_email_and_sees_the_same_code_in_another_browser(
    shopper: Shopper,
    second_shopper: Shopper,
    make_campaign: MakeCampaign,
    db: firestore.Client,
) -> None:
    campaign_id = make_campaign(codes=3)
    email = f"keep-{uuid.uuid4().hex[:8]}@example.com"
    used: set[str] = set()
    page, held = shopper.claim(campaign_id)
    keep = page.get_by_test_id("keep-code")
    expect(keep).to_contain_text("Keep your code on any device")

    page.get_by_test_id("keep-email").fill(email)
    page.get_by_test_id("keep-send").click()
    expect(page.get_by_test_id("keep-status")).to_contain_text(f"we sent a link to {email}")
    page.goto(email_link(shopper.stack, email, used=used))

    expect(page.get_by_test_id("keep-status")).to_contain_text(f"Saved to {email}")
    expect(page.get_by_test_id("code")).to_have_text(held)
    assert "oobCode" not in page.url  # the used link is gone from the address
    # One account: the anonymous shopper's, now with the address.
    [account] = [u for u in shopper.stack.auth.users() if u.get("email") == email]
    [claim] = [s.to_dict() or {} for s in claims_collection(db, campaign_id).stream()]
    assert claim["user_id"] == account["localId"]

    other = second_shopper.open(campaign_id)
    expect(other.get_by_test_id("claim-button")).to_be_enabled()
    expect(other.get_by_test_id("keep-code")).to_contain_text("Got a code on another device?")
    other.get_by_test_id("keep-email").fill(email)
    other.get_by_test_id("keep-send").click()
    expect(other.get_by_test_id("keep-status")).to_contain_text("Check your inbox")
    other.goto(email_link(second_shopper.stack, email, used=used))

    expect(other.get_by_test_id("code")).to_have_text(held)
    expect(other.get_by_test_id("keep-status")).to_contain_text(f"Saved to {email}")
    assert len(second_shopper.claims_sent()) == 0  # found with claims/me, never claimed
    assert [u["localId"] for u in shopper.stack.auth.users() if u.get("email") == email] == [
        account["localId"]
    ]
    assert shopper.console_errors == second_shopper.console_errors == []


def text_code(stack: WebStack, phone_number: str, *, used: set[str]) -> str:
    """A verification code the Auth emulator made for `phone_number` and not used yet (it
    sends no text message; its REST API lists the codes)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        answer = requests.get(
            f"{stack.auth.base}/emulator/v1/projects/{stack.auth.project}/verificationCodes",
            timeout=30,
        )
        answer.raise_for_status()
        fresh = [
            entry["code"]
            for entry in answer.json().get("verificationCodes", [])
            if entry.get("phoneNumber") == phone_number and entry["code"] not in used
        ]
        if fresh:
            used.add(fresh[-1])
            return str(fresh[-1])
        time.sleep(0.2)
    raise AssertionError(f"the Auth emulator made no verification code for {phone_number}")


def test_a_shopper_links_a_phone_and_sees_the_same_code_in_another_browser(
    shopper: Shopper, second_shopper: Shopper, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=3)
    phone_number = f"+1555{secrets.randbelow(10**7):07d}"
    used: set[str] = set()
    page, held = shopper.claim(campaign_id)

    page.get_by_test_id("keep-phone").fill(phone_number)
    page.get_by_test_id("keep-phone-send").click()
    expect(page.get_by_test_id("keep-phone-code")).to_be_focused()
    page.keyboard.type(text_code(shopper.stack, phone_number, used=used))
    page.keyboard.press("Enter")

    expect(page.get_by_test_id("keep-status")).to_contain_text(f"Saved to {phone_number}")
    [account] = [u for u in shopper.stack.auth.users() if u.get("phoneNumber") == phone_number]

    other = second_shopper.open(campaign_id)
    expect(other.get_by_test_id("claim-button")).to_be_enabled()
    other.get_by_test_id("keep-phone").fill(phone_number)
    other.get_by_test_id("keep-phone-send").click()
    expect(other.get_by_test_id("keep-phone-code")).to_be_focused()
    other.get_by_test_id("keep-phone-code").fill(text_code(shopper.stack, phone_number, used=used))
    other.get_by_test_id("keep-phone-verify").click()

    expect(other.get_by_test_id("code")).to_have_text(held)
    assert len(second_shopper.claims_sent()) == 0
    assert [
        u["localId"] for u in shopper.stack.auth.users() if u.get("phoneNumber") == phone_number
    ] == [account["localId"]]
    # The SDK asks for a reCAPTCHA Enterprise config first, which the emulator does not
    # implement (501), then uses its stand-in verifier: the one error the console may show.
    for who in (shopper, second_shopper):
        assert [e for e in who.console_errors if "/v2/recaptchaConfig" not in e] == []
