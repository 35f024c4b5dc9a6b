"""The checkout half's pure rules: hold buckets, report periods, Shopify's signature and order
payload, campaign hold validation."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from shared.campaigns.models import CampaignCreate, CampaignUpdate
from shared.claims.models import ShopifyOrder
from shared.coupons.store import HOLD_SHARDS, expires_bucket
from shared.errors import InvalidSignature
from shared.http.shopify import signature, verify
from shared.usage.models import ReportGranularity
from shared.usage.reading import period_start
from tests.support.stack import ROOT

ORDER = ROOT / "tests" / "fixtures" / "shopify_order_created.json"


def test_a_hold_bucket_is_its_shard_then_the_start_of_its_expiry_bucket() -> None:
    at = datetime(2026, 11, 27, 9, 14, 52, 400_000, tzinfo=UTC)
    assert expires_bucket("c0ffee", at, width_seconds=60) == "c:20261127091400"
    assert expires_bucket("0abc", at, width_seconds=1) == "0:20261127091452"
    assert expires_bucket("0abc", at, width_seconds=3600) == "0:20261127090000"


def test_buckets_sort_in_time_order_within_a_shard_and_spread_over_sixteen() -> None:
    start = datetime(2026, 11, 27, 23, 58, tzinfo=UTC)
    times = [start + timedelta(seconds=17 * i) for i in range(40)]
    keys = [expires_bucket("7f", t, width_seconds=60) for t in times]
    assert keys == sorted(keys)
    # The shard is the coupon id's first hex digit: coupon ids are hashes, so holds spread evenly.
    shards = {expires_bucket(s + "0", start, width_seconds=60)[0] for s in HOLD_SHARDS}
    assert shards == set("0123456789abcdef")


@pytest.mark.parametrize(
    ("granularity", "expected"),
    [
        (ReportGranularity.HOUR, datetime(2026, 11, 27, 9, tzinfo=UTC)),
        (ReportGranularity.DAY, datetime(2026, 11, 27, tzinfo=UTC)),
        # 27 November 2026 is a Friday: its ISO week began on Monday the 23rd.
        (ReportGranularity.WEEK, datetime(2026, 11, 23, tzinfo=UTC)),
    ],
)
def test_report_periods(granularity: ReportGranularity, expected: datetime) -> None:
    assert period_start("2026112709", granularity) == expected


def test_a_monday_starts_its_own_week() -> None:
    assert period_start("2026113000", ReportGranularity.WEEK) == datetime(2026, 11, 30, tzinfo=UTC)


def test_the_signature_matches_an_independent_implementation() -> None:
    # `printf '%s' BODY | openssl dgst -sha256 -hmac KEY -binary | base64`
    body = b'{"id":1,"discount_codes":[{"code":"X"}]}'
    key = b"hush-hush-shopify-secret"
    assert signature(body, key) == "wsbmPkO0pV/LBiE7ye5htzxmBomnQLbJ53CSSMi0pSY="
    verify(body, "wsbmPkO0pV/LBiE7ye5htzxmBomnQLbJ53CSSMi0pSY=", key)


@pytest.mark.parametrize(
    ("header", "key"),
    [
        (None, b"hush-hush-shopify-secret"),
        ("", b"hush-hush-shopify-secret"),
        ("wsbmPkO0pV/LBiE7ye5htzxmBomnQLbJ53CSSMi0pSZ=", b"hush-hush-shopify-secret"),
        ("not base64 at all ☃", b"hush-hush-shopify-secret"),
        ("wsbmPkO0pV/LBiE7ye5htzxmBomnQLbJ53CSSMi0pSY=", None),  # no secret configured
    ],
)
def test_a_missing_or_wrong_signature_is_refused(header: str | None, key: bytes | None) -> None:
    with pytest.raises(InvalidSignature):
        verify(b'{"id":1,"discount_codes":[{"code":"X"}]}', header, key)


def test_a_shopify_order_payload_gives_its_id_and_codes() -> None:
    order = ShopifyOrder.model_validate_json(ORDER.read_bytes())
    assert order.id == "5843917602883"  # a JSON integer in Shopify's payload
    assert [d.code for d in order.discount_codes] == ["BF26-Q7XK-2M9P"]


def test_an_order_without_an_id_is_invalid() -> None:
    payload = json.loads(ORDER.read_text())
    del payload["id"]
    with pytest.raises(ValidationError):
        ShopifyOrder.model_validate(payload)


@pytest.mark.parametrize("seconds", [0, 59, 86_401, 3.5])
def test_hold_seconds_out_of_range_is_refused(seconds: float) -> None:
    window = {"starts_at": "2026-12-01T00:00:00Z", "ends_at": "2026-12-02T00:00:00Z"}
    with pytest.raises(ValidationError):
        CampaignCreate.model_validate({"title": "T", "hold_seconds": seconds, **window})


def test_hold_seconds_may_be_switched_off_with_null() -> None:
    update = CampaignUpdate.model_validate({"hold_seconds": None})
    assert "hold_seconds" in update.model_fields_set
    assert update.hold_seconds is None
