"""`python -m devkit.emulators start|check`: run the local emulators in the foreground, or
check them."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from devkit.emulators.manager import (
    EmulatorFailed,
    EmulatorStack,
    EmulatorUnavailable,
    check_auth_prerequisites,
    check_prerequisites,
)
from devkit.emulators.processes import StopRequestedError, stop_signals_raise

log = logging.getLogger("emulator")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devkit.emulators", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="run all emulators until Ctrl-C or SIGTERM")
    start.add_argument("--firestore-port", type=int, default=8080)
    start.add_argument("--pubsub-port", type=int, default=8085)
    start.add_argument("--storage-port", type=int, default=9199)
    start.add_argument(
        "--auth", action="store_true", help="also start the Firebase Auth emulator (Node.js)"
    )
    start.add_argument("--auth-port", type=int, default=9099)
    start.add_argument("--project", default="demo-codedrop")
    start.add_argument("--bucket", default="codedrop-imports")
    start.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="where the emulators' logs go (default: a temporary folder)",
    )
    start.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait for the emulators to become ready",
    )
    commands.add_parser(
        "check",
        help="check Java, the Cloud SDK emulators, gcp-storage-emulator, Node.js, firebase-tools",
    )
    return parser.parse_args(argv)


def _run(args: argparse.Namespace) -> int:
    stack = EmulatorStack(
        firestore_port=args.firestore_port,
        pubsub_port=args.pubsub_port,
        storage_port=args.storage_port,
        auth=args.auth,
        auth_port=args.auth_port,
        project=args.project,
        bucket=args.bucket,
        log_dir=args.log_dir,
        timeout=args.timeout,
    )
    failed = False
    try:
        with stop_signals_raise():
            stack.start()
            for name, value in stack.env().items():
                sys.stdout.write(f"export {name}={value}\n")
            sys.stdout.flush()
            log.info("emulators running (logs in %s); Ctrl-C to stop", stack.log_dir)
            while True:
                for emulator in stack.emulators():
                    if emulator.process.poll() is not None:
                        log.error(
                            "%s emulator exited unexpectedly; see %s",
                            emulator.name,
                            emulator.log_path,
                        )
                        failed = True
                        return 1
                time.sleep(0.5)
    except StopRequestedError as stop:
        log.info("%s received, stopping the emulators", stop)
        return 0
    except (EmulatorUnavailable, EmulatorFailed) as exc:
        failed = True
        log.error("%s", exc)
        return 1
    finally:
        stack.stop(keep_logs=failed)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parse(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "check":
        try:
            check_prerequisites()
            check_auth_prerequisites()
        except EmulatorUnavailable as exc:
            sys.stderr.write(f"{exc}\n")
            return 1
        sys.stdout.write("emulator prerequisites OK\n")
        return 0
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
