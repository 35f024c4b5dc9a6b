"""The command line of scripts/deploy: options, checks, then stage, check and deploy (or print)."""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from scripts.deployment import DeployError
from scripts.deployment.functions import (
    DEFAULT_EVENTS_TOPIC,
    DEFAULT_IMPORTS_BUCKET,
    FUNCTION_NAMES,
    FunctionSpec,
    select_functions,
)
from scripts.deployment.gcloud import (
    DEFAULT_TICKET_SECRET,
    ENV_KEY,
    MANAGED_ENV,
    RESERVED_ENV,
    build_command,
    runtime_env,
)
from scripts.deployment.plan import Step, print_plan, run_plan
from scripts.deployment.resources import (
    SUBSCRIPTIONS,
    Target,
    dead_letter_publisher_step,
    foundation,
    identity_steps,
    invoker_steps,
    scheduler_steps,
    subscription_steps,
)
from scripts.deployment.staging import (
    DEFAULT_BUILD_DIR,
    REPO_ROOT,
    check_staged_import,
    runtime_python,
    stage,
)
from shared.http import entry_points

LOG = logging.getLogger("codedrop.deploy")

DEFAULT_REGION = "europe-west1"
RUNTIMES = ("python311", "python312")
DEFAULT_RUNTIME = "python311"  # what the project's venv and pyproject target

# Shown in --dry-run commands when no --project is given; the import check then uses a demo id.
PLACEHOLDER_PROJECT = "PROJECT_ID"
PLACEHOLDER_PROJECT_NUMBER = "PROJECT_NUMBER"
PREFLIGHT_DEMO_PROJECT = "demo-deploy-dry-run"

# Google Cloud project ids: 6-30 characters, lowercase letters, digits and hyphens, starting
# with a letter and not ending with a hyphen (shared.settings accepts a superset of these).
PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")


def _parse_env(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not ENV_KEY.match(key):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/deploy",
        description="Stage functions/main.py, shared/ and requirements.txt (the runtime set "
        "locked in uv.lock), then deploy each "
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
        help="where to stage (<build-dir>/functions) and keep the environment the staged "
        "import is checked in (<build-dir>/runtime-env); default: build/",
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
    parser.add_argument(
        "--project-number",
        help="the project's number (names Google's service agents); looked up with gcloud "
        "when deploying, a placeholder in a dry run",
    )
    parser.add_argument(
        "--firestore-location",
        help="where the Firestore database is created when the project has none; default: --region",
    )
    parser.add_argument(
        "--sale-min-instances",
        type=int,
        metavar="N",
        help="claim_api instances kept warm (default 1); raise before a big sale",
    )
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
    if args.project_number is not None and not str(args.project_number).isdigit():
        parser.error("--project-number is the project's number: digits only")
    if args.sale_min_instances is not None and not 0 <= args.sale_min_instances <= 100:
        parser.error("--sale-min-instances must be between 0 and 100")
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


def build_plan(
    args: argparse.Namespace,
    *,
    target: Target,
    env: Mapping[str, str],
    specs: Sequence[FunctionSpec],
    staged: Path,
) -> list[Step]:
    """Every command of this deploy, in the order they run. With --only, just that function."""
    functions = [
        Step(
            f"function {spec.name}",
            build_command(
                spec,
                project=target.project,
                region=args.region,
                runtime=args.runtime,
                source=staged,
                env=env,
                imports_bucket=args.imports_bucket,
                min_instances=args.sale_min_instances if spec.name == "claim_api" else None,
                ticket_secret=args.ticket_secret,
                trigger_location=args.imports_bucket_location,
            ),
        )
        for spec in specs
    ]
    if args.only:
        return functions
    by_name = {spec.name: spec for spec in specs}
    return [
        *foundation(
            target,
            indexes=REPO_ROOT / "firestore.indexes.json",
            rules=REPO_ROOT / "firestore.rules",
        ),
        *identity_steps(target, specs),
        *functions,
        *invoker_steps(target, specs),
        *(
            step
            for sub in SUBSCRIPTIONS
            for step in subscription_steps(target, by_name[sub.function], sub)
        ),
        dead_letter_publisher_step(target),
        *scheduler_steps(target, by_name["sweep"]),
    ]


def _project_number(args: argparse.Namespace) -> str:
    if args.project_number:
        return str(args.project_number)
    if args.dry_run:
        return PLACEHOLDER_PROJECT_NUMBER
    result = subprocess.run(
        ["gcloud", "projects", "describe", args.project, "--format=value(projectNumber)"],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    number = result.stdout.strip()
    if result.returncode != 0 or not number.isdigit():
        raise DeployError(
            f"could not look up the number of project {args.project}: {result.stderr.strip()}"
        )
    return number


def _function_env(args: argparse.Namespace, project: str) -> dict[str, str]:
    cors = [origin.strip() for origin in args.cors_origins.split(",") if origin.strip()]
    return runtime_env(
        project=project,
        imports_bucket=args.imports_bucket,
        events_topic=args.events_topic,
        cors_origins=cors,
        extra=dict(args.env),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _validate(parser, args)
    logging.basicConfig(level=logging.INFO, format="deploy: %(message)s", stream=sys.stderr)

    project: str = args.project or PLACEHOLDER_PROJECT
    if args.project is None:
        LOG.info("no --project: the commands below name %s", PLACEHOLDER_PROJECT)
    try:
        env = _function_env(args, project)
        staged = stage(args.build_dir)
        specs = select_functions(entry_points.declared(staged / "main.py"), args.only)
        python = runtime_python(args.build_dir, staged / "requirements.txt")
        check_env = {**env, "GOOGLE_CLOUD_PROJECT": args.project or PREFLIGHT_DEMO_PROJECT}
        check_staged_import(staged, [spec.entry_point for spec in specs], check_env, python=python)
        target = Target(
            project=project,
            project_number=_project_number(args),
            region=args.region,
            firestore_location=args.firestore_location or args.region,
            imports_bucket=args.imports_bucket,
            events_topic=args.events_topic,
            ticket_secret=args.ticket_secret,
        )
        steps = build_plan(args, target=target, env=env, specs=specs, staged=staged)
    except DeployError as exc:
        LOG.error("%s", exc)
        return 1

    if args.dry_run:
        print_plan(steps)
        return 0
    return run_plan(steps)
