"""Everything a project needs besides the functions, as plan steps, in the order they must run.

APIs, the Firestore database, Firebase on the project, then firebase-tools deploys Firestore's
rules, indexes, index exemptions and TTL policies from firebase.json (firestore.rules and
firestore.indexes.json: the files the test suite checks); service accounts (a build account of
our own among them) and the IAM each caller needs, the imports bucket, the events topic with its
dead-letter topic, the secrets, and, after the functions, the push subscriptions (retry and
dead-letter policies) and the Cloud Scheduler job that calls the sweep every minute, both
signing OIDC tokens for a run.app URL of the function: the push subscriptions for its
deterministic URL (the audience the function is deployed checking), the scheduler for the URI
`gcloud functions describe` reports.

Every create step asks first whether its resource is there (`unless`) and is marked `exists_ok`
(a create that finds it anyway goes on); update steps follow where a re-run must apply changed
settings. See plan.py for what is retried.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from scripts.deployment.functions import FunctionSpec
from scripts.deployment.gcloud import (
    BUILD_ACCOUNT,
    INVOKER_ACCOUNT,
    SECRETS,
    TICKET_SECRET,
    Secret,
    account_email,
    push_audience,
    secrets_of,
)
from scripts.deployment.plan import Lookup, Step
from shared.webhooks import marking

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
    # Firebase: the project's Firebase side, Auth (shoppers' sign-in) and Hosting (the pages).
    "firebase.googleapis.com",
    "identitytoolkit.googleapis.com",
    "firebasehosting.googleapis.com",
    # The dashboard, its log-based metrics and the alert policies (deploy/monitoring/).
    "monitoring.googleapis.com",
    "logging.googleapis.com",
)
# What a function build needs of its build account (Cloud Functions' documented role for a
# custom build service account: logs, the source bucket, Artifact Registry).
BUILD_ROLES = ("roles/cloudbuild.builds.builder",)
# firebase-tools as package-lock.json pins it (scripts/deploy installs the Node packages).
FIREBASE = ("npx", "--no-install", "firebase")
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

    def audience(self, spec: FunctionSpec) -> str:
        """What the function's push subscription signs for and the function checks."""
        return push_audience(spec, project_number=self.project_number, region=self.region)

    def uri(self, spec: FunctionSpec) -> Lookup:
        """The function's run.app URI, known once it is deployed: the audience Cloud Run always
        accepts in an OIDC token (a cloudfunctions.net URL is not one)."""
        return Lookup(
            f"<uri of {spec.service}>",
            (
                "gcloud",
                "functions",
                "describe",
                spec.service,
                f"--region={self.region}",
                "--format=value(serviceConfig.uri)",
                f"--project={self.project}",
            ),
        )

    def account(self, name: str) -> str:
        return account_email(name, self.project)

    @property
    def invoker(self) -> str:
        return self.account(INVOKER_ACCOUNT)

    @property
    def builder(self) -> str:
        return self.account(BUILD_ACCOUNT)

    @property
    def pubsub_agent(self) -> str:
        return f"service-{self.project_number}@gcp-sa-pubsub.iam.gserviceaccount.com"

    @property
    def storage_agent(self) -> str:
        return f"service-{self.project_number}@gs-project-accounts.iam.gserviceaccount.com"


def gcloud_command(*args: str, target: Target) -> list[str]:
    return ["gcloud", *args, f"--project={target.project}"]


def _sa(email: str) -> str:
    return f"--member=serviceAccount:{email}"


def _describes(*args: str, target: Target) -> list[str]:
    """A probe: prints the resource's name when it exists, fails when it does not."""
    return gcloud_command(*args, "--format=value(name)", target=target)


def _rest(target: Target, method: str, url: str) -> str:
    """A REST call with gcloud's credentials, printing the answer (fails on an HTTP error)."""
    return (
        f"TOKEN=$(gcloud auth print-access-token --project={target.project})"
        f' && curl -sSf -X {method} -H "Authorization: Bearer $TOKEN"'
        f' -H "x-goog-user-project: {target.project}" {shlex.quote(url)}'
    )


def _firebase(*args: str, target: Target) -> list[str]:
    return [*FIREBASE, *args, "--project", target.project, "--non-interactive"]


