"""Fixtures: the emulators (started by the suite on free ports), clients driving the real
functions-framework app, ID tokens in the Auth emulator's format, and campaigns whose cleanup is
registered before they are written."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore
from google.cloud.storage import Client as StorageClient

from devkit.cleanup import delete_tree
from devkit.emulators import (
    EmulatorStack,
    EmulatorUnavailable,
    RunningEmulator,
    check_auth_prerequisites,
    check_prerequisites,
    free_port,
    start_auth,
    wait_ready,
)
from devkit.emulators.auth import AuthEmulatorClient
from devkit.emulators.manager import AUTH_TIMEOUT
from devkit.firestore_indexes import IndexConfig, QueryShape, Recorder, recording
from devkit.standins.app_check import DevAppCheckServer, dev_app_check
from devkit.standins.push_auth import LOCAL_ACCOUNT, LOCAL_AUDIENCE, PushRelay
from tests.support import xdist_groups
from tests.support.api import function_client
from tests.support.cloudevents import PUSH_KEYS, deliver, published_event
from tests.support.servers import FunctionServers
from tests.support.stack import (
    BUCKET,
    CORS_ORIGIN,
    EVENTS_TOPIC,
    INDEXES,
    PROJECT,
    PUMP_SUBSCRIPTION,
    MakeCampaign,
    Pump,
    reset_instance,
)

# Production truth the emulator forgives, checked over the whole run: every query the code sent
# must be served by firestore.indexes.json or an automatic single-field index, and every field
# written to a collection that takes sale- or import-rate writes must be exempted from indexing
# unless a query needs it (an indexed value that increases in write order caps the collection at
# about 500 writes/s).
TESTS = Path(__file__).resolve().parent
# The outbox and released_holds take an entry per redemption or released hold, at checkout rate.
HOT_COLLECTIONS = (
    "coupons",
    "claims",
    "released_holds",
    "processed_events",
    "counter_shards",
    "outbox",
    "deliveries",
    "entries",
    "admissions",
)
_run = contextlib.ExitStack()
_recorder: Recorder | None = None
_auth_early: RunningEmulator | None = None


# A run split across pytest-xdist workers: each worker saves what it recorded here and the
# controller checks the union (a field written in one worker may be queried only in another).
RECORDS_ENV = "CODEDROP_TEST_INDEX_RECORDS"


def _worker(config: pytest.Config) -> str | None:
    workerinput: dict[str, str] = getattr(config, "workerinput", {})
    return workerinput.get("workerid")


def pytest_configure(config: pytest.Config) -> None:
    if _worker(config) is None:  # the controller, or a run in one process
        records = Path(tempfile.mkdtemp(prefix="codedrop-test-index-records-"))
        _run.callback(shutil.rmtree, records, ignore_errors=True)
        os.environ[RECORDS_ENV] = str(records)  # workers start with this environment
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(xdist_groups.Scheduler(records))


def pytest_sessionstart(session: pytest.Session) -> None:
    global _recorder
    _recorder = _run.enter_context(recording())


def _signs_in(item: pytest.Item) -> bool:
    return "auth_emulator" in getattr(item, "fixturenames", ())


def _start_auth_early() -> None:
    global _auth_early
    if _auth_early is not None:
        return
    try:
        check_auth_prerequisites()
    except EmulatorUnavailable:
        return  # the fixture fails with the install hint
    log_dir = Path(tempfile.mkdtemp(prefix="codedrop-test-auth-"))
    _run.callback(shutil.rmtree, log_dir, ignore_errors=True)
    _auth_early = start_auth(port=free_port(), project=PROJECT, log_dir=log_dir, wait=False)
    _run.callback(_auth_early.stop)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The Auth emulator takes 10-30 s of CPU to start: in a run in one process where a test
    will sign users in, start it now, so that it boots while the other emulators start and the
    first tests run. A pytest-xdist worker cannot tell yet whether it will be given those tests
    (one worker is: they are one group), and starts it before the first (below)."""
    if _worker(session.config) is None and any(_signs_in(item) for item in session.items):
        _start_auth_early()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the fixtures of the first test that signs users in: the emulator boots while the
    session's other emulators start."""
    if _signs_in(item):
        _start_auth_early()


