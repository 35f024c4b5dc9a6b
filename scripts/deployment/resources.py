"""Everything a project needs besides the functions, as plan steps, in the order they must run.

APIs, the Firestore database with the indexes and index exemptions of firestore.indexes.json,
the security rules, service accounts and the IAM each caller needs, the imports bucket, the
events topic with its dead-letter topic, the ticket secret, and, after the functions, the push
subscription that feeds count_usage (retry and dead-letter policies) and the Cloud Scheduler
job that calls the sweep every minute (OIDC).

Every step is one command. Create steps are marked `exists_ok` (a re-run finds the resource and
goes on); update steps follow them where a re-run must apply changed settings.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.deployment.functions import FunctionSpec
from scripts.deployment.gcloud import (
    INVOKER_ACCOUNT,
    SECRETS,
    TICKET_SECRET,
    Secret,
    account_email,
    secrets_of,
)
from scripts.deployment.plan import Step
from shared.webhooks import routes

APIS = (
    "firestore.googleapis.com",
    "run.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudbuild.googleapis.com",
    "artifactregistry.googleapis.com",
    "eventarc.googleapis.com",
    "pubsub.googleapis.com",
    "storage.googleapis.com",
    "cloudscheduler.googleapis.com",
    "secretmanager.googleapis.com",
    "firebaserules.googleapis.com",
    "iam.googleapis.com",
)
# Pub/Sub redelivers a failed push after 10 s, backing off to 10 min, 10 times at most; then
# the message goes to the dead-letter topic, whose own subscription keeps it for 7 days.
PUSH_RETRY = ("--min-retry-delay=10s", "--max-retry-delay=600s")
MAX_DELIVERY_ATTEMPTS = 10
ACK_DEADLINE_SECONDS = 60
# import_codes reads uploads and writes generated CSVs; admin_api only drops generation requests.
BUCKET_ROLES = {"import": "roles/storage.objectAdmin", "admin-api": "roles/storage.objectCreator"}


@dataclass(frozen=True)
class Target:
    project: str
    project_number: str
    region: str
    firestore_location: str
    imports_bucket: str
    events_topic: str
    ticket_secret: str

    @property
    def dead_letter_topic(self) -> str:
        return f"{self.events_topic}-dead-letter"

    def subscription_for(self, spec: FunctionSpec) -> str:
        return f"{self.events_topic}-{spec.service}"

    def secret_name(self, secret: Secret) -> str:
        return self.ticket_secret if secret is TICKET_SECRET else secret.name

    def url(self, spec: FunctionSpec) -> str:
        """A gen2 function's stable URL (it also answers on its run.app URL)."""
        return f"https://{self.region}-{self.project}.cloudfunctions.net/{spec.service}"

    def account(self, name: str) -> str:
        return account_email(name, self.project)

    @property
    def invoker(self) -> str:
        return self.account(INVOKER_ACCOUNT)

    @property
    def pubsub_agent(self) -> str:
        return f"service-{self.project_number}@gcp-sa-pubsub.iam.gserviceaccount.com"

    @property
    def storage_agent(self) -> str:
        return f"service-{self.project_number}@gs-project-accounts.iam.gserviceaccount.com"


def _gcloud(*args: str, target: Target) -> list[str]:
    return ["gcloud", *args, f"--project={target.project}"]


def _sa(email: str) -> str:
    return f"--member=serviceAccount:{email}"


def foundation(target: Target, *, indexes: Path, rules: Path) -> list[Step]:
    """APIs, Firestore (database, indexes, exemptions, rules), before anything uses them.
    `rules` is read when the step runs, relative to the repository root (the plan's cwd)."""
    steps = [
        Step("APIs", _gcloud("services", "enable", *APIS, target=target)),
        Step(
            "Firestore database",
            _gcloud(
                "firestore",
                "databases",
                "create",
                f"--location={target.firestore_location}",
                "--type=firestore-native",
                target=target,
            ),
            exists_ok=True,
        ),
    ]
    steps += index_steps(target, json.loads(indexes.read_text()))
    steps.append(rules_step(target, rules))
    return steps


