"""Stage and deploy codedrop's Cloud Functions (gen2) with gcloud.

Cloud Functions gen2 uploads only a function's source folder, with `main.py` at its root, so
`stage()` assembles `build/functions/` from `functions/main.py`, the `shared/` package and
`requirements.txt`. Every function is deployed from that one folder with its own entry point.
Before any deploy, the staged `main.py` is imported in a fresh interpreter with the environment
the functions will get, so a missing file or a bad setting fails here, not in production.

Usage (normally through the `scripts/deploy` wrapper):

    scripts/deploy --dry-run                  # print the gcloud commands, deploy nothing
    scripts/deploy --project my-project       # deploy every function written so far
    scripts/deploy --project my-project --only claim_api
"""

from __future__ import annotations

import argparse
import ast
import enum
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

LOG = logging.getLogger("codedrop.deploy")

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BUILD_DIR = REPO_ROOT / "build"
STAGE_NAME = "functions"

DEFAULT_REGION = "europe-west1"
RUNTIMES = ("python311", "python312")
DEFAULT_RUNTIME = "python311"  # what the project's venv and pyproject target
# Must match shared.settings.Settings (tests/test_deploy.py checks): the trigger and the code
# that reads the setting have to name the same bucket and topic.
DEFAULT_IMPORTS_BUCKET = "codedrop-imports"
DEFAULT_EVENTS_TOPIC = "coupon-events"
GCS_OBJECT_FINALIZED = "google.cloud.storage.object.v1.finalized"

# Shown in --dry-run commands when no --project is given; the import check then uses a demo id.
PLACEHOLDER_PROJECT = "PROJECT_ID"
PREFLIGHT_DEMO_PROJECT = "demo-deploy-dry-run"

# Google Cloud project ids: 6-30 characters, lowercase letters, digits and hyphens, starting
# with a letter and not ending with a hyphen (shared.settings accepts a superset of these).
PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
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
        "THREADS",
    }
)


class DeployError(Exception):
    """A deploy that cannot go ahead; the message says why."""


class Trigger(enum.Enum):
    PUBLIC_HTTP = "public http"
    PRIVATE_HTTP = "private http (IAM)"
    STORAGE_FINALIZED = "storage object finalized"
    PUBSUB = "pub/sub topic"

    @property
    def signature(self) -> str:
        """The functions-framework decorator the entry point needs for this trigger."""
        if self in (Trigger.PUBLIC_HTTP, Trigger.PRIVATE_HTTP):
            return "http"
        return "cloud_event"


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    entry_point: str
    trigger: Trigger
    memory: str
    cpu: str
    concurrency: int
    max_instances: int
    timeout: str
    retry: bool = False


# The one table of what gets deployed. Concurrency above 1 needs at least one CPU; THREADS (the
# functions-framework gunicorn thread count, otherwise 4 per CPU) is set to the concurrency so an
# instance really serves that many requests at once instead of queueing behind 4 threads.
FUNCTIONS: tuple[FunctionSpec, ...] = (
    # Shoppers' claims: the hot path; I/O-bound, so many requests share one CPU.
    FunctionSpec(
        name="claim_api",
        entry_point="claim_api",
        trigger=Trigger.PUBLIC_HTTP,
        memory="512Mi",
        cpu="1",
        concurrency=80,
        max_instances=100,
        timeout="60s",
    ),
    # Marketers and operators: Firebase admin claim in the app, and IAM in front of it.
    FunctionSpec(
        name="admin_api",
        entry_point="admin_api",
        trigger=Trigger.PRIVATE_HTTP,
        memory="512Mi",
        cpu="1",
        concurrency=20,
        max_instances=5,
        timeout="300s",
    ),
    # One CSV per instance at a time; redelivery is safe (idempotent import), so retry.
    FunctionSpec(
        name="import_codes",
        entry_point="import_codes",
        trigger=Trigger.STORAGE_FINALIZED,
        memory="1Gi",
        cpu="1",
        concurrency=1,
        max_instances=10,
        timeout="540s",
        retry=True,
    ),
    # Sharded counters; consumers are idempotent on event_id, so retry.
    FunctionSpec(
        name="count_usage",
        entry_point="count_usage",
        trigger=Trigger.PUBSUB,
        memory="512Mi",
        cpu="1",
        concurrency=40,
        max_instances=20,
        timeout="60s",
        retry=True,
    ),
)
FUNCTION_NAMES = tuple(spec.name for spec in FUNCTIONS)


# --- staging ------------------------------------------------------------------------------------


