"""Tests for scripts/localstack, the local stack behind ./scripts/run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.emulators import RunningEmulator, free_port
from devkit.emulators import start_pubsub as start_pubsub_emulator
from scripts.localstack import config, functions, resources
from tests.support.processes import env_for_a_stack_of_its_own, run_module

REPO = Path(__file__).resolve().parents[2]
# Cold start is about 5 s on two cores plus 10-30 s for the Auth emulator; the rest is headroom
# for a loaded CI machine.
CHECK_TIMEOUT = 240


# Missing Java or emulators fail these tests with the install hint (conftest.py): never a silent
# skip.
needs_emulators = pytest.mark.usefixtures("emulator_prerequisites")


def _distinct_free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@pytest.mark.long
@pytest.mark.emulator
@needs_emulators
def test_check_starts_everything_claims_once_and_stops(tmp_path: Path) -> None:
    env = env_for_a_stack_of_its_own()
    ports = _distinct_free_ports(len(config.PORTS))
    for port, number in zip(config.PORTS, ports, strict=True):
        env[port.env] = str(number)
    # Small servers: the test only claims once.
    env["CODEDROP_CLAIM_API_WORKERS"] = "1"
    env["CODEDROP_CLAIM_API_THREADS"] = "4"
    log_dir = tmp_path / "logs"

    finished = run_module(
        "scripts.localstack",
        ["--check", "--log-dir", str(log_dir)],
        env=env,
        timeout=CHECK_TIMEOUT,
    )
    stdout, stderr = finished.stdout, finished.stderr

    diagnostics = (
        f"exit code {finished.returncode}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n"
        f"--- local_stack.log\n{_read(log_dir / 'local_stack.log')}"
    )
    assert finished.returncode == 0, diagnostics
    lines = stdout.splitlines()
    assert config.READY_LINE in lines, diagnostics
    assert any(line.startswith("check: claim answered 201 with code ") for line in lines), (
        diagnostics
    )
    assert any(
        line.startswith("check: count_usage counted the claim from a signed push") for line in lines
    ), diagnostics
    assert "check: development App Check tokens are served" in lines, diagnostics
    assert "local stack check passed" in lines, diagnostics
    page = f"http://127.0.0.1:{env['CODEDROP_WEB_PORT']}/"
    assert f"check: the landing page answers at {page}" in lines, diagnostics
    assert not any("demo users" in line for line in lines), "--check prints no banner"
    for name in ("firestore", "pubsub", "storage", "auth", "claim_api", "admin_api", "local_stack"):
        assert (log_dir / f"{name}.log").is_file(), name


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as exc:
        return f"({exc})"


def test_functions_are_found_in_main_py_without_importing_it(tmp_path: Path) -> None:
    main_py = tmp_path / "main.py"
    main_py.write_text(
        "import functions_framework\n"
        "raise RuntimeError('never imported')\n"
        "@functions_framework.http\n"
        "def claim_api(request): ...\n"
        "@functions_framework.cloud_event\n"
        "def count_usage(event): ...\n"
        "def helper(): ...\n"
    )
    found = functions.defined_functions(main_py)
    assert [f.name for f in found] == ["claim_api", "count_usage"]
    assert [f.kind for f in found] == ["http", "cloudevent"]


def test_the_real_main_py_has_the_http_entry_points() -> None:
    names = {f.name for f in functions.defined_functions()}
    assert {"claim_api", "admin_api"} <= names


def test_every_port_has_its_own_variable_and_default() -> None:
    table = config.environment_table()
    names = [var.name for var in table]
    assert len(names) == len(set(names))
    defaults = {port.env: port.default for port in config.PORTS}
    assert defaults == {
        "CODEDROP_FIRESTORE_PORT": 8080,
        "CODEDROP_PUBSUB_PORT": 8085,
        "CODEDROP_STORAGE_PORT": 9199,
        "CODEDROP_AUTH_PORT": 9099,
        "CODEDROP_APP_CHECK_PORT": 9098,
        "CODEDROP_CLAIM_API_PORT": 8001,
        "CODEDROP_ADMIN_API_PORT": 8002,
        "CODEDROP_COUNT_USAGE_PORT": 8003,
        "CODEDROP_IMPORT_CODES_PORT": 8004,
        "CODEDROP_DELIVER_WEBHOOKS_PORT": 8005,
        "CODEDROP_SWEEP_PORT": 8006,
        "CODEDROP_WEB_PORT": 3000,
    }
    for function in config.FUNCTIONS:
        assert function.port_key in {port.key for port in config.PORTS}


@pytest.fixture
def pubsub_emulator(
    emulator_prerequisites: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RunningEmulator]:
    emulator = start_pubsub_emulator(port=free_port(), log_dir=tmp_path / "logs")
    try:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.host_port)
        yield emulator
    finally:
        emulator.stop()


def _stack_config(log_dir: Path) -> config.Config:
    """The local stack's configuration on its default ports, without the demo."""
    return config.Config(
        project="demo-local-stack",
        ports={port.key: port.default for port in config.PORTS},
        log_dir=log_dir,
        bucket="codedrop-imports",
        topic="coupon-events",
        cors_origins="",
        timeout=30,
        demo=False,
        check=False,
    )


