"""The one table of what gets deployed, and which of its entry points functions/main.py defines.

Each function is deployed from the same staged folder with its own entry point, trigger, sizing
and service account. Who can call it is chosen per caller (docs/deploy.md, "Who may call what,
and sizing"):
- claim_api and admin_api are public at the IAM level: a shopper's or a marketer's browser holds
  only a Firebase ID token, which the functions verify per route (and a shop's webhook has no
  Google identity at all);
- sweep and count_usage are private: Cloud Run admits only the codedrop-invoker service account
  that Cloud Scheduler and the Pub/Sub push subscription sign their requests as;
- import_codes is triggered by Eventarc on the imports bucket, signed as the same invoker.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from scripts.deployment import DeployError
from shared.http.entry_points import Kind

LOG = logging.getLogger("codedrop.deploy")

# Must match shared.settings.Settings (tests/tools/test_deploy.py checks): the trigger and the
# code that reads the setting have to name the same topic. (The bucket is named per project,
# see default_imports_bucket, and every function is told its name.)
DEFAULT_EVENTS_TOPIC = "coupon-events"


def default_imports_bucket(project: str) -> str:
    """Bucket names are global: the first adopter of a fixed name would own it for everyone.
    A project id (6-30 characters) makes it ours and keeps it under the 63-character limit."""
    return f"{project}-codedrop-imports"


class Trigger(enum.Enum):
    PUBLIC_HTTP = "public http (the function checks Firebase ID tokens)"
    PRIVATE_HTTP = "private http (IAM)"
    PUSH_SUBSCRIPTION = "private http pushed by our Pub/Sub subscription (IAM)"
    STORAGE_FINALIZED = "storage object finalized (Eventarc)"

    @property
    def signature(self) -> Kind:
        """The kind of entry point this trigger needs.

        A push subscription posts the raw Pub/Sub envelope, which functions-framework turns into
        a messagePublished CloudEvent for a @cloud_event function."""
        if self in (Trigger.PUBLIC_HTTP, Trigger.PRIVATE_HTTP):
            return Kind.HTTP
        return Kind.CLOUD_EVENT

    @property
    def public(self) -> bool:
        return self is Trigger.PUBLIC_HTTP


@dataclass(frozen=True)
class FunctionSpec:
    name: str  # the entry point's name in functions/main.py, the deployed name's source, --only
    trigger: Trigger
    account: str  # runtime service account id (codedrop-<account>@PROJECT.iam...)
    concurrency: int
    max_instances: int
    timeout: str = "60s"
    memory: str = "512Mi"
    cpu: str = "1"
    min_instances: int = 0
    retry: bool = False

    @property
    def entry_point(self) -> str:
        return self.name

    @property
    def service(self) -> str:
        """The deployed name (a Cloud Run service name: no underscores)."""
        return self.name.replace("_", "-")


# Concurrency above 1 needs at least one CPU; THREADS (functions-framework's gunicorn threads,
# otherwise 4 per CPU) is set to the concurrency so an instance really serves that many
# requests at once. Minimum instances cost money while idle: only the shoppers' path keeps one
# warm (a cold start during a sale's first second is a shopper waiting several seconds); raise
# it with --sale-min-instances before a big sale. Every function has 1 CPU and 512 MiB unless
# said otherwise.
FUNCTIONS: tuple[FunctionSpec, ...] = (
    # Deployed in this order. The events' consumers first: a claim_api that batches claims must
    # not publish a message the running count_usage and deliver_webhooks cannot read yet.
    # Sharded counters fed by the push subscription (its retry and dead-letter policies are
    # ours, see resources.py); idempotent on event_id. A sale of 10,000 claims in a minute is
    # ~170 events/s: 20 instances x 40.
    FunctionSpec(
        "count_usage", Trigger.PUSH_SUBSCRIPTION, "usage", concurrency=40, max_instances=20
    ),
    # Webhook deliveries to businesses, fed by their own push subscription: a push records the
    # event's deliveries and drains the endpoints (up to 20 s each, bounded by per-endpoint
    # throttles and 5 s request timeouts), so requests wait on the network, not the CPU.
    FunctionSpec(
        "deliver_webhooks", Trigger.PUSH_SUBSCRIPTION, "webhooks", concurrency=16, max_instances=20
    ),
    # Shoppers' claims: the hot path. I/O-bound (each claim waits on Firestore), so many
    # requests share one CPU; 100 instances x 80 = 8,000 claims in flight.
    FunctionSpec(
        "claim_api",
        Trigger.PUBLIC_HTTP,
        "claim-api",
        concurrency=80,
        max_instances=100,
        min_instances=1,
    ),
    # Marketers and operators, and shops' order webhooks: few callers, some long reports.
    FunctionSpec(
        "admin_api",
        Trigger.PUBLIC_HTTP,
        "admin-api",
        concurrency=20,
        max_instances=5,
        timeout="300s",
    ),
    # Called every minute by Cloud Scheduler; one sweep at a time is plenty.
    FunctionSpec(
        "sweep", Trigger.PRIVATE_HTTP, "sweep", concurrency=1, max_instances=2, timeout="120s"
    ),
    # One CSV per instance at a time (memory is bounded per file; 1 GiB leaves room for the
    # in-flight batches); a million-code file takes minutes, hence the 540 s event maximum.
    # Redelivery is safe (idempotent import), so Eventarc retries.
    FunctionSpec(
        "import_codes",
        Trigger.STORAGE_FINALIZED,
        "import",
        concurrency=1,
        max_instances=10,
        timeout="540s",
        memory="1Gi",
        retry=True,
    ),
)
FUNCTION_NAMES = tuple(spec.name for spec in FUNCTIONS)


def select_functions(
    defined: Mapping[str, Kind | None], only: str | None = None
) -> list[FunctionSpec]:
    """The table's functions (or just `only`); each must be defined with the right decorator."""
    selected = []
    for spec in FUNCTIONS:
        if only is not None and spec.name != only:
            continue
        if spec.entry_point not in defined:
            raise DeployError(
                f"{spec.name}: entry point {spec.entry_point!r} is not defined in functions/main.py"
            )
        kind = defined[spec.entry_point]
        if kind is not None and kind != spec.trigger.signature:
            raise DeployError(
                f"{spec.name}: {spec.entry_point} is decorated "
                f"@functions_framework.{kind.decorator} but its trigger "
                f"({spec.trigger.value}) needs "
                f"@functions_framework.{spec.trigger.signature.decorator}"
            )
        selected.append(spec)
    return selected
