"""A code's validity on the example landing page in real Chromium: the date it is valid until
under the code, and "expired" once the page's clock passes it (Playwright's clock, moved by
the test: no waiting)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from google.cloud import firestore
from playwright.sync_api import Page, expect

from shared.clock import utcnow
from shared.gcp.firestore import claims_collection
from shared.types import rfc3339
from tests.browser.conftest import Shopper
from tests.support.stack import MakeCampaign

pytestmark = [pytest.mark.emulator, pytest.mark.browser]


def shown_as(page: Page, at: str) -> str:
    """A time as the page writes it (the browser's locale and time zone)."""
    text: str = page.evaluate(
        "(at) => new Date(at).toLocaleString(undefined, {dateStyle: 'medium', timeStyle: 'short'})",
        at,
    )
    return text


def test_the_code_shows_until_when_it_is_valid_and_then_that_it_expired(
    shopper: Shopper, make_campaign: MakeCampaign, db: firestore.Client
) -> None:
    campaign_id = make_campaign(codes=3, codes_valid_for_seconds=600)
    shopper.page.clock.install(time=utcnow())
    page = shopper.open(campaign_id)

    page.get_by_test_id("claim-button").click()

    expect(page.get_by_test_id("code")).to_contain_text(campaign_id)
    (claim,) = [s.to_dict() or {} for s in claims_collection(db, campaign_id).stream()]
    assert claim["code"] == page.get_by_test_id("code").inner_text()
    valid_until = rfc3339(claim["claimed_at"] + timedelta(seconds=600))
    line = page.get_by_test_id("valid-until")
    expect(line).to_have_text(f"Valid until {shown_as(page, valid_until)}")
    expect(line).to_have_attribute("data-expired", "false")

    page.clock.fast_forward("11:00")  # eleven minutes on the page's clock

    expect(line).to_have_text(f"Expired on {shown_as(page, valid_until)}")
    expect(line).to_have_attribute("data-expired", "true")
    assert shopper.console_errors == []


def test_a_code_that_never_expires_shows_no_date(
    shopper: Shopper, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=1)
    page = shopper.open(campaign_id)

    page.get_by_test_id("claim-button").click()

    expect(page.get_by_test_id("code")).to_contain_text(campaign_id)
    expect(page.get_by_test_id("valid-until")).to_be_hidden()
