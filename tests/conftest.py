"""Fixtures: the emulators (started by the suite on free ports), clients driving the real
functions-framework app, ID tokens in the Auth emulator's format, and campaigns whose cleanup is
registered before they are written."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from functions_framework import create_app
from google.cloud import firestore
from google.cloud.storage import Client as StorageClient

from emulator import EmulatorStack, EmulatorUnavailable, check_prerequisites
from emulator.tokens import emulator_id_token

ROOT = Path(__file__).resolve().parent.parent
MAIN = str(ROOT / "functions" / "main.py")
PROJECT = "demo-codedrop-test"
BUCKET = "codedrop-imports-test"
CORS_ORIGIN = "https://shop.example"


# Settings, the Firestore client and the claim engine are process singletons built on first
# use: they must be rebuilt whenever the environment they were built from changes.
def _reset_singletons() -> None:
    from shared import firestore_db, runtime, settings

    settings.get_settings.cache_clear()
    firestore_db.get_db.cache_clear()
    runtime.reset()


@pytest.fixture(scope="session")
def emulator_prerequisites() -> None:
    """Java and the emulators are required: their absence fails the run, with the fix."""
    try:
        check_prerequisites()
    except EmulatorUnavailable as exc:
        pytest.fail(f"emulator tests cannot run here: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def emulators(
    emulator_prerequisites: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmulatorStack]:
    stack = EmulatorStack(
        project=PROJECT, bucket=BUCKET, log_dir=tmp_path_factory.mktemp("emulator-logs")
    )
    with stack, pytest.MonkeyPatch.context() as mp:
        for name, value in stack.env().items():
            mp.setenv(name, value)
        mp.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
        # Only a switch: firebase-admin then accepts unsigned emulator-format ID tokens.
        mp.setenv("FIREBASE_AUTH_EMULATOR_HOST", "127.0.0.1:9099")
        mp.setenv("CODEDROP_CORS_ORIGINS", CORS_ORIGIN)
        mp.setenv("CODEDROP_IMPORTS_BUCKET", BUCKET)
        # Tests pause and resume campaigns and expect the next claim to see it at once.
        mp.setenv("CODEDROP_CAMPAIGN_CACHE_SECONDS", "0")
        _reset_singletons()
        _create_topic_and_pump_subscription()
        yield stack
    _reset_singletons()


EVENTS_TOPIC = "coupon-events"
PUMP_SUBSCRIPTION = "test-pump"


def _create_topic_and_pump_subscription() -> None:
    from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

    topic = f"projects/{PROJECT}/topics/{EVENTS_TOPIC}"
    PublisherClient().create_topic(name=topic)
    with SubscriberClient() as subscriber:
        subscriber.create_subscription(
            name=f"projects/{PROJECT}/subscriptions/{PUMP_SUBSCRIPTION}", topic=topic
        )


@pytest.fixture(scope="session")
def db(emulators: EmulatorStack) -> firestore.Client:
    from shared.firestore_db import get_db

    return get_db()


@pytest.fixture(scope="session")
def claim_client(emulators: EmulatorStack) -> FlaskClient:
    return create_app("claim_api", MAIN).test_client()


@pytest.fixture(scope="session")
def admin_client(emulators: EmulatorStack) -> FlaskClient:
    return create_app("admin_api", MAIN).test_client()


def auth(user_id: str, *, admin: bool = False, **kwargs: Any) -> dict[str, str]:
    token = emulator_id_token(user_id, project=PROJECT, admin=admin, **kwargs)
    return {"Authorization": f"Bearer {token}"}


ADMIN = auth("operator-1", admin=True)


@pytest.fixture
def cleanup() -> Iterator[list[Callable[[], object]]]:
    callbacks: list[Callable[[], object]] = []
    yield callbacks
    for callback in reversed(callbacks):
        callback()


MakeCampaign = Callable[..., str]


@pytest.fixture
def make_campaign(db: firestore.Client, cleanup: list[Callable[[], object]]) -> MakeCampaign:
    """Create a campaign (active now unless told otherwise) holding `codes` coupons."""
    from shared import campaign_service, coupon_store
    from shared.clock import utcnow
    from shared.firestore_db import campaign_ref
    from shared.models import CampaignCreate

    def make(*, codes: int | list[str] = 0, **fields: Any) -> str:
        now = utcnow()
        campaign_id = fields.pop("campaign_id", None) or f"t-{uuid.uuid4().hex[:12]}"
        cleanup.append(lambda: db.recursive_delete(campaign_ref(db, campaign_id)))
        data = CampaignCreate(
            campaign_id=campaign_id,
            title=fields.pop("title", "Test sale"),
            starts_at=fields.pop("starts_at", now - timedelta(minutes=5)),
            ends_at=fields.pop("ends_at", now + timedelta(hours=1)),
            **fields,
        )
        campaign_service.create_campaign(db, data=data, now=now)
        listed = (
            [f"{campaign_id}-{i:05d}" for i in range(codes)] if isinstance(codes, int) else codes
        )
        if listed:
            coupon_store.add_codes(db, campaign_id=campaign_id, codes=listed, now=now)
        return campaign_id

    return make


@pytest.fixture(scope="session")
def storage_client(emulators: EmulatorStack) -> StorageClient:
    from shared.storage_objects import get_storage

    return get_storage()


@pytest.fixture(scope="session")
def import_client(emulators: EmulatorStack) -> FlaskClient:
    return create_app("import_codes", MAIN, "cloudevent").test_client()


FINALIZED_EVENT = json.loads(
    (ROOT / "tests" / "fixtures" / "storage_object_finalized.json").read_text()
)


def finalized_event(
    *, bucket: str, name: str, generation: int | str | None, metadata: dict[str, str] | None = None
) -> dict[str, Any]:
    """The object-finalized CloudEvent exactly as Cloud Storage sends it, for another object."""
    event = copy.deepcopy(FINALIZED_EVENT)
    event["id"] = uuid.uuid4().hex
    event["source"] = f"//storage.googleapis.com/projects/_/buckets/{bucket}"
    event["subject"] = f"objects/{name}"
    event["data"].update(bucket=bucket, name=name, generation=str(generation))
    event["data"]["id"] = f"{bucket}/{name}/{generation}"
    if metadata:
        event["data"]["metadata"] = metadata
    return event


def deliver(client: FlaskClient, event: dict[str, Any]) -> int:
    response = client.post("/", data=json.dumps(event), content_type="application/cloudevents+json")
    return response.status_code


@pytest.fixture(scope="session")
def usage_client(emulators: EmulatorStack) -> FlaskClient:
    return create_app("count_usage", MAIN, "cloudevent").test_client()


PUBLISHED_EVENT = json.loads(
    (ROOT / "tests" / "fixtures" / "pubsub_message_published.json").read_text()
)


def published_event(payload: bytes, *, message_id: str | None = None) -> dict[str, Any]:
    """A Pub/Sub push delivery as count_usage receives it: a messagePublished CloudEvent."""
    import base64

    event = copy.deepcopy(PUBLISHED_EVENT)
    message_id = message_id or uuid.uuid4().hex
    event["id"] = message_id
    event["source"] = f"//pubsub.googleapis.com/projects/{PROJECT}/topics/{EVENTS_TOPIC}"
    event["data"]["message"].update(
        data=base64.b64encode(payload).decode(), messageId=message_id, message_id=message_id
    )
    event["data"]["subscription"] = f"projects/{PROJECT}/subscriptions/{PUMP_SUBSCRIPTION}"
    return event


Pump = Callable[[], list[dict[str, Any]]]


@pytest.fixture
def pump_events(usage_client: FlaskClient) -> Pump:
    """Deliver what was published on the topic to count_usage, as the push subscription
    would; returns the decoded events delivered."""
    from google.cloud.pubsub_v1 import SubscriberClient

    def pump() -> list[dict[str, Any]]:
        delivered: list[dict[str, Any]] = []
        subscription = f"projects/{PROJECT}/subscriptions/{PUMP_SUBSCRIPTION}"
        with SubscriberClient() as subscriber:
            while True:
                # The emulator honours return_immediately, so an empty pull costs no wait.
                response = subscriber.pull(
                    request={
                        "subscription": subscription,
                        "max_messages": 500,
                        "return_immediately": True,
                    },
                    timeout=10,
                )
                if not response.received_messages:
                    return delivered
                for received in response.received_messages:
                    message = received.message
                    envelope = published_event(message.data, message_id=message.message_id)
                    assert deliver(usage_client, envelope) == 200
                    delivered.append(json.loads(message.data))
                subscriber.acknowledge(
                    subscription=subscription,
                    ack_ids=[r.ack_id for r in response.received_messages],
                )

    pump()  # start from an empty subscription: earlier tests' events are not this test's
    return pump