def _long(item: pytest.Item) -> bool:
    """Marked `long`, or allowed more than the run's default timeout (a whole stack and a
    sale)."""
    timeout = item.get_closest_marker("timeout")
    default = float(item.config.getini("timeout") or 0)
    return item.get_closest_marker("long") is not None or bool(
        timeout and timeout.args and default and float(timeout.args[0]) > default
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests that sign users in are one xdist group: one worker runs them all, and it alone
    starts the Auth emulator and Chromium (each takes seconds of CPU; tests/support/xdist_groups
    tells the scheduler the groups). The long tests first:
    pytest-xdist hands tests out in this order (after the groups, the largest first), so none
    of them is started last and left to finish the run alone while the other worker idles."""
    for item in items:
        if _signs_in(item):
            item.add_marker(pytest.mark.xdist_group("auth"))
    items.sort(key=lambda item: not _long(item))
    worker = _worker(config)
    if worker is not None:
        xdist_groups.write_groups(items, Path(os.environ[RECORDS_ENV]), worker)


def production_index_problems(
    recorder: Recorder, config: IndexConfig, *, whole_suite: bool = True
) -> list[str]:
    """What production would refuse. Whether a written field is needed by some query can only
    be told from a run of the whole suite (a partial run does not issue every query)."""
    problems = [
        f"no index serves: {shape.describe()}"
        for shape in sorted(recorder.shapes, key=QueryShape.describe)
        if not config.serves(shape)
    ]
    queried = {
        (shape.collection, name)
        for shape in recorder.shapes
        for name in (*shape.equalities, *shape.inequalities, *(f for f, _ in shape.orders))
    }
    problems += [
        f"{collection}.{name} is written at sale or import rate, indexed, and no query needs it:"
        " exempt it in firestore.indexes.json (fieldOverrides)"
        for collection, name in sorted(recorder.written)
        if whole_suite
        and collection in HOT_COLLECTIONS
        and (collection, name) not in queried
        and (collection, name) not in config.exempt
    ]
    return problems


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    records = Path(os.environ[RECORDS_ENV])
    worker = _worker(session.config)
    if worker is not None:
        if _recorder is not None:
            _recorder.save(records / f"{worker}.pickle")
        _run.close()
        return
    if _recorder is not None:
        for saved in sorted(records.glob("*.pickle")):
            _recorder.add_saved(saved)
    _run.close()
    if _recorder is None or not _recorder.shapes:
        return
    options = session.config.option
    whole_suite = (
        exitstatus == pytest.ExitCode.OK
        and not (options.keyword or options.markexpr or options.deselect or options.maxfail)
        and all(Path(arg).resolve() == TESTS for arg in session.config.args)
    )
    problems = production_index_problems(
        _recorder, IndexConfig.load(INDEXES), whole_suite=whole_suite
    )
    if problems:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        for line in ["production Firestore would refuse what this run did:", *problems]:
            if reporter is not None:
                reporter.write_line(line, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def emulator_prerequisites() -> None:
    """Java and the emulators are required: their absence fails the run, with the fix."""
    try:
        check_prerequisites()
    except EmulatorUnavailable as exc:
        pytest.fail(f"emulator tests cannot run here: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def app_check_keys() -> Iterator[DevAppCheckServer]:
    """The run's development App Check key set (one per process: firebase-admin keeps one App
    Check service per app), served on 127.0.0.1; `.keys.token(project=...)` signs tokens."""
    with dev_app_check(PROJECT) as server:
        yield server


@pytest.fixture(scope="session")
def push_keys() -> Iterator[PushRelay]:
    """The run's development push key set (the one tests.support.cloudevents signs with),
    its JWKS served on 127.0.0.1."""
    with PushRelay(PUSH_KEYS) as relay:
        yield relay


@pytest.fixture(scope="session")
def emulators(
    emulator_prerequisites: None,
    app_check_keys: DevAppCheckServer,
    push_keys: PushRelay,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[EmulatorStack]:
    stack = EmulatorStack(
        project=PROJECT, bucket=BUCKET, log_dir=tmp_path_factory.mktemp("emulator-logs")
    )
    with stack, pytest.MonkeyPatch.context() as mp:
        for name, value in stack.env().items():
            mp.setenv(name, value)
        mp.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
        # A switch for this process: firebase-admin then accepts the unsigned ID tokens of the
        # Auth emulator's format without calling it (tests that sign users in for real start
        # the emulator with `auth_emulator`).
        mp.setenv("FIREBASE_AUTH_EMULATOR_HOST", "127.0.0.1:9099")
        # The tokens of these tests name no account in an Auth emulator: the revocation check
        # (an account read) runs in tests/emulator/test_revocation.py, against a real one.
        mp.setenv("CODEDROP_CHECK_REVOKED", "false")
        mp.setenv("CODEDROP_APP_CHECK_JWKS_URL", app_check_keys.jwks_url)
        # Pushes are signed as a real subscription signs them (tests.support.cloudevents
        # .deliver), and the pushed functions check every one.
        mp.setenv("CODEDROP_PUSH_JWKS_URL", push_keys.jwks_url)
        mp.setenv("CODEDROP_PUSH_AUDIENCE", LOCAL_AUDIENCE)
        mp.setenv("CODEDROP_PUSH_SERVICE_ACCOUNT", LOCAL_ACCOUNT)
        mp.setenv("CODEDROP_CORS_ORIGINS", CORS_ORIGIN)
        mp.setenv("CODEDROP_IMPORTS_BUCKET", BUCKET)
        # Tests pause and resume campaigns and expect the next claim to see it at once.
        mp.setenv("CODEDROP_CAMPAIGN_CACHE_SECONDS", "0")
        # Tests look codes up faster than a checkout may (tests/emulator/test_guessing.py
        # sets the limits it tests).
        mp.setenv("CODEDROP_CODE_LOOKUPS_PER_MINUTE", "1000000")
        mp.setenv("CODEDROP_CODE_LOOKUPS_PER_MINUTE_PER_ADDRESS", "1000000")
        # ... and a new webhook to be told of the next event (no wait for publishers' reads).
        mp.setenv("CODEDROP_WEBHOOK_ROUTES_SECONDS", "0")
        reset_instance()
        _create_topic_and_pump_subscription()
        yield stack
    reset_instance()


@pytest.fixture(scope="session")
def auth_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    """The Firebase Auth emulator: its start costs 10-30 s of CPU, so only sessions with tests
    that sign users in start it (at collection, see above). Node.js and firebase-tools are
    required: without them these tests fail with the install hint."""
    try:
        check_auth_prerequisites()
    except EmulatorUnavailable as exc:
        pytest.fail(f"sign-in tests cannot run here: {exc}", pytrace=False)
    if _auth_early is not None:  # started at collection; stopped when the session ends
        yield wait_ready(_auth_early, AUTH_TIMEOUT)
        return
    emulator = start_auth(
        port=free_port(), project=PROJECT, log_dir=tmp_path_factory.mktemp("auth-emulator")
    )
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture(scope="session")
def auth_users(auth_emulator: RunningEmulator) -> AuthEmulatorClient:
    """Sign users up and in on the Auth emulator, as a page or a console would."""
    return AuthEmulatorClient(auth_emulator.host_port, project=PROJECT)


def _create_topic_and_pump_subscription() -> None:
    from devkit.pubsub import create_topic_with_pull

    create_topic_with_pull(project=PROJECT, topic=EVENTS_TOPIC, subscription=PUMP_SUBSCRIPTION)


@pytest.fixture
def db(emulators: EmulatorStack) -> firestore.Client:
    """The process's container's client, asked for each test: a test that rebuilds the
    container (tests/support/stack.py reset_instance) leaves no later test with the old one,
    whose RPCs a counter on the new one would not see."""
    from shared.container import instance_services

    return instance_services().db


def _function_client(name: str, entry_point: str) -> Any:
    """The session fixture `name`: a test client of the function, on the suite's emulators."""

    @pytest.fixture(scope="session", name=name)
    def client(emulators: EmulatorStack) -> FlaskClient:
        return function_client(entry_point)

    return client


