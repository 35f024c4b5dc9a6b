"""The guessing limit on the emulators (shared/ratelimit): code look-ups and redemptions per
caller and per client address through HTTP, 429 RATE_LIMITED with Retry-After; instances count
each other from heartbeats; no Firestore write on a request's path between heartbeats."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from devkit.firestore_rpcs import RpcCounter
from shared.container import Services
from shared.errors import RateLimited
from shared.gcp.firestore import limiter_instances_collection
from shared.http.admin import router
from shared.ratelimit.service import FIRST_HEARTBEATS_SECONDS, HEARTBEAT_SECONDS, GuessLimiter
from shared.settings import get_settings
from tests.support.api import auth, router_client
from tests.support.stack import MakeCampaign

pytestmark = pytest.mark.emulator


def limited_client(db: firestore.Client, **limits: int) -> FlaskClient:
    settings = get_settings().model_copy(
        update={
            "code_lookups_per_minute": 1_000_000,
            "code_lookups_per_minute_per_address": 1_000_000,
            **limits,
        }
    )
    return router_client(router, Services(settings, db=db))


def lookup(client: FlaskClient, campaign_id: str, *, caller: str, address: str) -> Any:
    return client.get(
        f"/v1/campaigns/{campaign_id}/codes/GUESS-1",
        headers={**auth(caller, claims={"redeemer": True}), "X-Forwarded-For": address},
    )


def test_a_caller_past_the_limit_is_refused_with_retry_after_whatever_the_address(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=["GUESS-1"])
    # 6 a minute, a burst of one: one look-up now, the next in 10 s times the instances.
    client = limited_client(db, code_lookups_per_minute=6)

    first = lookup(client, campaign_id, caller="prober", address="198.51.100.1")
    second = lookup(client, campaign_id, caller="prober", address="198.51.100.2")
    redeem = client.post(
        f"/v1/campaigns/{campaign_id}/redemptions",
        json={"code": "GUESS-1", "order_id": "o-1"},
        headers=auth("prober", claims={"redeemer": True}),
    )
    other = lookup(client, campaign_id, caller="cashier", address="198.51.100.1")

    assert first.status_code == 200
    for refused in (second, redeem):
        assert refused.status_code == 429
        assert refused.get_json()["error_code"] == "RATE_LIMITED"
        assert int(refused.headers["Retry-After"]) >= 1
    assert other.status_code == 200


def test_an_address_past_its_limit_is_refused_whoever_calls(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=["GUESS-1"])
    client = limited_client(db, code_lookups_per_minute_per_address=6)

    answers = [
        lookup(client, campaign_id, caller=f"account-{n}", address="2001:db8:7:7::" + str(n))
        for n in range(1, 4)
    ]
    elsewhere = lookup(client, campaign_id, caller="account-9", address="2001:db8:8::1")

    # Three accounts from one IPv6 /64: one address.
    assert [a.status_code for a in answers] == [200, 429, 429]
    assert elsewhere.status_code == 200


class Clock:
    def __init__(self) -> None:
        # An hour ahead: heartbeats of earlier tests' instances are long dead to this clock.
        self.now = time.time() + 3600

    def __call__(self) -> float:
        return self.now


def test_instances_count_each_other_and_write_only_at_heartbeats(
    db: firestore.Client, cleanup: list[Callable[[], object]]
) -> None:
    settings = get_settings().model_copy(update={"code_lookups_per_minute": 1_000_000})
    clock = Clock()
    one = GuessLimiter(db=db, settings=settings, clock=clock)
    two = GuessLimiter(db=db, settings=settings, clock=clock)
    for limiter in (one, two):
        ref = limiter_instances_collection(db).document(limiter.instance_id)
        cleanup.append(ref.delete)

    one.check(caller="c", address="203.0.113.9")
    two.check(caller="c", address="203.0.113.9")
    clock.now += FIRST_HEARTBEATS_SECONDS[0]
    one.check(caller="c", address="203.0.113.9")
    assert (one.instances(), two.instances()) == (2, 2)

    clock.now += 0.05  # before the next heartbeat is due
    with RpcCounter(db) as counter:
        for _ in range(50):
            one.check(caller="c", address="203.0.113.9")
        between = counter.snapshot()
        clock.now += HEARTBEAT_SECONDS
        one.check(caller="c", address="203.0.113.9")
        at_heartbeat = counter.snapshot()

    assert between.writes == 0
    assert between.calls == {}
    assert at_heartbeat.writes == 1  # this instance's heartbeat, and one read of them all
    assert set(at_heartbeat.calls) == {"commit", "run_query"}


def test_a_refusal_is_the_documented_error(db: firestore.Client) -> None:
    settings = get_settings().model_copy(update={"code_lookups_per_minute": 1})
    limiter = GuessLimiter(db=db, settings=settings)
    limiter.check(caller="once", address="192.0.2.1")
    with pytest.raises(RateLimited) as refused:
        limiter.check(caller="once", address="192.0.2.1")
    assert refused.value.retry_after is not None
    assert refused.value.retry_after >= 1
