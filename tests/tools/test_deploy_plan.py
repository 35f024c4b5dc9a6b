"""The whole deploy plan against the installed gcloud, and what it must create.

gcloud parses every flag before it asks for credentials: with an empty configuration, a command
with a bad flag fails at parsing (exit 2, "unrecognized arguments", "Invalid choice", …) and a
good one at authentication ("You do not currently have an active account selected"). Every line
of `./scripts/deploy --dry-run` must fail at authentication. The environment keeps gcloud off
the metadata server, so on a cloud runner nothing would run against a real project.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from scripts.deployment import functions

REPO = Path(__file__).resolve().parents[2]
PROJECT = "codedrop-test"
NUMBER = "123456789012"
AUTH = re.compile(
    r"You do not currently have an active account selected|does not have any valid credentials"
)
PARSE = re.compile(
    r"unrecognized arguments|argument --|Invalid choice|must be specified|At most one of"
)


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    build = tmp_path_factory.mktemp("build")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scripts.deployment",
            "--dry-run",
            "--project",
            PROJECT,
            "--project-number",
            NUMBER,
            "--build-dir",
            str(build),
        ],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.fixture(scope="module")
def gcloud_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        pytest.fail("gcloud is not installed: install the Google Cloud SDK", pytrace=False)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CLOUDSDK_", "GOOGLE_", "GCE_")) and not key.endswith("_HOST")
    }
    env.update(
        CLOUDSDK_CONFIG=str(tmp_path_factory.mktemp("gcloud-config")),
        CLOUDSDK_CORE_DISABLE_PROMPTS="1",
        # Never ask a metadata server for credentials: on a cloud runner it would answer.
        CLOUDSDK_CORE_CHECK_GCE_METADATA="false",
        CLOUDSDK_METRICS_ENVIRONMENT="codedrop-test",
        CLOUDSDK_CORE_DISABLE_USAGE_REPORTING="true",
        CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK="true",
        CLOUDSDK_CORE_DISABLE_FILE_LOGGING="true",
    )
    return env


def _outcome(line: str, env: dict[str, str]) -> tuple[str, str]:
    argv = shlex.split(line) if line.startswith("gcloud ") else ["bash", "-c", line]
    result = subprocess.run(
        argv,
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    errors = [e for e in result.stderr.splitlines() if e.startswith("ERROR: (gcloud")]
    if result.returncode == 2 or PARSE.search(result.stderr):
        return "parse", result.stderr.strip()
    if result.returncode == 1 and errors and all(AUTH.search(e) for e in errors):
        return "auth", ""
    return "other", f"exit {result.returncode}: {result.stderr.strip()}"


# Runs the real gcloud once per line of the plan: minutes on a busy machine.
@pytest.mark.timeout(900)
def test_every_command_of_the_plan_fails_at_authentication_never_at_parsing(
    plan: list[str], gcloud_env: dict[str, str]
) -> None:
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda line: _outcome(line, gcloud_env), plan))
    wrong = [
        f"{kind}: {line}\n    {detail}"
        for line, (kind, detail) in zip(plan, outcomes, strict=True)
        if kind != "auth"
    ]
    assert not wrong, "\n".join(wrong)


def test_every_line_is_one_gcloud_call_but_rest_calls_gcloud_cannot_make(
    plan: list[str],
) -> None:
    """The rules release, and the collection-group single-field indexes (gcloud's `fields
    update --index` only makes collection-scoped ones): REST calls with gcloud's token."""
    others = [line for line in plan if not line.startswith("gcloud ")]
    assert all(line.startswith("TOKEN=$(gcloud auth print-access-token") for line in others)
    (rules,) = [line for line in others if "firebaserules.googleapis.com" in line]
    assert "firestore.rules" in rules
    config = json.loads((REPO / "firestore.indexes.json").read_text())
    enabled = [o for o in config["fieldOverrides"] if o["indexes"]]
    fields = [line for line in others if "firestore.googleapis.com" in line]
    assert len(fields) == len(enabled) == len(others) - 1
    for override in enabled:
        (line,) = [
            f
            for f in fields
            if f"/collectionGroups/{override['collectionGroup']}/fields/{override['fieldPath']}?"
            in f
        ]
        assert '"queryScope":"COLLECTION_GROUP"' in line
        assert '"order":"ASCENDING"' in line


def test_the_plan_creates_every_index_and_exemption(plan: list[str]) -> None:
    config = json.loads((REPO / "firestore.indexes.json").read_text())
    composites = [line for line in plan if " indexes composite create " in line]
    assert len(composites) == len(config["indexes"])
    for index in config["indexes"]:
        fields = [
            f"--field-config=field-path={f['fieldPath']},order={f['order'].lower()}"
            for f in index["fields"]
        ]
        assert any(
            f"--collection-group={index['collectionGroup']}" in line
            and all(field in line for field in fields)
            for line in composites
        ), index
    for override in (o for o in config["fieldOverrides"] if not o["indexes"]):
        expected = (
            f"gcloud firestore indexes fields update {override['fieldPath']}"
            f" --collection-group={override['collectionGroup']} --disable-indexes"
        )
        assert any(line.startswith(expected) for line in plan), expected


def _line(plan: list[str], start: str) -> list[str]:
    (line,) = [line for line in plan if line.startswith(start)]
    return shlex.split(line)


def test_webhook_deliveries_have_their_own_push_subscription(plan: list[str]) -> None:
    create = _line(plan, "gcloud pubsub subscriptions create coupon-events-deliver-webhooks ")
    url = f"https://europe-west1-{PROJECT}.cloudfunctions.net/deliver-webhooks"
    for flag in (
        f"--push-endpoint={url}",
        "--dead-letter-topic=coupon-events-dead-letter",
        "--max-delivery-attempts=5",
    ):
        assert flag in create


def test_the_push_subscription_retries_with_backoff_and_dead_letters(plan: list[str]) -> None:
    create = _line(plan, "gcloud pubsub subscriptions create coupon-events-count-usage ")
    url = f"https://europe-west1-{PROJECT}.cloudfunctions.net/count-usage"
    invoker = f"codedrop-invoker@{PROJECT}.iam.gserviceaccount.com"
    for flag in (
        f"--push-endpoint={url}",
        f"--push-auth-service-account={invoker}",
        "--dead-letter-topic=coupon-events-dead-letter",
        "--max-delivery-attempts=10",
        "--min-retry-delay=10s",
        "--max-retry-delay=600s",
    ):
        assert flag in create
    agent = f"serviceAccount:service-{NUMBER}@gcp-sa-pubsub.iam.gserviceaccount.com"
    assert any(
        "topics add-iam-policy-binding coupon-events-dead-letter" in line and agent in line
        for line in plan
    )


def test_the_sweep_runs_every_minute_with_an_oidc_token_only_it_accepts(plan: list[str]) -> None:
    job = _line(plan, "gcloud scheduler jobs create http codedrop-sweep ")
    url = f"https://europe-west1-{PROJECT}.cloudfunctions.net/sweep"
    assert "--schedule=* * * * *" in job
    assert f"--uri={url}" in job
    assert f"--oidc-token-audience={url}" in job
    assert f"--oidc-service-account-email=codedrop-invoker@{PROJECT}.iam.gserviceaccount.com" in job
    sweep = _line(plan, "gcloud functions deploy sweep ")
    assert "--no-allow-unauthenticated" in sweep
    assert any(
        line.startswith("gcloud functions add-invoker-policy-binding sweep ") for line in plan
    )


def test_each_caller_can_pass_the_iam_set_for_it(plan: list[str]) -> None:
    deploys = {
        spec.name: _line(plan, f"gcloud functions deploy {spec.service} ")
        for spec in functions.FUNCTIONS
    }
    # Browsers hold only a Firebase ID token and shops' webhooks no Google identity at all:
    # the public functions verify tokens per route (tests/unit/test_route_access.py).
    for name in ("claim_api", "admin_api"):
        assert "--allow-unauthenticated" in deploys[name]
    # The private ones admit only the invoker that Scheduler, Pub/Sub and Eventarc sign as.
    for name in ("sweep", "count_usage", "deliver_webhooks"):
        assert "--no-allow-unauthenticated" in deploys[name]
    invoked = {line.split()[3] for line in plan if " add-invoker-policy-binding " in line}
    assert invoked == {"sweep", "count-usage", "import-codes", "deliver-webhooks"}
    for spec in functions.FUNCTIONS:
        command = deploys[spec.name]
        assert (
            f"--run-service-account=codedrop-{spec.account}@{PROJECT}.iam.gserviceaccount.com"
            in command
        )
        (secrets,) = [arg for arg in command if arg.startswith("--set-secrets=")]
        expected = ["CODEDROP_TICKET_SECRET=codedrop-ticket-secret:latest"]
        if spec.name == "admin_api":  # it verifies Shopify's order webhooks
            expected.append(
                "CODEDROP_SHOPIFY_WEBHOOK_SECRET=codedrop-shopify-webhook-secret:latest"
            )
        if spec.name in ("admin_api", "deliver_webhooks", "sweep"):  # businesses' webhooks
            expected.append("CODEDROP_WEBHOOK_KEY=codedrop-webhook-key:latest")
        assert secrets == "--set-secrets=" + ",".join(expected)
        for flag in ("--memory=", "--cpu=", "--timeout=", "--concurrency=", "--min-instances="):
            assert any(arg.startswith(flag) for arg in command), (spec.name, flag)


def test_every_secret_a_function_reads_exists_with_a_value_before_the_functions(
    plan: list[str],
) -> None:
    first_deploy = next(i for i, line in enumerate(plan) if " functions deploy " in line)
    for name in (
        "codedrop-ticket-secret",
        "codedrop-shopify-webhook-secret",
        "codedrop-webhook-key",
    ):
        create = plan.index(
            next(line for line in plan if line.startswith(f"gcloud secrets create {name} "))
        )
        value = plan.index(
            next(line for line in plan if line.startswith(f"gcloud secrets versions add {name} "))
        )
        assert create < value < first_deploy
    admin = f"codedrop-admin-api@{PROJECT}.iam.gserviceaccount.com"
    assert any(
        line.startswith("gcloud secrets add-iam-policy-binding codedrop-shopify-webhook-secret ")
        and admin in line
        for line in plan
    )


@pytest.mark.parametrize(
    ("function", "subscription"),
    [
        ("count-usage", "coupon-events-count-usage"),
        ("deliver-webhooks", "coupon-events-deliver-webhooks"),
    ],
)
def test_a_pushed_function_checks_the_token_its_subscription_signs(
    plan: list[str], function: str, subscription: str
) -> None:
    """The audience and account a pushed function accepts are the ones its subscription signs
    its OIDC tokens with (shared/gcp/push_auth.py)."""
    create = _line(plan, f"gcloud pubsub subscriptions create {subscription} ")
    audience = _flag_value(create, "--push-auth-token-audience")
    account = _flag_value(create, "--push-auth-service-account")
    deploy = _line(plan, f"gcloud functions deploy {function} ")
    env = _flag_value(deploy, "--set-env-vars")

    assert f"CODEDROP_PUSH_AUDIENCE={audience}" in env
    assert f"CODEDROP_PUSH_SERVICE_ACCOUNT={account}" in env


def _flag_value(command: list[str], flag: str) -> str:
    (value,) = [arg.split("=", 1)[1] for arg in command if arg.startswith(f"{flag}=")]
    return value


def test_the_functions_that_check_push_tokens_are_the_ones_pushed_to() -> None:
    from shared.http.wsgi import PUSHED_FUNCTIONS

    pushed = {
        s.name for s in functions.FUNCTIONS if s.trigger is functions.Trigger.PUSH_SUBSCRIPTION
    }
    assert set(PUSHED_FUNCTIONS) == pushed