def index_steps(target: Target, config: dict[str, object]) -> list[Step]:
    steps = []
    for index in config["indexes"]:  # type: ignore[attr-defined]
        fields = [
            f"--field-config=field-path={f['fieldPath']},order={f['order'].lower()}"
            for f in index["fields"]
        ]
        scope = index["queryScope"].lower().replace("_", "-")
        steps.append(
            Step(
                f"index {index['collectionGroup']}("
                + ", ".join(f["fieldPath"] for f in index["fields"])
                + ")",
                _gcloud(
                    "firestore",
                    "indexes",
                    "composite",
                    "create",
                    f"--collection-group={index['collectionGroup']}",
                    f"--query-scope={scope}",
                    *fields,
                    target=target,
                ),
                exists_ok=True,
            )
        )
    for override in config.get("fieldOverrides", []):  # type: ignore[attr-defined]
        if override.get("indexes"):
            steps.append(field_index_step(target, override))
            continue
        # An exemption: a field written in increasing order at sale or import rate, which no
        # query needs, is not indexed.
        steps.append(
            Step(
                f"no index on {override['collectionGroup']}.{override['fieldPath']}",
                _gcloud(
                    "firestore",
                    "indexes",
                    "fields",
                    "update",
                    override["fieldPath"],
                    f"--collection-group={override['collectionGroup']}",
                    "--disable-indexes",
                    "--async",
                    target=target,
                ),
            )
        )
    return steps


def field_index_step(target: Target, override: dict[str, Any]) -> Step:
    """A field override that lists its single-field indexes (the collection-group ones the
    checkout half queries across campaigns). gcloud's `fields update --index` only makes
    collection-scoped ones, so this is the Firestore Admin REST API with gcloud's credentials,
    setting the field's whole index config."""
    group, path = override["collectionGroup"], override["fieldPath"]
    indexes = [
        {
            "queryScope": index["queryScope"],
            "fields": [
                {"fieldPath": path, **{k: v for k, v in index.items() if k != "queryScope"}}
            ],
        }
        for index in override["indexes"]
    ]
    url = (
        f"https://firestore.googleapis.com/v1/projects/{target.project}/databases/(default)"
        f"/collectionGroups/{group}/fields/{path}?updateMask=indexConfig"
    )
    body = json.dumps({"indexConfig": {"indexes": indexes}}, separators=(",", ":"))
    command = (
        f"TOKEN=$(gcloud auth print-access-token --project={target.project})"
        ' && curl -sSf -X PATCH -H "Authorization: Bearer $TOKEN"'
        f' -H "x-goog-user-project: {target.project}" -H "Content-Type: application/json"'
        f" -d {shlex.quote(body)} {shlex.quote(url)} >/dev/null"
    )
    scopes = ", ".join(str(i["queryScope"]).lower() for i in indexes)
    return Step(f"index on {group}.{path} ({scopes})", command)


def rules_step(target: Target, rules: Path) -> Step:
    """firestore.rules as the release of cloud.firestore. No gcloud command deploys rules, so
    this is the Firebase Rules REST API called with gcloud's own credentials: create a ruleset
    from the file, then point the release at it (update, or create on a fresh project)."""
    api = f"https://firebaserules.googleapis.com/v1/projects/{target.project}"
    release = f"projects/{target.project}/releases/cloud.firestore"
    headers = (
        '-H "Authorization: Bearer $TOKEN" '
        f'-H "x-goog-user-project: {target.project}" -H "Content-Type: application/json"'
    )
    ruleset_body = (
        'python3 -c \'import json,sys; print(json.dumps({"source": {"files": '
        '[{"name": "firestore.rules", "content": open(sys.argv[1]).read()}]}}))\' '
        f"{shlex.quote(str(rules))}"
    )
    new_release = f'{{\\"name\\": \\"{release}\\", \\"rulesetName\\": \\"$RULESET\\"}}'
    ruleset_name = "python3 -c 'import json,sys; print(json.load(sys.stdin)[\"name\"])'"
    command = (
        f"TOKEN=$(gcloud auth print-access-token --project={target.project})"
        f" && RULESET=$({ruleset_body} | curl -sSf -X POST {headers} --data-binary @-"
        f' "{api}/rulesets" | {ruleset_name})'
        f' && {{ curl -sSf -X PATCH {headers} -d "{{\\"release\\": {new_release}}}"'
        f' "{api}/releases/cloud.firestore" >/dev/null'
        f' || curl -sSf -X POST {headers} -d "{new_release}" "{api}/releases" >/dev/null; }}'
    )
    return Step("Firestore rules (deny every client)", command)


def secret_steps(target: Target, secret: Secret) -> list[Step]:
    """The secret, and a first value only when it has none (a function deployed with
    `--set-secrets=…:latest` needs one to start)."""
    name = target.secret_name(secret)
    return [
        Step(
            f"secret {name}",
            _gcloud("secrets", "create", name, "--replication-policy=automatic", target=target),
            exists_ok=True,
        ),
        Step(
            f"secret {name}: a first value ({secret.first_value})",
            _gcloud("secrets", "versions", "add", name, "--data-file=-", target=target),
            stdin=secret.value,
            unless=_gcloud(
                "secrets",
                "versions",
                "list",
                name,
                "--filter=state=enabled",
                "--limit=1",
                "--format=value(name)",
                target=target,
            ),
        ),
    ]


