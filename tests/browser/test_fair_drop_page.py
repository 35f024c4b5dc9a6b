"""A fair drop's pre-queue on the example landing page in real Chromium: the shopper joins
before the start and sees their entry; at the start they wait while the draw is made, then see
their drawn place and get a code; the proof link leads to the published draw."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta

import pytest
import requests
from google.cloud import firestore
from playwright.sync_api import expect

from shared.clock import utcnow
from shared.gcp.firestore import campaign_ref
from tests.browser.conftest import Shopper, WebStack
from tests.support.stack import MakeCampaign

pytestmark = [pytest.mark.emulator, pytest.mark.browser]


def test_a_shopper_joins_the_pre_queue_sees_entry_place_and_proof_then_gets_a_code(
    shopper: Shopper, make_campaign: MakeCampaign, web_stack: WebStack, db: firestore.Client
) -> None:
    now = utcnow()
    campaign_id = make_campaign(
        codes=5,
        starts_at=now + timedelta(hours=1),
        ends_at=now + timedelta(hours=2),
        pre_queue_seconds=1800,
        waiting_room_enabled=True,
        admissions_per_second=5,
    )
    # The pre-queue has been open for a while; the start is a few seconds away.
    starts_at = utcnow().replace(microsecond=0) + timedelta(seconds=12)
    campaign_ref(db, campaign_id).update({"starts_at": starts_at})
    page = shopper.open(campaign_id)
    expect(page.locator('[data-part="seconds"]')).not_to_have_text("00")
    panel = page.get_by_test_id("fair-drop")
    expect(panel).to_be_visible()

    page.get_by_test_id("join-button").click()

    entry_id = page.get_by_test_id("entry-id")
    expect(entry_id).to_have_text(re.compile(r"^[0-9a-f]{32}$"))
    expect(page.get_by_test_id("place")).to_have_text("drawn at the start")
    expect(page.get_by_test_id("join-button")).to_be_hidden()
    proof = page.get_by_test_id("proof-link").get_attribute("href")
    assert proof == f"{web_stack.claim_api}/v1/campaigns/{campaign_id}/fairness"
    committed = requests.get(proof, timeout=30).json()
    assert committed["state"] == "open"
    assert committed["seed"] is None

    # At the start the page claims by itself: it waits while the draw is made, then the
    # shopper's place shows, and the code.
    expect(page.get_by_test_id("waiting")).to_be_visible(timeout=30_000)
    expect(page.get_by_test_id("estimate")).to_be_visible()
    expect(page.get_by_test_id("code")).to_have_text(re.compile(campaign_id), timeout=30_000)
    expect(page.get_by_test_id("place")).to_have_text("#1", timeout=30_000)
    drawn = requests.get(proof, timeout=30).json()
    assert drawn["state"] == "drawn"
    assert hashlib.sha256(bytes.fromhex(drawn["seed"])).hexdigest() == committed["seed_commitment"]
    listed = requests.get(f"{proof}/entries", timeout=30).json()["entries"]
    assert listed == [{"entry_id": entry_id.inner_text(), "place": 1}]