def _sources(repo_root: Path) -> dict[str, Path]:
    return {
        "main.py": repo_root / "functions" / "main.py",
        "shared": repo_root / "shared",
        "requirements.txt": repo_root / "requirements.txt",
    }


def _check_sources(sources: Mapping[str, Path]) -> None:
    problems = []
    if not sources["main.py"].is_file():
        problems.append(f"{sources['main.py']} (the entry points) is missing")
    if not (sources["shared"] / "__init__.py").is_file():
        problems.append(f"{sources['shared']}/__init__.py (the shared package) is missing")
    if not sources["requirements.txt"].is_file():
        problems.append(f"{sources['requirements.txt']} (runtime requirements) is missing")
    if problems:
        raise DeployError("cannot stage the functions: " + "; ".join(problems))


def _check_target(target: Path, sources: Mapping[str, Path]) -> None:
    """Refuse to delete anything that is not a previous stage."""
    for source in sources.values():
        resolved = source.resolve()
        if target == resolved or target in resolved.parents:
            raise DeployError(f"refusing to stage into {target}: it holds the source {source}")
    if target.exists():
        if not target.is_dir():
            raise DeployError(f"refusing to stage into {target}: it is not a directory")
        if any(target.iterdir()) and not (target / "main.py").is_file():
            raise DeployError(
                f"refusing to stage into {target}: it is not empty and does not look like a "
                "previous stage (no main.py); pick another --build-dir"
            )


