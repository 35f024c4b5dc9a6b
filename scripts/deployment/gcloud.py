"""The gcloud command that deploys one function: trigger, sizing, environment and secrets."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scripts.deployment import DeployError
from scripts.deployment.functions import FunctionSpec, Trigger

GCS_OBJECT_FINALIZED = "google.cloud.storage.object.v1.finalized"

ENV_KEY = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Set by Cloud Run / Cloud Functions itself; a deploy must not set them.
RESERVED_ENV = frozenset(
    {
        "PORT",
        "K_SERVICE",
        "K_REVISION",
        "K_CONFIGURATION",
        "FUNCTION_TARGET",
        "FUNCTION_SIGNATURE_TYPE",
    }
)
# Set by this script from its own options; `--env` may not override them.
MANAGED_ENV = frozenset(
    {
        "GOOGLE_CLOUD_PROJECT",
        "CODEDROP_IMPORTS_BUCKET",
        "CODEDROP_EVENTS_TOPIC",
        "CODEDROP_CORS_ORIGINS",
        "CODEDROP_PUSH_AUDIENCE",
        "CODEDROP_PUSH_SERVICE_ACCOUNT",
        "THREADS",
    }
)


def runtime_env(
    *,
    project: str,
    imports_bucket: str,
    events_topic: str,
    cors_origins: Sequence[str] = (),
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment every function gets. Never an emulator switch."""
    env = {
        # Not set automatically for current Python runtimes; shared.settings would otherwise
        # fall back to its local default, the demo project.
        "GOOGLE_CLOUD_PROJECT": project,
        "CODEDROP_IMPORTS_BUCKET": imports_bucket,
        "CODEDROP_EVENTS_TOPIC": events_topic,
    }
    if cors_origins:
        env["CODEDROP_CORS_ORIGINS"] = ",".join(cors_origins)
    env.update(extra or {})
    _check_env(env)
    return env


def _check_env(env: Mapping[str, str]) -> None:
    for key in env:
        if key.endswith("_EMULATOR_HOST"):
            raise DeployError(f"{key} is an emulator switch and is never deployed")
        if key in RESERVED_ENV:
            raise DeployError(f"{key} is reserved by Cloud Functions and cannot be set")
        if not ENV_KEY.match(key):
            raise DeployError(f"{key!r} is not a valid environment variable name")


def env_vars_flag(env: Mapping[str, str]) -> str:
    """`--set-env-vars=...`, with gcloud's ^DELIM^ syntax when a value holds a comma."""
    items = [f"{key}={value}" for key, value in env.items()]
    if not any("," in value for value in env.values()):
        return "--set-env-vars=" + ",".join(items)
    for delimiter in ("@", ";", "|", "~", "#", "::"):
        if not any(delimiter in item for item in items):
            return f"--set-env-vars=^{delimiter}^" + delimiter.join(items)
    raise DeployError("no delimiter is free for --set-env-vars; simplify the values")


def account_email(account: str, project: str) -> str:
    """A codedrop service account's email (ids are 6-30 characters: codedrop-<account>)."""
    return f"codedrop-{account}@{project}.iam.gserviceaccount.com"


def trigger_flags(
    spec: FunctionSpec,
    *,
    project: str,
    imports_bucket: str,
    trigger_location: str | None = None,
) -> list[str]:
    if spec.trigger is Trigger.PUBLIC_HTTP:
        flags = ["--trigger-http", "--allow-unauthenticated"]
    elif spec.trigger in (Trigger.PRIVATE_HTTP, Trigger.PUSH_SUBSCRIPTION):
        # Explicit, so gcloud neither prompts nor leaves an old allUsers binding in place.
        flags = ["--trigger-http", "--no-allow-unauthenticated"]
    else:
        flags = [
            f"--trigger-event-filters=type={GCS_OBJECT_FINALIZED}",
            f"--trigger-event-filters=bucket={imports_bucket}",
            f"--trigger-service-account={account_email(INVOKER_ACCOUNT, project)}",
        ]
        if trigger_location:
            flags.append(f"--trigger-location={trigger_location}")
    if spec.retry:
        flags.append("--retry")
    return flags


DEFAULT_TICKET_SECRET = "codedrop-ticket-secret"  # noqa: S105 (a secret's name, not its value)


@dataclass(frozen=True)
class Secret:
    """A Secret Manager secret a function reads as an environment variable."""

    name: str
    env: str
    first_value: str  # what a new secret starts with, in words
    value: Callable[[], bytes]


