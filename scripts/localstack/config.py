"""Every port, function and variable of the local stack, in one table each."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from shared.http.entry_points import Kind

REPO = Path(__file__).resolve().parents[2]
MAIN_PY = REPO / "functions" / "main.py"
HOST = "127.0.0.1"
READY_LINE = "codedrop local stack ready"

DEFAULT_PROJECT = "demo-codedrop"
DEFAULT_BUCKET = "codedrop-imports"
DEFAULT_TOPIC = "coupon-events"
DEFAULT_LOG_DIR = ".local/logs"
DEFAULT_CORS_ORIGINS = "http://localhost:3000,http://127.0.0.1:3000"


@dataclass(frozen=True, slots=True)
class Port:
    key: str  # the flag is --<key>-port
    env: str
    default: int
    what: str


PORTS: tuple[Port, ...] = (
    Port("firestore", "CODEDROP_FIRESTORE_PORT", 8080, "Firestore emulator"),
    Port("pubsub", "CODEDROP_PUBSUB_PORT", 8085, "Pub/Sub emulator"),
    Port("storage", "CODEDROP_STORAGE_PORT", 9199, "Storage emulator"),
    Port("auth", "CODEDROP_AUTH_PORT", 9099, "Firebase Auth emulator"),
    Port("app-check", "CODEDROP_APP_CHECK_PORT", 9098, "development App Check keys and tokens"),
    Port("claim-api", "CODEDROP_CLAIM_API_PORT", 8001, "claim_api"),
    Port("admin-api", "CODEDROP_ADMIN_API_PORT", 8002, "admin_api"),
    Port("count-usage", "CODEDROP_COUNT_USAGE_PORT", 8003, "count_usage"),
    Port("import-codes", "CODEDROP_IMPORT_CODES_PORT", 8004, "import_codes"),
    Port("deliver-webhooks", "CODEDROP_DELIVER_WEBHOOKS_PORT", 8005, "deliver_webhooks"),
    Port(
        "sweep", "CODEDROP_SWEEP_PORT", 8006, "sweep (called every minute, as Cloud Scheduler does)"
    ),
    Port("web", "CODEDROP_WEB_PORT", 3000, "example landing page (--demo)"),
)
EMULATOR_PORTS = ("firestore", "pubsub", "storage", "auth")


def page_origins(web_port: int) -> str:
    """The example page's origins, which claim_api allows unless CODEDROP_CORS_ORIGINS says."""
    return f"http://localhost:{web_port},http://{HOST}:{web_port}"


def env_int(name: str, default: int) -> int:
    """A positive integer from the environment, `default` when unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"local_stack: {name}={raw!r} is not an integer") from None
    if value <= 0:
        raise SystemExit(f"local_stack: {name}={raw!r} must be positive")
    return value


@dataclass(frozen=True, slots=True)
class Function:
    """An entry point of functions/main.py and how the local stack serves it."""

    name: str
    workers: int  # gunicorn processes (functions-framework reads WORKERS)
    threads: int  # threads per process (THREADS)
    # Its decorator in main.py, filled in by scripts.localstack.functions.defined_functions.
    kind: Kind | None = None

    @property
    def port_key(self) -> str:
        return self.name.replace("_", "-")

    @property
    def workers_env(self) -> str:
        return f"CODEDROP_{self.name.upper()}_WORKERS"

    @property
    def threads_env(self) -> str:
        return f"CODEDROP_{self.name.upper()}_THREADS"

    def tuned(self) -> Function:
        """With the process and thread counts its variables set, if any."""
        return replace(
            self,
            workers=env_int(self.workers_env, self.workers),
            threads=env_int(self.threads_env, self.threads),
        )


# Started only if functions/main.py defines them, so later entry points come up by themselves.
# claim_api takes the flash-sale burst: two processes keep claims flowing while one collects
# garbage, and its claims wait mostly on Firestore, hence many threads.
FUNCTIONS: tuple[Function, ...] = (
    Function("claim_api", workers=2, threads=8),
    Function("admin_api", workers=1, threads=8),
    Function("count_usage", workers=1, threads=8),
    Function("import_codes", workers=1, threads=4),
    # Each request may drain an endpoint for up to CODEDROP_WEBHOOK_DRAIN_SECONDS; the others
    # only record their deliveries and answer.
    Function("deliver_webhooks", workers=1, threads=8),
    Function("sweep", workers=1, threads=1),
)


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    default: str
    what: str


def environment_table() -> tuple[EnvVar, ...]:
    """Every variable the local stack reads (also shown by --help)."""
    ports = tuple(EnvVar(p.env, str(p.default), f"{p.what} port") for p in PORTS)
    tuning = tuple(
        var
        for f in FUNCTIONS
        for var in (
            EnvVar(f.workers_env, str(f.workers), f"gunicorn processes of {f.name}"),
            EnvVar(f.threads_env, str(f.threads), f"threads per process of {f.name}"),
        )
    )
    other = (
        EnvVar("CODEDROP_LOG_DIR", DEFAULT_LOG_DIR, "where each process's log goes"),
        EnvVar(
            "CODEDROP_CORS_ORIGINS",
            DEFAULT_CORS_ORIGINS,
            "landing-page origins claim_api allows (default: the example page's)",
        ),
        EnvVar("CODEDROP_IMPORTS_BUCKET", DEFAULT_BUCKET, "the imports bucket"),
        EnvVar("CODEDROP_EVENTS_TOPIC", DEFAULT_TOPIC, "the events topic"),
    )
    return ports + tuning + other


# The emulator ignores subscription filters: deliver_webhooks' filter is a watcher pulling this
# subscription of the events topic into the webhooks topic (scripts/localstack/message_filter.py).
FILTER_SUBSCRIPTION = "deliver-webhooks-filter"


def webhooks_topic(events_topic: str) -> str:
    """The local topic of the events deliver_webhooks' filter passes."""
    return f"{events_topic}-webhooks"


@dataclass(frozen=True, slots=True)
class Config:
    project: str
    ports: Mapping[str, int]  # by Port.key
    log_dir: Path
    bucket: str
    topic: str
    cors_origins: str
    timeout: float
    demo: bool
    check: bool

    @property
    def dead_letter_topic(self) -> str:
        return f"{self.topic}-dead-letter"

    @property
    def webhooks_topic(self) -> str:
        return webhooks_topic(self.topic)

    def url(self, function: str) -> str:
        """Where `function` (a functions/main.py name, or `auth`, `app-check`, `web`) answers."""
        return f"http://{HOST}:{self.ports[function.replace('_', '-')]}"

    @property
    def auth_host(self) -> str:
        """The Auth emulator as FIREBASE_AUTH_EMULATOR_HOST names it."""
        return f"{HOST}:{self.ports['auth']}"