claim_client = _function_client("claim_client", "claim_api")
admin_client = _function_client("admin_client", "admin_api")
import_client = _function_client("import_client", "import_codes")
usage_client = _function_client("usage_client", "count_usage")


@pytest.fixture
def cleanup() -> Iterator[list[Callable[[], object]]]:
    callbacks: list[Callable[[], object]] = []
    yield callbacks
    for callback in reversed(callbacks):
        callback()


@pytest.fixture
def make_campaign(db: firestore.Client, cleanup: list[Callable[[], object]]) -> MakeCampaign:
    """Create a campaign (active now unless told otherwise) holding `codes` coupons."""
    from devkit import codes as fixture_codes
    from shared.campaigns import service as campaign_service
    from shared.campaigns.models import CampaignCreate
    from shared.clock import utcnow
    from shared.gcp.firestore import campaign_ref

    def make(*, codes: int | list[str] = 0, **fields: Any) -> str:
        now = utcnow()
        campaign_id = fields.pop("campaign_id", None) or f"t-{uuid.uuid4().hex[:12]}"
        cleanup.append(lambda: delete_tree(db, campaign_ref(db, campaign_id)))
        # Lax here, so tests may name enums by their values ("phone"); the API is strict.
        data = CampaignCreate.model_validate(
            {
                "campaign_id": campaign_id,
                "title": fields.pop("title", "Test sale"),
                "starts_at": fields.pop("starts_at", now - timedelta(minutes=5)),
                "ends_at": fields.pop("ends_at", now + timedelta(hours=1)),
                **fields,
            },
            strict=False,
        )
        campaign_service.create_campaign(db, data=data, now=now)
        listed = (
            [f"{campaign_id}-{i:05d}" for i in range(codes)] if isinstance(codes, int) else codes
        )
        if listed:
            fixture_codes.add_codes(db, campaign_id=campaign_id, codes=listed, now=now)
        return campaign_id

    return make