def identity_steps(target: Target, specs: Iterable[FunctionSpec]) -> list[Step]:
    """Service accounts, the bucket, topics and the secret, with the IAM each caller needs."""
    specs = list(specs)
    steps = [
        Step(
            f"service account {name}",
            _gcloud(
                "iam",
                "service-accounts",
                "create",
                f"codedrop-{name}",
                f"--display-name=codedrop {name}",
                target=target,
            ),
            exists_ok=True,
        )
        for name in [*(spec.account for spec in specs), INVOKER_ACCOUNT]
    ]
    bucket = f"gs://{target.imports_bucket}"
    steps += [
        Step(
            "imports bucket",
            _gcloud(
                "storage",
                "buckets",
                "create",
                bucket,
                f"--location={target.region}",
                "--uniform-bucket-level-access",
                "--public-access-prevention",
                target=target,
            ),
            exists_ok=True,
        ),
        Step(
            "events topic",
            _gcloud("pubsub", "topics", "create", target.events_topic, target=target),
            exists_ok=True,
        ),
        Step(
            "dead-letter topic",
            _gcloud("pubsub", "topics", "create", target.dead_letter_topic, target=target),
            exists_ok=True,
        ),
        Step(
            "dead-letter subscription (keeps what count_usage never took, 7 days)",
            _gcloud(
                "pubsub",
                "subscriptions",
                "create",
                target.dead_letter_topic,
                f"--topic={target.dead_letter_topic}",
                "--message-retention-duration=7d",
                "--expiration-period=never",
                target=target,
            ),
            exists_ok=True,
        ),
        *(step for secret in SECRETS for step in secret_steps(target, secret)),
    ]
    for spec in specs:
        account = target.account(spec.account)
        steps += [
            Step(
                f"{spec.name} reads and writes Firestore",
                [
                    "gcloud",
                    "projects",
                    "add-iam-policy-binding",
                    target.project,
                    _sa(account),
                    "--role=roles/datastore.user",
                    "--condition=None",
                ],
            ),
            Step(
                f"{spec.name} publishes events",
                _gcloud(
                    "pubsub",
                    "topics",
                    "add-iam-policy-binding",
                    target.events_topic,
                    _sa(account),
                    "--role=roles/pubsub.publisher",
                    target=target,
                ),
            ),
            *(
                Step(
                    f"{spec.name} reads {secret.env}",
                    _gcloud(
                        "secrets",
                        "add-iam-policy-binding",
                        target.secret_name(secret),
                        _sa(account),
                        "--role=roles/secretmanager.secretAccessor",
                        target=target,
                    ),
                )
                for secret in secrets_of(spec)
            ),
        ]
        if spec.account in BUCKET_ROLES:
            steps.append(
                Step(
                    f"{spec.name} uses the imports bucket",
                    [
                        "gcloud",
                        "storage",
                        "buckets",
                        "add-iam-policy-binding",
                        bucket,
                        _sa(account),
                        f"--role={BUCKET_ROLES[spec.account]}",
                        f"--project={target.project}",
                    ],
                )
            )
    steps += [
        # Eventarc's storage trigger: Cloud Storage publishes object events, the trigger
        # receives them as the invoker account.
        Step(
            "Cloud Storage's agent publishes object events",
            [
                "gcloud",
                "projects",
                "add-iam-policy-binding",
                target.project,
                _sa(target.storage_agent),
                "--role=roles/pubsub.publisher",
                "--condition=None",
            ],
        ),
        Step(
            "the invoker receives Eventarc events",
            [
                "gcloud",
                "projects",
                "add-iam-policy-binding",
                target.project,
                _sa(target.invoker),
                "--role=roles/eventarc.eventReceiver",
                "--condition=None",
            ],
        ),
        # Push subscriptions sign OIDC tokens for the invoker through Pub/Sub's agent.
        Step(
            "Pub/Sub's agent signs push tokens as the invoker",
            _gcloud(
                "iam",
                "service-accounts",
                "add-iam-policy-binding",
                target.invoker,
                _sa(target.pubsub_agent),
                "--role=roles/iam.serviceAccountTokenCreator",
                target=target,
            ),
        ),
    ]
    return steps


def invoker_steps(target: Target, specs: Iterable[FunctionSpec]) -> list[Step]:
    """After the functions: only the invoker may call the private ones."""
    return [
        Step(
            f"the invoker calls {spec.name}",
            [
                "gcloud",
                "functions",
                "add-invoker-policy-binding",
                spec.service,
                f"--region={target.region}",
                _sa(target.invoker),
                f"--project={target.project}",
            ],
        )
        for spec in specs
        if not spec.trigger.public
    ]