def foundation(target: Target, *, indexes: Path) -> list[Step]:
    """APIs, the database, Firebase, then Firestore's rules, indexes, exemptions and TTL."""
    config = json.loads(indexes.read_text())
    ttl = [f"{o['collectionGroup']}.{o['fieldPath']}" for o in config["fieldOverrides"] if o["ttl"]]
    return [
        Step("APIs", gcloud_command("services", "enable", *APIS, target=target)),
        Step(
            "Firestore database",
            gcloud_command(
                "firestore",
                "databases",
                "create",
                f"--location={target.firestore_location}",
                "--type=firestore-native",
                target=target,
            ),
            exists_ok=True,
            unless=_describes("firestore", "databases", "describe", target=target),
        ),
        Step(
            "Firebase on the project (Auth, Hosting)",
            [*FIREBASE, "projects:addfirebase", target.project, "--non-interactive"],
            exists_ok=True,
            unless=_rest(
                target, "GET", f"https://firebase.googleapis.com/v1beta1/projects/{target.project}"
            ),
        ),
        # firebase-tools compares with what is deployed and changes only the difference, one
        # field at a time; Firestore's admin contention on a long list is retried (plan.py) and
        # the retry goes on where the last run stopped.
        Step(
            f"Firestore rules, {len(config['indexes'])} composite indexes, "
            f"{len(config['fieldOverrides'])} field overrides, TTL policies on "
            + ", ".join(ttl)
            + " (firebase.json)",
            _firebase("deploy", "--only", "firestore", target=target),
        ),
    ]