def _check_requirements(requirements: Path) -> None:
    """Only requirements.txt is uploaded: references to other local files would not resolve."""
    for number, raw in enumerate(requirements.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if line.startswith(
            ("-r", "-c", "--requirement", "--constraint", "-e", "--editable", ".", "/", "file:")
        ):
            raise DeployError(
                f"{requirements}:{number}: {line!r} refers to a local file, which is not part "
                "of the uploaded source; pin the package instead"
            )


def stage(build_dir: Path, *, repo_root: Path = REPO_ROOT) -> Path:
    """Assemble a clean `<build_dir>/functions` with main.py, shared/ and requirements.txt."""
    sources = _sources(repo_root)
    _check_sources(sources)
    _check_requirements(sources["requirements.txt"])
    target = (build_dir / STAGE_NAME).resolve()
    _check_target(target, sources)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copy2(sources["main.py"], target / "main.py")
    shutil.copytree(
        sources["shared"],
        target / "shared",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"),
    )
    shutil.copy2(sources["requirements.txt"], target / "requirements.txt")
    LOG.info("staged main.py, shared/ and requirements.txt in %s", target)
    return target


# --- which entry points exist -------------------------------------------------------------------


def _decorator_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def defined_entry_points(main_py: Path) -> dict[str, str | None]:
    """Names bound at the top level of main.py, each with its functions-framework signature.

    The signature is "http" or "cloud_event" when a matching decorator is visible, else None.
    """
    tree = ast.parse(main_py.read_text(encoding="utf-8"), filename=str(main_py))
    names: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            kinds = {_decorator_name(d) for d in node.decorator_list} & {"http", "cloud_event"}
            names[node.name] = kinds.pop() if len(kinds) == 1 else None
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = None
        elif isinstance(node, ast.ImportFrom | ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = None
    return names


def select_functions(
    defined: Mapping[str, str | None], only: str | None = None
) -> list[FunctionSpec]:
    """The table's functions whose entry point main.py defines (or just `only`)."""
    selected = []
    for spec in FUNCTIONS:
        if only is not None and spec.name != only:
            continue
        if spec.entry_point not in defined:
            if only is not None:
                raise DeployError(
                    f"{spec.name}: entry point {spec.entry_point!r} is not defined in "
                    "functions/main.py"
                )
            LOG.info(
                "skipping %s: functions/main.py does not define %s (not written yet)",
                spec.name,
                spec.entry_point,
            )
            continue
        signature = defined[spec.entry_point]
        if signature is not None and signature != spec.trigger.signature:
            raise DeployError(
                f"{spec.name}: {spec.entry_point} is decorated @functions_framework.{signature} "
                f"but its trigger ({spec.trigger.value}) needs "
                f"@functions_framework.{spec.trigger.signature}"
            )
        selected.append(spec)
    if not selected:
        raise DeployError("functions/main.py defines none of: " + ", ".join(FUNCTION_NAMES))
    return selected


_PROBE = """
import json, sys
import main, shared
found = [n for n in sys.argv[1:] if callable(getattr(main, n, None))]
print("CODEDROP_PROBE " + json.dumps(
    {"found": found, "main": main.__file__, "shared": shared.__file__}))
"""


def check_staged_import(
    staged: Path, entry_points: Sequence[str], runtime_env: Mapping[str, str]
) -> None:
    """Import the staged main.py in a fresh interpreter (only the stage on its path)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "PYTHONPATH"
        and not key.endswith("_EMULATOR_HOST")
        and key not in MANAGED_ENV
        and not key.startswith("CODEDROP_")
    }
    env.update(runtime_env)
    # The real key is mounted from Secret Manager at run time; the probe only needs a value
    # that passes the settings check.
    env["CODEDROP_TICKET_SECRET"] = secrets.token_urlsafe(32)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # keep __pycache__ out of the upload
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *entry_points],
        cwd=staged,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise DeployError(
            f"importing the staged main.py failed (exit {result.returncode}):\n"
            + result.stderr.strip()[-3000:]
        )
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("CODEDROP_PROBE ")]
    if not lines:
        raise DeployError("importing the staged main.py printed no result:\n" + result.stdout)
    probe = json.loads(lines[-1].removeprefix("CODEDROP_PROBE "))
    for module in ("main", "shared"):
        if staged.resolve() not in Path(probe[module]).resolve().parents:
            raise DeployError(f"the staged import used {probe[module]}, not the stage {staged}")
    missing = [name for name in entry_points if name not in probe["found"]]
    if missing:
        raise DeployError("the staged main.py has no callable " + ", ".join(missing))
    LOG.info("staged main.py imports cleanly; entry points: %s", ", ".join(probe["found"]))


# --- commands -----------------------------------------------------------------------------------


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


def trigger_flags(
    spec: FunctionSpec,
    *,
    imports_bucket: str,
    events_topic: str,
    trigger_location: str | None = None,
) -> list[str]:
    if spec.trigger is Trigger.PUBLIC_HTTP:
        flags = ["--trigger-http", "--allow-unauthenticated"]
    elif spec.trigger is Trigger.PRIVATE_HTTP:
        # Explicit, so gcloud neither prompts nor leaves an old allUsers binding in place.
        flags = ["--trigger-http", "--no-allow-unauthenticated"]
    elif spec.trigger is Trigger.STORAGE_FINALIZED:
        flags = [
            f"--trigger-event-filters=type={GCS_OBJECT_FINALIZED}",
            f"--trigger-event-filters=bucket={imports_bucket}",
        ]
        if trigger_location:
            flags.append(f"--trigger-location={trigger_location}")
    else:
        flags = [f"--trigger-topic={events_topic}"]
    if spec.retry:
        flags.append("--retry")
    return flags


DEFAULT_TICKET_SECRET = "codedrop-ticket-secret"  # noqa: S105 (a secret's name, not its value)


def build_command(
    spec: FunctionSpec,
    *,
    project: str,
    region: str,
    runtime: str,
    source: Path,
    env: Mapping[str, str],
    imports_bucket: str,
    events_topic: str,
    service_account: str | None = None,
    trigger_location: str | None = None,
    ticket_secret: str = DEFAULT_TICKET_SECRET,
) -> list[str]:
    function_env = {**env, "THREADS": str(spec.concurrency)}
    _check_env(function_env)
    command = [
        "gcloud",
        "functions",
        "deploy",
        spec.name,
        "--gen2",
        f"--project={project}",
        f"--region={region}",
        f"--runtime={runtime}",
        f"--source={source}",
        f"--entry-point={spec.entry_point}",
        *trigger_flags(
            spec,
            imports_bucket=imports_bucket,
            events_topic=events_topic,
            trigger_location=trigger_location,
        ),
        f"--memory={spec.memory}",
        f"--cpu={spec.cpu}",
        f"--concurrency={spec.concurrency}",
        f"--max-instances={spec.max_instances}",
        f"--timeout={spec.timeout}",
    ]
    if service_account:
        command.append(f"--run-service-account={service_account}")
    command.append(env_vars_flag(function_env))
    # Every function validates the settings at start-up, and outside demo- projects the
    # waiting-room ticket key is required: it comes from Secret Manager, never from the source.
    command.append(f"--set-secrets=CODEDROP_TICKET_SECRET={ticket_secret}:latest")
    return command


# --- command line -------------------------------------------------------------------------------


def _parse_env(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not ENV_KEY.match(key):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/deploy",
        description="Stage functions/main.py, shared/ and requirements.txt, then deploy each "
        "Cloud Function (gen2) defined in functions/main.py with gcloud.",
    )
    parser.add_argument("--project", help="Google Cloud project id (required unless --dry-run)")
    parser.add_argument("--region", default=DEFAULT_REGION, help="default: %(default)s")
    parser.add_argument("--runtime", choices=RUNTIMES, default=DEFAULT_RUNTIME)
    parser.add_argument(
        "--only",
        choices=FUNCTION_NAMES,
        metavar="NAME",
        help="deploy only this function: " + ", ".join(FUNCTION_NAMES),
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the gcloud commands instead of running them"
    )
    parser.add_argument(
        "--build-dir",
        type=Path,
        default=DEFAULT_BUILD_DIR,
        help="where to stage (<build-dir>/functions); default: build/",
    )
    parser.add_argument(
        "--imports-bucket",
        default=DEFAULT_IMPORTS_BUCKET,
        help="bucket that triggers import_codes; default: %(default)s",
    )
    parser.add_argument(
        "--imports-bucket-location",
        metavar="LOCATION",
        help="the bucket's location, when it differs from --region "
        "(Eventarc needs the trigger where the bucket is)",
    )
    parser.add_argument(
        "--events-topic",
        default=DEFAULT_EVENTS_TOPIC,
        help="topic that triggers count_usage; default: %(default)s",
    )
    parser.add_argument(
        "--cors-origins",
        default="",
        help="comma-separated landing-page origins allowed by claim_api",
    )
    parser.add_argument("--service-account", help="runtime service account of the functions")
    parser.add_argument(
        "--ticket-secret",
        default=DEFAULT_TICKET_SECRET,
        help="Secret Manager secret holding CODEDROP_TICKET_SECRET (at least 32 characters)",
    )
    parser.add_argument(
        "--env",
        action="append",
        type=_parse_env,
        default=[],
        metavar="KEY=VALUE",
        help="extra environment variable for every function (repeatable), "
        "e.g. CODEDROP_POOL_REFILL_SIZE=64",
    )
    return parser


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    project: str | None = args.project
    if project is None and not args.dry_run:
        parser.error("--project is required unless --dry-run")
    if project is not None:
        if project.startswith("demo-"):
            parser.error(
                f"--project {project}: demo- projects exist only on the emulators; "
                "deploy to a real project"
            )
        if not PROJECT_ID.match(project):
            parser.error(f"--project {project!r} is not a valid Google Cloud project id")
    for key, _ in args.env:
        if key.endswith("_EMULATOR_HOST"):
            parser.error(f"--env {key}: emulator switches are never deployed")
        if key in RESERVED_ENV:
            parser.error(f"--env {key}: reserved by Cloud Functions")
        if key in MANAGED_ENV:
            parser.error(f"--env {key}: set by this script (see its options)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _validate(parser, args)
    logging.basicConfig(level=logging.INFO, format="deploy: %(message)s", stream=sys.stderr)

    project: str = args.project or PLACEHOLDER_PROJECT
    if args.project is None:
        LOG.info("no --project: the commands below name %s", PLACEHOLDER_PROJECT)
    cors = [origin.strip() for origin in args.cors_origins.split(",") if origin.strip()]
    try:
        env = runtime_env(
            project=project,
            imports_bucket=args.imports_bucket,
            events_topic=args.events_topic,
            cors_origins=cors,
            extra=dict(args.env),
        )
        staged = stage(args.build_dir)
        specs = select_functions(defined_entry_points(staged / "main.py"), args.only)
        check_env = {**env, "GOOGLE_CLOUD_PROJECT": args.project or PREFLIGHT_DEMO_PROJECT}
        check_staged_import(staged, [spec.entry_point for spec in specs], check_env)
        commands = [
            build_command(
                spec,
                project=project,
                region=args.region,
                runtime=args.runtime,
                source=staged,
                env=env,
                imports_bucket=args.imports_bucket,
                events_topic=args.events_topic,
                service_account=args.service_account,
                ticket_secret=args.ticket_secret,
                trigger_location=args.imports_bucket_location,
            )
            for spec in specs
        ]
    except DeployError as exc:
        LOG.error("%s", exc)
        return 1

    if args.dry_run:
        for command in commands:
            sys.stdout.write(shlex.join(command) + "\n")
        return 0
    if shutil.which("gcloud") is None:
        LOG.error("gcloud is not on PATH; install the Google Cloud SDK")
        return 1
    for spec, command in zip(specs, commands, strict=True):
        LOG.info("deploying %s: %s", spec.name, shlex.join(command))
        returncode = subprocess.run(command, check=False).returncode
        if returncode != 0:
            LOG.error("deploying %s failed (gcloud exit %d); stopping", spec.name, returncode)
            return 1
    LOG.info("deployed %s", ", ".join(spec.name for spec in specs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
