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
from pathlib import Path

import pytest

from scripts.deployment import cli, functions
from scripts.deployment.plan import Step
from tests.support import deploy, stack
from tests.support.deploy import NUMBER, PROJECT

REPO = Path(__file__).resolve().parents[2]
AUTH = re.compile(
    r"You do not currently have an active account selected|does not have any valid credentials"
)
FIREBASE = "npx --no-install firebase "
PARSE = re.compile(
    r"unrecognized arguments|argument --|Invalid choice|must be specified|At most one of"
)
# One pytest-xdist worker runs the module and test_deploy.py's dry runs: the printed plan (a
# session fixture, tests/tools/conftest.py) is made once.
pytestmark = pytest.mark.xdist_group(deploy.XDIST_GROUP)


def _commands(printed: str) -> list[str]:
    """A dry run's commands: each step's purpose is a comment line above its command."""
    return [line for line in printed.splitlines() if not line.startswith("# ")]


@pytest.fixture(scope="module")
def plan(printed_plan: deploy.Printed) -> list[str]:
    return _commands(printed_plan.stdout)


def _steps() -> list[Step]:
    """The plan as cli builds it, without staging (the steps' probes and lookups)."""
    args = cli.build_parser().parse_args(
        ["--dry-run", "--project", PROJECT, "--project-number", NUMBER]
    )
    cli._validate(cli.build_parser(), args)
    target = cli.target_of(args, project=PROJECT, project_number=NUMBER)
    env = cli._function_env(args, PROJECT)
    return cli.build_plan(
        args, target=target, env=env, specs=list(functions.FUNCTIONS), staged=Path("/stage")
    )


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


# What bash substitutes for a value an earlier step makes known (the lookups are checked
# apart): gcloud checks some flags' form while parsing (a URL, a resource name).
LOOKUP = re.compile(r"\$\((?:[^()']|'[^']*')*\)")
LOOKED_UP = {
    "functions describe": f"https://function-{NUMBER}.europe-west1.run.app",
    "dashboards list": f"projects/{NUMBER}/dashboards/3a9c",
    "policies list": f"projects/{NUMBER}/alertPolicies/7d1e",
    "apps:sdkconfig": '{"apiKey": "k"}',
}


def _looked_up(match: re.Match[str]) -> str:
    """A lookup's value; any other substitution (a token) is left for bash."""
    values = [value for command, value in LOOKED_UP.items() if command in match[0]]
    return values[0] if values else match[0]


def _outcome(returncode: object, stderr: str) -> tuple[str, str]:
    errors = [e for e in stderr.splitlines() if e.startswith("ERROR: (gcloud")]
    if returncode == 2 or PARSE.search(stderr):
        return "parse", stderr.strip()
    if returncode == 1 and errors and all(AUTH.search(e) for e in errors):
        return "auth", ""
    return "other", f"exit {returncode}: {stderr.strip()}"


def _sdk_python(root: Path) -> str:
    """The interpreter the `gcloud` wrapper would choose."""
    bundled = root / "platform" / "bundledpythonunix" / "bin" / "python3"
    return os.environ.get("CLOUDSDK_PYTHON") or (str(bundled) if bundled.exists() else "python3")