def secret_steps(target: Target, secret: Secret) -> list[Step]:
    """The secret, and a first value only when it has none (a function deployed with
    `--set-secrets=…:latest` needs one to start)."""
    name = target.secret_name(secret)
    return [
        Step(
            f"secret {name}",
            gcloud_command(
                "secrets", "create", name, "--replication-policy=automatic", target=target
            ),
            exists_ok=True,
            unless=_describes("secrets", "describe", name, target=target),
        ),
        Step(
            f"secret {name}: a first value ({secret.first_value})",
            gcloud_command("secrets", "versions", "add", name, "--data-file=-", target=target),
            stdin=secret.value,
            unless=gcloud_command(
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
            gcloud_command(
                "iam",
                "service-accounts",
                "create",
                f"codedrop-{name}",
                f"--display-name=codedrop {name}",
                target=target,
            ),
            exists_ok=True,
            unless=gcloud_command(
                "iam",
                "service-accounts",
                "describe",
                target.account(name),
                "--format=value(email)",
                target=target,
            ),
        )
        for name in [*(spec.account for spec in specs), INVOKER_ACCOUNT, BUILD_ACCOUNT]
    ]
    # Since mid-2024 a new project's default Cloud Build account may lack what a function build
    # needs; every deploy names this one (gcloud.build_command).
    steps += [
        Step(
            f"the build account has {role}",
            [
                "gcloud",
                "projects",
                "add-iam-policy-binding",
                target.project,
                _sa(target.builder),
                f"--role={role}",
                "--condition=None",
            ],
        )
        for role in BUILD_ROLES
    ]
    bucket = f"gs://{target.imports_bucket}"
    steps += [
        Step(
            "imports bucket",
            gcloud_command(
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
            unless=_describes("storage", "buckets", "describe", bucket, target=target),
        ),
        Step(
            "events topic",
            gcloud_command("pubsub", "topics", "create", target.events_topic, target=target),
            exists_ok=True,
            unless=_describes("pubsub", "topics", "describe", target.events_topic, target=target),
        ),
        Step(
            "dead-letter topic",
            gcloud_command("pubsub", "topics", "create", target.dead_letter_topic, target=target),
            exists_ok=True,
            unless=_describes(
                "pubsub", "topics", "describe", target.dead_letter_topic, target=target
            ),
        ),
        Step(
            "dead-letter subscription (keeps what count_usage never took, 7 days)",
            gcloud_command(
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
            unless=_describes(
                "pubsub", "subscriptions", "describe", target.dead_letter_topic, target=target
            ),
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
                gcloud_command(
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
                    gcloud_command(
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
        # receives them as the invoker account. The Cloud Storage agent exists only once asked
        # for; this asks (and prints it), so the binding below names an account that exists.
        Step("Cloud Storage's agent", gcloud_command("storage", "service-agent", target=target)),
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
            gcloud_command(
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
        message_filter=marking.FILTER,
    ),
)


def subscription_steps(target: Target, spec: FunctionSpec, sub: Subscription) -> list[Step]:
    """A push subscription: OIDC as the invoker, backoff, dead letters."""
    uri = target.uri(spec)
    settings = [
        f"--push-endpoint={uri.marker}",
        f"--push-auth-service-account={target.invoker}",
        f"--push-auth-token-audience={target.audience(spec)}",
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
                gcloud_command("pubsub", "subscriptions", "delete", name, "--quiet", target=target),
                when=gcloud_command(
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
            gcloud_command("pubsub", "subscriptions", "create", name, *create, target=target),
            exists_ok=True,
            unless=_describes("pubsub", "subscriptions", "describe", name, target=target),
            lookups=(uri,),
        ),
        Step(
            f"{spec.name}'s push subscription settings (a re-run applies changes)",
            gcloud_command("pubsub", "subscriptions", "update", name, *settings, target=target),
            lookups=(uri,),
        ),
        # Dead-lettering: Pub/Sub's agent takes the message off the subscription and
        # publishes it to the dead-letter topic.
        Step(
            f"Pub/Sub's agent takes dead letters off {name}",
            gcloud_command(
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
        gcloud_command(
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
    uri = target.uri(sweep)
    common = [
        f"--location={target.region}",
        "--schedule=* * * * *",
        "--time-zone=Etc/UTC",
        f"--uri={uri.marker}",
        "--http-method=POST",
        "--message-body={}",
        f"--oidc-service-account-email={target.invoker}",
        f"--oidc-token-audience={uri.marker}",
        "--attempt-deadline=120s",
    ]
    return [
        Step(
            "the sweep's schedule",
            gcloud_command(
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
            unless=_describes(
                "scheduler",
                "jobs",
                "describe",
                "codedrop-sweep",
                f"--location={target.region}",
                target=target,
            ),
            lookups=(uri,),
        ),
        Step(
            "the sweep's schedule settings (a re-run applies changes)",
            gcloud_command(
                "scheduler",
                "jobs",
                "update",
                "http",
                "codedrop-sweep",
                *common,
                "--update-headers=Content-Type=application/json",
                target=target,
            ),
            lookups=(uri,),
        ),
    ]


def hosting_steps(
    target: Target, *, claim_api: FunctionSpec, admin_api: FunctionSpec, root: Path
) -> list[Step]:
    """The landing page and the console on Firebase Hosting (firebase.json "hosting", from
    the folder hosting.stage_pages filled), configured with the functions' URIs and the
    project's Firebase web app."""
    project = ["--project", target.project, "--non-interactive"]
    claim, admin = target.uri(claim_api), target.uri(admin_api)
    sdk = Lookup("<the web app's config>", (*FIREBASE, "apps:sdkconfig", "WEB", *project))
    webapps = f"https://firebase.googleapis.com/v1beta1/projects/{target.project}/webApps"
    return [
        Step(
            "a Firebase web app for the pages (their Auth configuration)",
            [*FIREBASE, "apps:create", "WEB", "codedrop", *project],
            unless=_rest(target, "GET", webapps) + " | grep -o '\"appId\"'",
        ),
        Step(
            "the pages' config.json (claim_api's and admin_api's URIs, the web app's config)",
            [
                "python3",
                "-m",
                "scripts.deployment.hosting",
                f"--root={root}",
                f"--api-base={claim.marker}",
                f"--admin-api-base={admin.marker}",
                f"--sdk-config={sdk.marker}",
            ],
            lookups=(claim, admin, sdk),
        ),
        Step(
            "the landing page at / and the console at /console/ on Firebase Hosting",
            _firebase("deploy", "--only", "hosting", "--public", str(root), target=target),
        ),
    ]


# What the console's browser upload needs of the imports bucket (devkit/emulators/storage_cors.py
# answers the same locally): PUT of a resumable session's chunks and its status queries, and
# `Range` readable, or the browser cannot tell where to resume.
UPLOAD_CORS_METHODS = ("PUT",)
UPLOAD_CORS_HEADERS = ("Content-Type", "Range", "Location", "X-GUploader-UploadID")


def bucket_cors_file(build_dir: Path) -> Path:
    return build_dir.resolve() / "imports-bucket-cors.json"


def write_bucket_cors(build_dir: Path, origins: Sequence[str]) -> Path:
    """The imports bucket's CORS configuration for the console's origins, as a file for gcloud."""
    path = bucket_cors_file(build_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    rule = {
        "origin": sorted(set(origins)),
        "method": list(UPLOAD_CORS_METHODS),
        "responseHeader": list(UPLOAD_CORS_HEADERS),
        "maxAgeSeconds": 3600,
    }
    path.write_text(json.dumps([rule], indent=2) + "\n", encoding="utf-8")
    return path


def bucket_cors_step(target: Target, cors_file: Path) -> Step:
    """Set (again, on a re-run: the same file changes nothing) the bucket's CORS."""
    return Step(
        "imports bucket CORS (the console uploads codes from the browser)",
        gcloud_command(
            "storage",
            "buckets",
            "update",
            f"gs://{target.imports_bucket}",
            f"--cors-file={cors_file}",
            target=target,
        ),
    )
