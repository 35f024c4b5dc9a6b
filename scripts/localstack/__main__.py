"""Run codedrop locally: the emulators plus every function in functions/main.py, until stopped.

Starts the Firestore, Pub/Sub and Storage emulators (devkit/emulators/), creates the Pub/Sub
topics and
subscriptions the functions need, starts each function that functions/main.py defines under
functions-framework, prints the URLs and then `codedrop local stack ready`. Ctrl-C, SIGTERM or
SIGHUP stop everything it started (functions first, then emulators, each by process group); so
does any child that dies, after which it exits non-zero with that child's name and log tail.

Uploads: the Storage emulator sends no notifications, so while import_codes runs a watcher
(devkit/standins/storage_notifier.py) polls the imports bucket and POSTs the object-finalized
CloudEvent of every new object generation to import_codes, as Eventarc does in the cloud: a CSV
dropped at imports/{campaign_id}/NAME.csv with any client is imported (./scripts/upload_codes
does it and follows the job). Objects already in the bucket when the stack starts are not
announced.

The Firebase Auth emulator (firebase-tools, installed by npm) runs beside the others, and
FIREBASE_AUTH_EMULATOR_HOST points the functions at it: ID tokens of its users are accepted.
Firebase has no App Check emulator: a development key set (devkit/standins/app_check.py) serves its
JWKS and tokens on the app-check port, and CODEDROP_APP_CHECK_JWKS_URL points the functions at
it, so campaigns with require_app_check work locally.

--demo   also creates the demo users in the Auth emulator (an admin and a shopper, email and
         password), campaign `demo` through admin_api with 100 codes, serves the example landing
         page (web/example) at http://127.0.0.1:3000/?campaign=demo and the console
         (web/console) at http://127.0.0.1:3000/console/, and prints how to sign in and a curl
         command that claims a code.
--check  starts everything, runs the demo, one claim over HTTP (expects 201) and fetches the
         landing page and the console, then stops.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from devkit.emulators import EmulatorFailed, EmulatorUnavailable
from devkit.emulators.processes import StopRequestedError, stop_signals_raise
from scripts.localstack.config import (
    DEFAULT_BUCKET,
    DEFAULT_LOG_DIR,
    DEFAULT_PROJECT,
    DEFAULT_TOPIC,
    PORTS,
    READY_LINE,
    REPO,
    Config,
    env_int,
    environment_table,
    page_origins,
)
from scripts.localstack.demo import announce_demo, announce_page, run_check, run_demo
from scripts.localstack.errors import StackError
from scripts.localstack.output import configure_logging, log_to_file, say
from scripts.localstack.stack import LocalStack

log = logging.getLogger("local_stack")


def _parser() -> argparse.ArgumentParser:
    rows = "\n".join(f"  {v.name:<32} {v.default:<24} {v.what}" for v in environment_table())
    parser = argparse.ArgumentParser(
        prog="scripts/run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"environment (a flag wins over its variable):\n{rows}",
    )
    for port in PORTS:
        parser.add_argument(
            f"--{port.key}-port",
            type=int,
            default=None,
            metavar="PORT",
            help=f"{port.what} (default ${port.env} or {port.default})",
        )
    parser.add_argument(
        "--project",
        default=DEFAULT_PROJECT,
        help="project id; must start with demo- (default %(default)s)",
    )
    parser.add_argument(
        "--log-dir", type=Path, default=None, help=f"default $CODEDROP_LOG_DIR or {DEFAULT_LOG_DIR}"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds each emulator and function gets to answer (default %(default)s)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--demo", action="store_true", help="create a demo campaign with codes")
    mode.add_argument("--check", action="store_true", help="start, demo, claim once, stop")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="diagnostics on stderr (-vv: debug)"
    )
    return parser


def _parse(argv: list[str] | None) -> Config:
    parser = _parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)

    if not args.project.startswith("demo-"):
        parser.error("--project must start with demo- so that no real resource is touched")
    ports: dict[str, int] = {}
    for port in PORTS:
        flag: int | None = getattr(args, f"{port.key.replace('-', '_')}_port")
        ports[port.key] = flag if flag is not None else env_int(port.env, port.default)
    taken: dict[int, str] = {}
    for key, number in ports.items():
        if not 0 < number < 65536:
            parser.error(f"{key} port {number} is out of range")
        if number in taken:
            parser.error(f"{key} and {taken[number]} would both use port {number}")
        taken[number] = key
    log_dir: Path = args.log_dir or Path(os.environ.get("CODEDROP_LOG_DIR") or DEFAULT_LOG_DIR)
    if not log_dir.is_absolute():
        log_dir = REPO / log_dir
    return Config(
        project=args.project,
        ports=ports,
        log_dir=log_dir,
        bucket=os.environ.get("CODEDROP_IMPORTS_BUCKET") or DEFAULT_BUCKET,
        topic=os.environ.get("CODEDROP_EVENTS_TOPIC") or DEFAULT_TOPIC,
        cors_origins=os.environ.get("CODEDROP_CORS_ORIGINS") or page_origins(ports["web"]),
        timeout=args.timeout,
        demo=args.demo or args.check,
        check=args.check,
    )


def main(argv: list[str] | None = None) -> int:
    config = _parse(argv)
    log_to_file(config.log_dir / "local_stack.log")
    stack = LocalStack(config)
    try:
        with stop_signals_raise():
            say(f"starting the emulators and functions (logs in {config.log_dir}) …")
            stack.start()
            stack.describe()
            say(READY_LINE)
            if config.demo:
                demo = run_demo(config)
                page = stack.serve_pages(demo.campaign_id)
                if config.check:
                    run_check(config, demo)
                    return 0
                announce_demo(config)
                announce_page(page, config, stack.app_check_token_url)
            say("Ctrl-C stops everything")
            stack.supervise()
            return 1  # supervise() only returns by raising
    except StopRequestedError as stop:
        say(f"{stop} received, stopping")
        return 0
    except (EmulatorUnavailable, EmulatorFailed, StackError) as exc:
        log.debug("stack failed", exc_info=True)
        sys.stderr.write(f"local_stack: {exc}\n")
        return 1
    finally:
        stack.stop()
        say("stopped")


if __name__ == "__main__":
    sys.exit(main())