def _shopify_secret() -> bytes:
    # Shopify shows the shop's webhook signing secret once; until the operator adds it as a new
    # version, a random value makes every webhook answer 401 rather than trusting anyone.
    given = os.environ.get("CODEDROP_SHOPIFY_WEBHOOK_SECRET")
    return (given or secrets.token_urlsafe(48)).encode()


TICKET_SECRET = Secret(
    name=DEFAULT_TICKET_SECRET,
    env="CODEDROP_TICKET_SECRET",
    first_value="64 random characters",
    value=lambda: secrets.token_urlsafe(48).encode(),
)
SHOPIFY_SECRET = Secret(
    name="codedrop-shopify-webhook-secret",
    env="CODEDROP_SHOPIFY_WEBHOOK_SECRET",
    first_value="$CODEDROP_SHOPIFY_WEBHOOK_SECRET from the deployer's shell, else random",
    value=_shopify_secret,
)
WEBHOOK_KEY = Secret(
    name="codedrop-webhook-key",
    env="CODEDROP_WEBHOOK_KEY",
    first_value="64 random characters",
    value=lambda: secrets.token_urlsafe(48).encode(),
)
SECRETS = (TICKET_SECRET, SHOPIFY_SECRET, WEBHOOK_KEY)


def secrets_of(spec: FunctionSpec) -> tuple[Secret, ...]:
    """Every function validates the settings at start-up, and outside demo- projects the
    waiting-room ticket key is required; admin_api verifies Shopify's webhooks; whoever
    creates or delivers businesses' webhooks unseals their signing secrets."""
    readers = {
        SHOPIFY_SECRET: {"admin_api"},
        WEBHOOK_KEY: {"admin_api", "deliver_webhooks", "sweep"},
    }
    return tuple(s for s in SECRETS if s is TICKET_SECRET or spec.name in readers[s])


# Cloud Scheduler, the Pub/Sub push subscription and Eventarc sign their requests as this one.
INVOKER_ACCOUNT = "invoker"


def function_url(spec: FunctionSpec, *, project: str, region: str) -> str:
    """A gen2 function's stable URL (it also answers on its run.app URL); a push subscription's
    token names it as its audience."""
    return f"https://{region}-{project}.cloudfunctions.net/{spec.service}"


def push_env(spec: FunctionSpec, *, project: str, region: str) -> dict[str, str]:
    """What a pushed function checks each push's OIDC token against (shared/gcp/push_auth.py):
    the audience and the account its subscription signs with (resources.subscription_steps)."""
    if spec.trigger is not Trigger.PUSH_SUBSCRIPTION:
        return {}
    return {
        "CODEDROP_PUSH_AUDIENCE": function_url(spec, project=project, region=region),
        "CODEDROP_PUSH_SERVICE_ACCOUNT": account_email(INVOKER_ACCOUNT, project),
    }


def build_command(
    spec: FunctionSpec,
    *,
    project: str,
    region: str,
    runtime: str,
    source: Path,
    env: Mapping[str, str],
    imports_bucket: str,
    min_instances: int | None = None,
    trigger_location: str | None = None,
    ticket_secret: str = DEFAULT_TICKET_SECRET,
) -> list[str]:
    function_env = {
        **env,
        "THREADS": str(spec.concurrency),
        **push_env(spec, project=project, region=region),
    }
    _check_env(function_env)
    return [
        "gcloud",
        "functions",
        "deploy",
        spec.service,
        "--gen2",
        f"--project={project}",
        f"--region={region}",
        f"--runtime={runtime}",
        f"--source={source}",
        f"--entry-point={spec.entry_point}",
        *trigger_flags(
            spec,
            project=project,
            imports_bucket=imports_bucket,
            trigger_location=trigger_location,
        ),
        f"--memory={spec.memory}",
        f"--cpu={spec.cpu}",
        f"--concurrency={spec.concurrency}",
        f"--min-instances={spec.min_instances if min_instances is None else min_instances}",
        f"--max-instances={spec.max_instances}",
        f"--timeout={spec.timeout}",
        f"--run-service-account={account_email(spec.account, project)}",
        env_vars_flag(function_env),
        # From Secret Manager, never from the source.
        "--set-secrets="
        + ",".join(
            f"{secret.env}={ticket_secret if secret is TICKET_SECRET else secret.name}:latest"
            for secret in secrets_of(spec)
        ),
    ]