@pytest.fixture
def new_id(db: firestore.Client, cleanup: list[Callable[[], object]]) -> str:
    """An id for a campaign the test creates itself (through the API); deleted at the end."""
    from shared.gcp.firestore import campaign_ref

    campaign_id = f"t-{uuid.uuid4().hex[:12]}"
    cleanup.append(lambda: delete_tree(db, campaign_ref(db, campaign_id)))
    return campaign_id


@pytest.fixture(scope="session")
def storage_client(emulators: EmulatorStack) -> StorageClient:
    from shared.container import instance_services

    return instance_services().storage


@pytest.fixture(scope="session")
def shared_servers(
    emulators: EmulatorStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FunctionServers]:
    """main.py's functions over HTTP on the suite's emulators, as the local stack serves them,
    each started when a test first asks for it and kept for the session."""
    servers = FunctionServers(tmp_path_factory.mktemp("shared-servers"))
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def pump_events(usage_client: FlaskClient) -> Pump:
    """Deliver what was published on the topic to count_usage, as the push subscription
    would; returns the decoded events delivered (a batch's claims, each)."""
    from devkit.pubsub import pull_all

    def pump() -> list[dict[str, Any]]:
        delivered: list[dict[str, Any]] = []
        for message in pull_all(f"projects/{PROJECT}/subscriptions/{PUMP_SUBSCRIPTION}"):
            envelope = published_event(message.data, message_id=message.message_id)
            assert deliver(usage_client, envelope) == 200
            published = json.loads(message.data)
            # A batch of claims stands for its claims' events.
            delivered += published.get("claims", [published])
        return delivered

    pump()  # start from an empty subscription: earlier tests' events are not this test's
    return pump