def _in_one_gcloud(argvs: list[list[str]], env: dict[str, str]) -> list[tuple[object, str]]:
    """Each argv's exit code and output, all run by one gcloud process (gcloud_parse.py)."""
    gcloud = shutil.which("gcloud", path=env.get("PATH"))
    assert gcloud is not None
    root = Path(gcloud).resolve().parent.parent
    result = subprocess.run(
        [_sdk_python(root), str(Path(__file__).with_name("gcloud_parse.py"))],
        input=json.dumps(argvs),
        env={**env, "CODEDROP_GCLOUD_SDK_ROOT": str(root)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [(each["code"], each["stderr"]) for each in json.loads(result.stdout)]


def _in_bash(line: str, env: dict[str, str]) -> tuple[object, str]:
    result = subprocess.run(
        ["bash", "-c", line],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    return result.returncode, result.stderr


def _probes() -> list[str]:
    """The plan's probes and lookups, each as a line."""
    steps = _steps()
    return sorted(
        {
            step.unless if isinstance(step.unless, str) else shlex.join(step.unless)
            for step in steps
            if step.unless is not None
        }
        | {shlex.join(lookup.command) for step in steps for lookup in step.lookups}
    )


def _inner(lines: list[str]) -> list[str]:
    """The commands that lines run for a value: `$(command)`."""
    return [m[0][2:-1] for line in lines for m in LOOKUP.finditer(line)]


GOOD = "gcloud pubsub topics create coupon-events --project=codedrop-test"
# The check's own test: a good line, a bad flag, a bad verb.
CHECKS_ITSELF = [GOOD, f"{GOOD} --no-such-flag", "gcloud pubsub topics crate x"]


@pytest.fixture(scope="module")
def sale() -> list[str]:
    """The commands of a sale's preparation."""
    return _commands(
        deploy.dry_run(
            *("--project", PROJECT, "--prepare-sale", "black-friday"),
            *("--sale-starts", "2026-11-28T09:00:00+01:00", "--sale-min-instances", "5"),
        )
    )


Answers = dict[str, tuple[object, str]]


@pytest.fixture(scope="module")
def gcloud_answers(plan: list[str], sale: list[str], gcloud_env: dict[str, str]) -> Answers:
    """gcloud's answer to each gcloud line the module's tests check, all from one gcloud process
    (its start-up and each command group load once, not once a test)."""
    lines = [*CHECKS_ITSELF, *plan, *_probes(), *_inner(sale)]
    gcloud = sorted({line for line in map(_substituted, lines) if line.startswith("gcloud ")})
    argvs = [shlex.split(line)[1:] for line in gcloud]
    return dict(zip(gcloud, _in_one_gcloud(argvs, gcloud_env), strict=True))


def _substituted(line: str) -> str:
    return LOOKUP.sub(_looked_up, line)


def _checked(lines: list[str], answers: Answers, env: dict[str, str]) -> list[str]:
    """The lines that do not fail at authentication, with what they answered. A gcloud line is
    parsed as gcloud parses it (`answers`); a shell line (a pipe, a test) runs in bash."""
    lines = [_substituted(line) for line in lines]
    outcomes = [
        _outcome(*(answers[line] if line.startswith("gcloud ") else _in_bash(line, env)))
        for line in lines
    ]
    return [
        f"{kind}: {line}\n    {detail}"
        for line, (kind, detail) in zip(lines, outcomes, strict=True)
        if kind != "auth"
    ]


def test_the_check_tells_a_bad_flag_from_a_good_one(
    gcloud_answers: Answers, gcloud_env: dict[str, str]
) -> None:
    wrong = _checked(CHECKS_ITSELF, gcloud_answers, gcloud_env)
    assert [line.split(":", 1)[0] for line in wrong] == ["parse", "parse"]


def test_every_command_of_the_plan_fails_at_authentication_never_at_parsing(
    plan: list[str], gcloud_answers: Answers, gcloud_env: dict[str, str]
) -> None:
    gcloud_lines = [line for line in plan if line.startswith("gcloud ")]
    wrong = _checked(gcloud_lines, gcloud_answers, gcloud_env)
    assert not wrong, "\n".join(wrong)


def test_what_the_plan_asks_before_and_while_it_runs_parses_too(
    gcloud_answers: Answers, gcloud_env: dict[str, str]
) -> None:
    """A create's probe (does it exist?) and a lookup (a function's URI) are gcloud commands
    the printed plan does not show on lines of their own."""
    probes = _probes()
    assert len(probes) > 10
    wrong = _checked([p for p in probes if not p.startswith(FIREBASE)], gcloud_answers, gcloud_env)
    assert not wrong, "\n".join(wrong)


def test_only_firebase_tools_and_the_pages_config_are_not_gcloud_calls(plan: list[str]) -> None:
    others = [line for line in plan if not line.startswith("gcloud ")]
    assert others
    config = [line for line in others if not line.startswith(FIREBASE)]
    assert len(config) == 1
    assert config[0].startswith("python3 -m scripts.deployment.hosting ")


def test_the_plan_prepares_a_sale_with_commands_that_parse(
    sale: list[str], gcloud_answers: Answers, gcloud_env: dict[str, str]
) -> None:
    (quota, ready, warm, warmup) = sale
    body = json.loads(shlex.split(quota.split(" -d ", 1)[1])[0])
    # The window opens an hour early: shoppers sign in on the page before the sale opens.
    assert body == {
        "quota": {
            "signUpQuotaConfig": {
                "quota": "1000",
                "startTime": "2026-11-28T07:00:00Z",
                "quotaDuration": "10800s",
            }
        }
    }
    assert f"projects/{PROJECT}/config?updateMask=quota.signUpQuotaConfig" in quota
    assert "-ge 5" in warm
    assert "--campaign=black-friday" in warmup
    inner = _inner([ready, warm])
    assert len(inner) == 2
    wrong = _checked(inner, gcloud_answers, gcloud_env)
    assert not wrong, "\n".join(wrong)


def test_firestore_is_deployed_from_the_files_the_suite_checks(plan: list[str]) -> None:
    """firebase-tools deploys firebase.json's `firestore`: the rules the emulator tests load
    and the indexes file the index checker reads, TTL policies (`ttl: true`) included."""
    (deploy,) = [line for line in plan if line.startswith(f"{FIREBASE}deploy --only firestore")]
    assert f"--project {PROJECT}" in deploy
    firestore = json.loads((REPO / "firebase.json").read_text())["firestore"]
    assert REPO / firestore["rules"] == stack.RULES
    assert REPO / firestore["indexes"] == stack.INDEXES
    config = json.loads(stack.INDEXES.read_text())
    ttl = {(o["collectionGroup"], o["fieldPath"]) for o in config["fieldOverrides"] if o["ttl"]}
    assert ttl == {("deliveries", "expire_at"), ("processed_events", "expire_at")}
    # A TTL field is written in increasing order: never indexed.
    assert all(not o["indexes"] for o in config["fieldOverrides"] if o["ttl"])


def _uri(service: str) -> str:
    """The function's run.app URI as gcloud reports it once deployed: the OIDC audience Cloud
    Run always accepts (a cloudfunctions.net URL is not one)."""
    describe = shlex.join(
        [
            "gcloud",
            "functions",
            "describe",
            service,
            "--region=europe-west1",
            "--format=value(serviceConfig.uri)",
            f"--project={PROJECT}",
        ]
    )
    return f"$({describe})"


def _line(plan: list[str], start: str) -> list[str]:
    (line,) = [line for line in plan if line.startswith(start)]
    return shlex.split(line)


def test_webhook_deliveries_have_their_own_push_subscription(plan: list[str]) -> None:
    create = _line(plan, "gcloud pubsub subscriptions create coupon-events-deliver-webhooks ")
    url = _uri("deliver-webhooks")
    for flag in (
        f"--push-endpoint={url}",
        "--dead-letter-topic=coupon-events-dead-letter",
        "--max-delivery-attempts=5",
    ):
        assert flag in create


def test_the_push_subscription_retries_with_backoff_and_dead_letters(plan: list[str]) -> None:
    create = _line(plan, "gcloud pubsub subscriptions create coupon-events-count-usage ")
    url = _uri("count-usage")
    # The audience is the deterministic run.app URL: known before the function exists, so the
    # function is deployed checking it (a cloudfunctions.net URL is no audience Cloud Run takes).
    audience = f"https://count-usage-{NUMBER}.europe-west1.run.app"
    assert f"--push-auth-token-audience={audience}" in create
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
    url = _uri("sweep")
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
            # A file read on use: a version added after the deploy reaches warm instances.
            expected.append(
                "/etc/secrets/shopify/webhook-secret=codedrop-shopify-webhook-secret:latest"
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


def test_the_events_consumers_are_deployed_before_the_functions_that_publish(
    plan: list[str],
) -> None:
    """claim_api publishes coupon.claimed.batch: the running count_usage and deliver_webhooks
    must read it before the first one is sent."""
    deployed = [line.split()[3] for line in plan if line.startswith("gcloud functions deploy ")]
    assert set(deployed[:2]) == {"count-usage", "deliver-webhooks"}
    assert deployed.index("claim-api") > 1


def test_the_console_may_upload_to_the_imports_bucket_from_the_hosted_origins(
    plan: list[str],
) -> None:
    """The browser PUTs a resumable session's chunks and reads `Range` to resume."""
    (update,) = [line for line in plan if line.startswith("gcloud storage buckets update ")]
    cors_file = Path(_flag_value(shlex.split(update), "--cors-file"))
    (rule,) = json.loads(cors_file.read_text())
    assert {f"https://{PROJECT}.web.app", f"https://{PROJECT}.firebaseapp.com"} <= set(
        rule["origin"]
    )
    assert rule["method"] == ["PUT"]
    assert "Range" in rule["responseHeader"]