@pytest.mark.emulator
def test_count_usage_gets_a_push_subscription_with_retries_and_dead_letters(
    pubsub_emulator: RunningEmulator, tmp_path: Path
) -> None:
    from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

    stack_config = _stack_config(tmp_path)
    created = resources.create_pubsub_resources(
        stack_config, count_usage_url="http://127.0.0.1:18003"
    )
    assert "topic coupon-events" in created
    # Running it twice (resources already there) is harmless.
    assert resources.create_pubsub_resources(stack_config, count_usage_url=None) == [
        "topic coupon-events"
    ]

    project = "projects/demo-local-stack"
    publisher = PublisherClient()
    topics = {t.name for t in publisher.list_topics(request={"project": project})}
    assert topics == {
        f"{project}/topics/coupon-events",
        f"{project}/topics/coupon-events-dead-letter",
    }
    with SubscriberClient() as subscriber:
        push = subscriber.get_subscription(subscription=f"{project}/subscriptions/count-usage-push")
        dead_letters = subscriber.get_subscription(
            subscription=f"{project}/subscriptions/coupon-events-dead-letter-pull"
        )
    dead_letter_topic = f"{project}/topics/coupon-events-dead-letter"
    assert push.topic == f"{project}/topics/coupon-events"
    assert push.push_config.push_endpoint == "http://127.0.0.1:18003/"
    assert push.retry_policy.minimum_backoff.total_seconds() == 1
    assert push.retry_policy.maximum_backoff.total_seconds() == 60
    assert push.dead_letter_policy.dead_letter_topic == dead_letter_topic
    assert push.dead_letter_policy.max_delivery_attempts == 5
    assert dead_letters.topic == dead_letter_topic
    assert not dead_letters.push_config.push_endpoint


@pytest.mark.emulator
def test_deliver_webhooks_gets_a_push_subscription_of_its_own(
    pubsub_emulator: RunningEmulator, tmp_path: Path
) -> None:
    """A slow business endpoint must never hold back count_usage: separate subscriptions, and
    time to drain an endpoint before the message is acknowledged."""
    from google.cloud.pubsub_v1 import SubscriberClient

    stack_config = _stack_config(tmp_path)
    created = resources.create_pubsub_resources(
        stack_config,
        count_usage_url="http://127.0.0.1:18003",
        deliver_webhooks_url="http://127.0.0.1:18005",
    )

    assert "subscription deliver-webhooks-push" in created
    assert "subscription count-usage-push" in created
    project = "projects/demo-local-stack"
    with SubscriberClient() as subscriber:
        push = subscriber.get_subscription(
            subscription=f"{project}/subscriptions/deliver-webhooks-push"
        )
        filtered = subscriber.get_subscription(
            subscription=f"{project}/subscriptions/{config.FILTER_SUBSCRIPTION}"
        )
    # The emulator ignores filters: a watcher passes the events into the webhooks topic.
    assert filtered.topic == f"{project}/topics/coupon-events"
    assert push.topic == f"{project}/topics/coupon-events-webhooks"
    assert push.push_config.push_endpoint == "http://127.0.0.1:18005/"
    assert push.ack_deadline_seconds == 60
    assert push.retry_policy.minimum_backoff.total_seconds() == 5
    assert push.retry_policy.maximum_backoff.total_seconds() == 300
    dead_letters = push.dead_letter_policy
    assert dead_letters.dead_letter_topic == f"{project}/topics/coupon-events-dead-letter"
    assert dead_letters.max_delivery_attempts == 5