@dataclass(frozen=True)
class Subscription:
    """A push subscription on the events topic feeding one private function."""

    function: str  # the FunctionSpec's name
    retry: tuple[str, str]  # min and max backoff between redeliveries
    max_delivery_attempts: int  # then the dead-letter topic
    message_filter: str | None = None  # only the messages whose attributes match


# count_usage: a failure is Firestore having a bad moment, so back off far and retry long.
# deliver_webhooks: records deliveries and drains them; the drain retries by itself for 24 h,
# so a push that keeps failing is dead-lettered sooner.
SUBSCRIPTIONS = (
    Subscription("count_usage", PUSH_RETRY, MAX_DELIVERY_ATTEMPTS),
    # Only the events of campaigns with a webhook for them (shared/webhooks/routes.py).
    Subscription(
        "deliver_webhooks",
        ("--min-retry-delay=5s", "--max-retry-delay=300s"),
        5,
        message_filter=routes.FILTER,
    ),
)


def subscription_steps(target: Target, spec: FunctionSpec, sub: Subscription) -> list[Step]:
    """A push subscription: OIDC as the invoker, backoff, dead letters."""
    url = target.url(spec)
    settings = [
        f"--push-endpoint={url}",
        f"--push-auth-service-account={target.invoker}",
        f"--push-auth-token-audience={url}",
        f"--ack-deadline={ACK_DEADLINE_SECONDS}",
        *sub.retry,
        f"--dead-letter-topic={target.dead_letter_topic}",
        f"--max-delivery-attempts={sub.max_delivery_attempts}",
    ]
    name = target.subscription_for(spec)
    steps = []
    create = [f"--topic={target.events_topic}", "--expiration-period=never", *settings]
    if sub.message_filter is not None:
        create.append(f"--message-filter={sub.message_filter}")
        # A subscription's filter is set when it is created and never changed: one made
        # without it (or with another) is replaced. Events published between the delete and
        # the create, and those it had not delivered yet, are not pushed to the function:
        # deploy such a change between sales.
        steps.append(
            Step(
                f"{spec.name}'s push subscription without its filter is deleted",
                _gcloud("pubsub", "subscriptions", "delete", name, "--quiet", target=target),
                when=_gcloud(
                    "pubsub",
                    "subscriptions",
                    "list",
                    f"--filter=name~/subscriptions/{name}$ AND NOT filter={sub.message_filter!r}",
                    "--format=value(name)",
                    target=target,
                ),
            )
        )
    return [
        *steps,
        Step(
            f"{spec.name}'s push subscription",
            _gcloud("pubsub", "subscriptions", "create", name, *create, target=target),
            exists_ok=True,
        ),
        Step(
            f"{spec.name}'s push subscription settings (a re-run applies changes)",
            _gcloud("pubsub", "subscriptions", "update", name, *settings, target=target),
        ),
        # Dead-lettering: Pub/Sub's agent takes the message off the subscription and
        # publishes it to the dead-letter topic.
        Step(
            f"Pub/Sub's agent takes dead letters off {name}",
            _gcloud(
                "pubsub",
                "subscriptions",
                "add-iam-policy-binding",
                name,
                _sa(target.pubsub_agent),
                "--role=roles/pubsub.subscriber",
                target=target,
            ),
        ),
    ]


def dead_letter_publisher_step(target: Target) -> Step:
    return Step(
        "Pub/Sub's agent publishes dead letters",
        _gcloud(
            "pubsub",
            "topics",
            "add-iam-policy-binding",
            target.dead_letter_topic,
            _sa(target.pubsub_agent),
            "--role=roles/pubsub.publisher",
            target=target,
        ),
    )


def scheduler_steps(target: Target, sweep: FunctionSpec) -> list[Step]:
    """The sweep every minute, signed with an OIDC token of the invoker account."""
    url = target.url(sweep)
    common = [
        f"--location={target.region}",
        "--schedule=* * * * *",
        "--time-zone=Etc/UTC",
        f"--uri={url}",
        "--http-method=POST",
        "--message-body={}",
        f"--oidc-service-account-email={target.invoker}",
        f"--oidc-token-audience={url}",
        "--attempt-deadline=120s",
    ]
    return [
        Step(
            "the sweep's schedule",
            _gcloud(
                "scheduler",
                "jobs",
                "create",
                "http",
                "codedrop-sweep",
                *common,
                "--headers=Content-Type=application/json",
                target=target,
            ),
            exists_ok=True,
        ),
        Step(
            "the sweep's schedule settings (a re-run applies changes)",
            _gcloud(
                "scheduler",
                "jobs",
                "update",
                "http",
                "codedrop-sweep",
                *common,
                "--update-headers=Content-Type=application/json",
                target=target,
            ),
        ),
    ]
