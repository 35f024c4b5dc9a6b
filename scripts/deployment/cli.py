"""The command line of scripts/deploy: options, checks, then stage, check and deploy (or print)."""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from scripts.deployment import DeployError
from scripts.deployment.functions import (
    DEFAULT_EVENTS_TOPIC,
    FUNCTION_NAMES,
    FUNCTIONS,
    FunctionSpec,
    default_imports_bucket,
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
from scripts.deployment.hosting import HostingError, stage_pages
from scripts.deployment.monitoring import monitoring_steps
from scripts.deployment.plan import Step, print_plan, run_plan
from scripts.deployment.resources import (
    SUBSCRIPTIONS,
    Target,
    bucket_cors_file,
    bucket_cors_step,
    dead_letter_publisher_step,
    foundation,
    hosting_steps,
    identity_steps,
    invoker_steps,
    scheduler_steps,
    subscription_steps,
    write_bucket_cors,
)
from scripts.deployment.sale import MAX_QUOTA_WINDOW, MAX_SIGNUPS_PER_IP_HOUR, prepare_sale_steps
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


def _parse_time(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected an RFC 3339 time, got {text!r}") from exc
    if at.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} names no offset (add Z or +01:00)")
    return at.astimezone(UTC)


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
        help="bucket that triggers import_codes; default: "
        + default_imports_bucket("<project>")
        + " (bucket names are global)",
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
        "--alert-channels",
        type=lambda text: [c.strip() for c in text.split(",") if c.strip()],
        default=[],
        metavar="CHANNELS",
        help="comma-separated notification channels (projects/P/notificationChannels/ID) the "
        "alert policies notify; a re-run sets exactly these",
    )
    sale = parser.add_argument_group(
        "before a big sale (see docs/deploy.md)",
        "--prepare-sale CAMPAIGN raises the Auth sign-up quota for the sale's window, checks "
        "indexes are READY and claim_api's warm instances, and warms the campaign's new key "
        "ranges (500/50/5). It deploys nothing.",
    )
    sale.add_argument("--prepare-sale", metavar="CAMPAIGN", help="the campaign id")
    sale.add_argument(
        "--sale-starts",
        type=_parse_time,
        metavar="TIME",
        help="when the sale opens, RFC 3339 with its offset (2026-11-27T18:00:00Z)",
    )
    sale.add_argument(
        "--sale-hours", type=float, default=2.0, help="the sale's window; default: %(default)s"
    )
    sale.add_argument(
        "--signups-per-ip-hour",
        type=int,
        default=MAX_SIGNUPS_PER_IP_HOUR,
        help="new Auth accounts an hour per IP address during the sale; default: %(default)s",
    )
    sale.add_argument(
        "--sale-claims-per-second",
        type=int,
        default=500,
        help="the sale's expected peak, which the warm-up ramps to; default: %(default)s",
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
    if args.prepare_sale is not None:
        _validate_sale(parser, args)
    if args.imports_bucket is None:
        args.imports_bucket = default_imports_bucket(project or PLACEHOLDER_PROJECT)
    if project is not None:
        if project.startswith("demo-"):
            parser.error(
                f"--project {project}: demo- projects exist only on the emulators; "
                "deploy to a real project"
            )
        if not PROJECT_ID.match(project):
            parser.error(f"--project {project!r} is not a valid Google Cloud project id")
    _validate_env(parser, args)


def _validate_env(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for key, _ in args.env:
        if key.endswith("_EMULATOR_HOST"):
            parser.error(f"--env {key}: emulator switches are never deployed")
        if key in RESERVED_ENV:
            parser.error(f"--env {key}: reserved by Cloud Functions")
        if key in MANAGED_ENV:
            parser.error(f"--env {key}: set by this script (see its options)")


SIGN_IN_AHEAD = timedelta(hours=1)
CAMPAIGN_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")  # shared.types.CampaignId


def _validate_sale(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not CAMPAIGN_ID.match(args.prepare_sale):
        parser.error(f"--prepare-sale {args.prepare_sale!r} is not a campaign id")
    if args.sale_starts is None:
        parser.error("--prepare-sale needs --sale-starts")
    if not 1 <= args.signups_per_ip_hour <= MAX_SIGNUPS_PER_IP_HOUR:
        parser.error(f"--signups-per-ip-hour must be between 1 and {MAX_SIGNUPS_PER_IP_HOUR}")
    if not timedelta(0) < timedelta(hours=args.sale_hours) <= MAX_QUOTA_WINDOW - SIGN_IN_AHEAD:
        parser.error(f"--sale-hours must be above 0 and at most {MAX_QUOTA_WINDOW - SIGN_IN_AHEAD}")
    if not 1 <= args.sale_claims_per_second <= 100_000:
        parser.error("--sale-claims-per-second must be between 1 and 100000")


def sale_plan(args: argparse.Namespace, *, target: Target) -> list[Step]:
    claim_api = next(spec for spec in FUNCTIONS if spec.name == "claim_api")
    return prepare_sale_steps(
        target,
        campaign_id=args.prepare_sale,
        claim_api=claim_api,
        # Shoppers open the page, and sign in, before the sale opens.
        starts=args.sale_starts - SIGN_IN_AHEAD,
        window=SIGN_IN_AHEAD + timedelta(hours=args.sale_hours),
        signups_per_ip_hour=args.signups_per_ip_hour,
        min_instances=(
            claim_api.min_instances if args.sale_min_instances is None else args.sale_min_instances
        ),
        claims_per_second=args.sale_claims_per_second,
    )


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
                project_number=target.project_number,
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
        *foundation(target, indexes=REPO_ROOT / "firestore.indexes.json"),
        *identity_steps(target, specs),
        bucket_cors_step(target, bucket_cors_file(args.build_dir)),
        *functions,
        *invoker_steps(target, specs),
        *(
            step
            for sub in SUBSCRIPTIONS
            for step in subscription_steps(target, by_name[sub.function], sub)
        ),
        dead_letter_publisher_step(target),
        *scheduler_steps(target, by_name["sweep"]),
        *hosting_steps(
            target,
            claim_api=by_name["claim_api"],
            admin_api=by_name["admin_api"],
            root=args.build_dir.resolve() / "hosting",
        ),
        *monitoring_steps(target, root=REPO_ROOT, alert_channels=args.alert_channels),
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


def target_of(args: argparse.Namespace, *, project: str, project_number: str) -> Target:
    return Target(
        project=project,
        project_number=project_number,
        region=args.region,
        firestore_location=args.firestore_location or args.region,
        imports_bucket=args.imports_bucket,
        events_topic=args.events_topic,
        ticket_secret=args.ticket_secret,
    )


def _browser_origins(args: argparse.Namespace) -> list[str]:
    """The origins whose pages call the functions and upload to the bucket."""
    cors = [origin.strip() for origin in args.cors_origins.split(",") if origin.strip()]
    if args.project:
        # The pages Firebase Hosting serves (hosting_steps): the landing page and the console.
        cors += [f"https://{args.project}.web.app", f"https://{args.project}.firebaseapp.com"]
    return cors


def _function_env(args: argparse.Namespace, project: str) -> dict[str, str]:
    return runtime_env(
        project=project,
        imports_bucket=args.imports_bucket,
        events_topic=args.events_topic,
        cors_origins=_browser_origins(args),
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
    if args.prepare_sale is not None:
        target = target_of(args, project=project, project_number=PLACEHOLDER_PROJECT_NUMBER)
        steps = sale_plan(args, target=target)
        if args.dry_run:
            print_plan(steps)
            return 0
        return run_plan(steps)
    try:
        env = _function_env(args, project)
        staged = stage(args.build_dir)
        if not args.only:
            stage_pages(args.build_dir)
            write_bucket_cors(args.build_dir, _browser_origins(args))
        specs = select_functions(entry_points.declared(staged / "main.py"), args.only)
        python = runtime_python(args.build_dir, staged / "requirements.txt")
        check_env = {**env, "GOOGLE_CLOUD_PROJECT": args.project or PREFLIGHT_DEMO_PROJECT}
        check_staged_import(staged, [spec.entry_point for spec in specs], check_env, python=python)
        target = target_of(args, project=project, project_number=_project_number(args))
        steps = build_plan(args, target=target, env=env, specs=specs, staged=staged)
    except (DeployError, HostingError) as exc:
        LOG.error("%s", exc)
        return 1

    if args.dry_run:
        print_plan(steps)
        return 0
    return run_plan(steps)
