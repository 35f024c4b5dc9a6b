"""Signed pushes end to end: the Pub/Sub emulator pushes a real claim's event through the local
stack's signing relay (devkit/standins/push_auth.py) to count_usage served as a function process,
which checks the token as it checks Google's and counts the claim; the same push straight from the
emulator, unsigned, is refused (the emulator keeps redelivering it, nothing is counted)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import httpx
import pytest
from flask.testing import FlaskClient
from google.cloud.pubsub_v1 import SubscriberClient

from devkit.standins.push_auth import PushRelay
from tests.support.api import ADMIN, auth
from tests.support.cloudevents import PUSH_KEYS
from tests.support.servers import FunctionServers
from tests.support.stack import EVENTS_TOPIC, PROJECT, MakeCampaign

pytestmark = pytest.mark.emulator


@pytest.fixture(scope="session")
def count_usage_url(shared_servers: FunctionServers) -> str:
    return shared_servers.urls(["count_usage"])["count_usage"]


def push_subscription(endpoint: str, cleanup: list[Callable[[], object]]) -> None:
    name = f"projects/{PROJECT}/subscriptions/push-{uuid.uuid4().hex[:8]}"
    with SubscriberClient() as subscriber:
        subscriber.create_subscription(
            request={
                "name": name,
                "topic": f"projects/{PROJECT}/topics/{EVENTS_TOPIC}",
                "push_config": {"push_endpoint": endpoint},
            }
        )

    def delete() -> None:
        with SubscriberClient() as subscriber:
            subscriber.delete_subscription(subscription=name)

    cleanup.append(delete)


def claimed_count(admin_client: FlaskClient, campaign_id: str) -> int:
    stats = admin_client.get(f"/v1/campaigns/{campaign_id}", headers=ADMIN).get_json()["stats"]
    return int(stats["claimed"])


def test_the_emulators_pushes_are_counted_only_signed(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    count_usage_url: str,
    cleanup: list[Callable[[], object]],
) -> None:
    campaign_id = make_campaign(codes=3)
    unsigned = httpx.post(f"{count_usage_url}/", json={"message": {}}, timeout=30)
    with PushRelay(PUSH_KEYS, targets={"count_usage": f"{count_usage_url}/"}) as relay:
        push_subscription(relay.push_endpoint("count_usage"), cleanup)

        claimed = claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=auth("pushed"))
        deadline = time.monotonic() + 30
        while claimed_count(admin_client, campaign_id) < 1 and time.monotonic() < deadline:
            time.sleep(0.2)  # the emulator pushes on its own schedule

        assert claimed.status_code == 201
        assert claimed_count(admin_client, campaign_id) == 1
    assert unsigned.status_code == 401
    assert unsigned.json()["error_code"] == "UNAUTHENTICATED"
