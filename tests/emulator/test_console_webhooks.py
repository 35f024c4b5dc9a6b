"""Webhooks from the console: a test event, a delivery sent again, a new signing secret, each
through admin_api against a receiver in the test process, and each in the audit log."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from devkit.cleanup import delete_tree
from devkit.receiver import Receiver
from shared.container import Services
from shared.gcp.firestore import audit_collection, webhook_ref
from shared.http import admin
from shared.settings import get_settings
from shared.webhooks.signing import verify
from tests.support.api import ADMIN, router_client
from tests.support.stack import MakeCampaign

pytestmark = pytest.mark.emulator

FAST = {"webhook_timeout_seconds": 2.0, "webhook_drain_seconds": 5.0, "webhook_linger_seconds": 0.0}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as started:
        yield started


@pytest.fixture
def console(db: firestore.Client) -> FlaskClient:
    return router_client(admin.router, Services(get_settings().model_copy(update=FAST), db=db))


@pytest.fixture
def subscribed(
    console: FlaskClient,
    make_campaign: MakeCampaign,
    receiver: Receiver,
    db: firestore.Client,
    cleanup: list[Callable[[], object]],
) -> dict[str, Any]:
    """A campaign with one webhook to the receiver: its id, the webhook's id and secret."""
    campaign_id = make_campaign()

    def forget() -> None:
        query = audit_collection(db).where(filter=FieldFilter("campaign_id", "==", campaign_id))
        for snapshot in query.stream():
            snapshot.reference.delete()
        hooks = db.collection("webhooks").where(
            filter=FieldFilter("campaign_id", "==", campaign_id)
        )
        for snapshot in hooks.stream():
            delete_tree(db, webhook_ref(db, snapshot.id))
        db.collection("campaign_webhooks").document(campaign_id).delete()

    cleanup.append(forget)
    created = console.post(
        f"/v1/campaigns/{campaign_id}/webhooks",
        json={"url": receiver.url(), "events": ["coupon.claimed"]},
        headers=ADMIN,
    ).get_json()
    return {"campaign_id": campaign_id, **created}


def _base(hook: dict[str, Any]) -> str:
    return f"/v1/campaigns/{hook['campaign_id']}/webhooks/{hook['webhook_id']}"


def _signed(receiver: Receiver, secret: str) -> list[bool]:
    return [
        verify(secret, r.headers["x-codedrop-signature"], r.body, now=time.time())
        for r in receiver.received
    ]


def test_a_test_event_is_sent_signed_and_listed_in_the_deliveries(
    console: FlaskClient, subscribed: dict[str, Any], receiver: Receiver
) -> None:
    answer = console.post(f"{_base(subscribed)}:test", headers=ADMIN)

    assert answer.status_code == 202
    queued = answer.get_json()
    assert queued["state"] == "delivered"
    (request,) = receiver.received
    body = json.loads(request.body)
    assert body["type"] == "webhook.test"
    assert body["event_id"] == queued["event_id"]
    assert _signed(receiver, subscribed["secret"]) == [True]
    listed = console.get(f"{_base(subscribed)}/deliveries", headers=ADMIN).get_json()
    assert [(d["event_id"], d["state"]) for d in listed["deliveries"]] == [
        (queued["event_id"], "delivered")
    ]


def test_a_delivery_is_sent_again_and_a_rotated_secret_signs_from_then_on(
    console: FlaskClient, subscribed: dict[str, Any], receiver: Receiver
) -> None:
    first = console.post(f"{_base(subscribed)}:test", headers=ADMIN).get_json()

    rotated = console.post(f"{_base(subscribed)}:rotate_secret", headers=ADMIN)
    again = console.post(
        f"{_base(subscribed)}/deliveries/{first['event_id']}:redeliver", headers=ADMIN
    )
    missing = console.post(f"{_base(subscribed)}/deliveries/nope.1:redeliver", headers=ADMIN)

    assert rotated.status_code == 200
    new_secret = rotated.get_json()["secret"]
    assert new_secret != subscribed["secret"]
    assert again.status_code == 202
    assert again.get_json()["state"] == "delivered"
    assert [r.event_id for r in receiver.received] == [first["event_id"]] * 2
    assert _signed(receiver, subscribed["secret"]) == [True, False]
    assert _signed(receiver, new_secret) == [False, True]
    assert missing.status_code == 404
    assert missing.get_json()["error_code"] == "DELIVERY_NOT_FOUND"
    audit = console.get(
        f"/v1/audit?campaign_id={subscribed['campaign_id']}", headers=ADMIN
    ).get_json()
    assert [e["action"] for e in audit["entries"]] == [
        "webhook.redeliver",
        "webhook.rotate_secret",
        "webhook.test",
        "webhook.create",
    ]
    assert new_secret not in json.dumps(audit)
    assert subscribed["secret"] not in json.dumps(audit)
