#!/usr/bin/env python3
"""Run codedrop locally: the emulators plus every function in functions/main.py, until stopped.

Starts the Firestore, Pub/Sub and Storage emulators (emulator/), creates the Pub/Sub topics and
subscriptions the functions need, starts each function that functions/main.py defines under
functions-framework, prints the URLs and then `codedrop local stack ready`. Ctrl-C, SIGTERM or
SIGHUP stop everything it started (functions first, then emulators, each by process group); so
does any child that dies, after which it exits non-zero with that child's name and log tail.

Uploads: the Storage emulator sends no notifications, so while import_codes runs a watcher
(scripts/storage_notifier.py) polls the imports bucket and POSTs the object-finalized CloudEvent
of every new object generation to import_codes, as Eventarc does in the cloud: a CSV dropped at
imports/{campaign_id}/NAME.csv with any client is imported (./scripts/upload_codes does it and
follows the job). Objects already in the bucket when the stack starts are not announced.

--demo   also creates campaign `demo` through admin_api, writes 100 codes and prints a curl
         command that claims one.
--check  starts everything, runs the demo and one claim over HTTP, expects 201, then stops.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

REPO = Path(__file__).resolve().parents[1]
# Run as `python scripts/local_stack.py`: the project's packages live at the repository root.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from emulator import (  # noqa: E402
    EmulatorFailed,
    EmulatorStack,
    EmulatorUnavailable,
)
from emulator.tokens import emulator_id_token  # noqa: E402

log = logging.getLogger("local_stack")

HOST = "127.0.0.1"
MAIN_PY = REPO / "functions" / "main.py"
READY_LINE = "codedrop local stack ready"

DEFAULT_PROJECT = "demo-codedrop"
DEFAULT_CORS_ORIGINS = "http://localhost:3000,http://127.0.0.1:3000"
# Nothing listens there: the variable only makes firebase-admin accept the Auth emulator's
# unsigned ID tokens (allowed by shared/settings.py for demo- projects only).
AUTH_EMULATOR_SWITCH = "127.0.0.1:9099"

DEMO_CAMPAIGN = "demo"
DEMO_CODES = 100
DEMO_ADMIN = "demo-admin"
DEMO_SHOPPER = "demo-shopper-1"

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
FUNCTION_STOP_TIMEOUT = 10.0
SUPERVISE_INTERVAL = 0.5
LOG_TAIL_LINES = 30


# --- configuration: every port and variable, in one table -------------------------------------


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
    Port("claim-api", "CODEDROP_CLAIM_API_PORT", 8001, "claim_api"),
    Port("admin-api", "CODEDROP_ADMIN_API_PORT", 8002, "admin_api"),
    Port("count-usage", "CODEDROP_COUNT_USAGE_PORT", 8003, "count_usage"),
    Port("import-codes", "CODEDROP_IMPORT_CODES_PORT", 8004, "import_codes"),
)


@dataclass(frozen=True, slots=True)
class Function:
    """An entry point of functions/main.py and how the local stack serves it."""

    name: str
    signature_type: str  # functions-framework --signature-type
    workers: int  # gunicorn processes (functions-framework reads WORKERS)
    threads: int  # threads per process (THREADS)

    @property
    def port_key(self) -> str:
        return self.name.replace("_", "-")

    @property
    def workers_env(self) -> str:
        return f"CODEDROP_{self.name.upper()}_WORKERS"

    @property
    def threads_env(self) -> str:
        return f"CODEDROP_{self.name.upper()}_THREADS"


# Started only if functions/main.py defines them, so later entry points come up by themselves.
# claim_api takes the flash-sale burst: two processes keep claims flowing while one collects
# garbage, and its claims wait mostly on Firestore, hence many threads.
FUNCTIONS: tuple[Function, ...] = (
    Function("claim_api", "http", workers=2, threads=8),
    Function("admin_api", "http", workers=1, threads=8),
    Function("count_usage", "cloudevent", workers=1, threads=8),
    Function("import_codes", "cloudevent", workers=1, threads=4),
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
        EnvVar("CODEDROP_LOG_DIR", ".local/logs", "where each process's log goes"),
        EnvVar(
            "CODEDROP_CORS_ORIGINS", DEFAULT_CORS_ORIGINS, "landing-page origins claim_api allows"
        ),
        EnvVar("CODEDROP_IMPORTS_BUCKET", "codedrop-imports", "the imports bucket"),
        EnvVar("CODEDROP_EVENTS_TOPIC", "coupon-events", "the events topic"),
    )
    return ports + tuning + other


def _env_int(name: str, default: int) -> int:
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


def _parse(argv: list[str] | None) -> Config:
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
        "--log-dir", type=Path, default=None, help="default $CODEDROP_LOG_DIR or .local/logs"
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
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)

    if not args.project.startswith("demo-"):
        parser.error("--project must start with demo- so that no real resource is touched")
    ports: dict[str, int] = {}
    for port in PORTS:
        flag: int | None = getattr(args, f"{port.key.replace('-', '_')}_port")
        ports[port.key] = flag if flag is not None else _env_int(port.env, port.default)
    taken: dict[int, str] = {}
    for key, number in ports.items():
        if not 0 < number < 65536:
            parser.error(f"{key} port {number} is out of range")
        if number in taken:
            parser.error(f"{key} and {taken[number]} would both use port {number}")
        taken[number] = key
    log_dir: Path = args.log_dir or Path(os.environ.get("CODEDROP_LOG_DIR") or ".local/logs")
    if not log_dir.is_absolute():
        log_dir = REPO / log_dir
    return Config(
        project=args.project,
        ports=ports,
        log_dir=log_dir,
        bucket=os.environ.get("CODEDROP_IMPORTS_BUCKET") or "codedrop-imports",
        topic=os.environ.get("CODEDROP_EVENTS_TOPIC") or "coupon-events",
        cors_origins=os.environ.get("CODEDROP_CORS_ORIGINS") or DEFAULT_CORS_ORIGINS,
        timeout=args.timeout,
        demo=args.demo or args.check,
        check=args.check,
    )


# --- logging: key=value diagnostics on stderr and in the log folder ---------------------------

_STANDARD_ATTRS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class LogfmtFormatter(logging.Formatter):
    """`time=… level=… logger=… msg="…"` plus every field passed with `extra=`."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        pairs: list[tuple[str, object]] = [
            ("time", stamp),
            ("level", record.levelname),
            ("logger", record.name),
            ("msg", record.getMessage()),
        ]
        pairs += [
            (key, value)
            for key, value in vars(record).items()
            if key not in _STANDARD_ATTRS and not key.startswith("_")
        ]
        text = " ".join(f"{key}={_logfmt_value(value)}" for key, value in pairs)
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def _logfmt_value(value: object) -> str:
    text = str(value)
    if text and not any(c in text for c in ' "=\n'):
        return text
    return json.dumps(text)


def _configure_logging(verbosity: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    levels = {0: logging.WARNING, 1: logging.INFO}
    handler.setLevel(levels.get(verbosity, logging.DEBUG))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.DEBUG)
    # The client libraries are chatty at DEBUG; their warnings still show.
    for noisy in ("google", "urllib3", "grpc"):
        logging.getLogger(noisy).setLevel(logging.INFO)


def _log_to_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(LogfmtFormatter())
    handler.setLevel(logging.DEBUG)
    logging.getLogger().addHandler(handler)


def say(line: str = "") -> None:
    """A line for the user, on stdout."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# --- errors and signals -----------------------------------------------------------------------


class StopRequestedError(Exception):
    """Raised from the signal handler so that cleanup runs however far start-up got."""


class StackError(RuntimeError):
    """The stack could not start or stopped working; the message says what to look at."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise StopRequestedError(signal.Signals(signum).name)


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


def _check_ports_free(config: Config, keys: Iterable[str]) -> None:
    """Fail before starting anything if a port we need is taken: whatever holds it would answer
    our readiness probes, and a half-started stack is slower to report than a clear message."""
    busy: list[str] = []
    wanted = set(keys)
    for port in PORTS:
        if port.key not in wanted:
            continue
        number = config.ports[port.key]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((HOST, number))
            except OSError as exc:
                busy.append(f"{port.what} port {number} ({exc.strerror}; set {port.env})")
    if busy:
        raise StackError("ports already in use, is another local stack running? " + "; ".join(busy))


# --- HTTP (no proxies: a corporate HTTP_PROXY must never see localhost traffic) --------------

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_json(
    method: str,
    url: str,
    *,
    body: object | None = None,
    token: str | None = None,
    timeout: float = 30,
) -> tuple[int, Any]:
    """Send a request; return the status and the decoded JSON body (None if not JSON)."""
    if not url.startswith("http://"):
        raise ValueError(f"not a local URL: {url}")
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(  # noqa: S310 (http:// checked above)
        url, data=data, method=method, headers=headers
    )
    try:
        with _opener.open(request, timeout=timeout) as response:
            status: int = response.status
            raw: bytes = response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, None


def _answers_http(port: int) -> bool:
    try:
        http_json("GET", f"http://{HOST}:{port}/", timeout=2)
    except OSError:
        return False
    return True  # any status: the server is up


# --- functions --------------------------------------------------------------------------------


def defined_functions(main_py: Path = MAIN_PY) -> list[Function]:
    """The known entry points that main_py defines at top level (read with ast, not imported)."""
    try:
        tree = ast.parse(main_py.read_text(), filename=str(main_py))
    except (OSError, SyntaxError) as exc:
        raise StackError(f"cannot read the entry points of {main_py}: {exc}") from exc
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    known = {f.name for f in FUNCTIONS}
    for node in tree.body:
        if (
            isinstance(node, ast.FunctionDef)
            and node.decorator_list
            and node.name not in known
            and any("functions_framework" in ast.unparse(d) for d in node.decorator_list)
        ):
            log.warning(
                "entry point has no port in the local stack; not started",
                extra={"function": node.name},
            )
    return [f for f in FUNCTIONS if f.name in names]


def _group_running(pgid: int) -> bool:
    """Whether the process group has a member that is not a zombie."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").is_file():  # no procfs (macOS): zombies count as running
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


@dataclass(eq=False)
class FunctionProcess:
    """A functions-framework server in its own process group (gunicorn master and workers)."""

    function: Function
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    _signalled: bool = field(default=False, init=False)

    @property
    def name(self) -> str:
        return self.function.name

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def terminate(self) -> None:
        """Ask the whole group to stop (gunicorn's workers get it too)."""
        if not self._signalled:
            self._signalled = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)

    def wait_stopped(self, timeout: float) -> None:
        """After terminate(): wait for the group to go, then kill what is left."""
        pgid = self.process.pid
        deadline = time.monotonic() + timeout
        while self.process.poll() is None or _group_running(pgid):
            if time.monotonic() >= deadline:
                log.warning("did not stop in time; killing it", extra={"function": self.name})
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
                self.process.wait(timeout=5)
                break
            time.sleep(0.05)
        log.info(
            "function stopped",
            extra={"function": self.name, "exit_code": self.process.returncode},
        )


def _function_env(base: Mapping[str, str]) -> dict[str, str]:
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {
        **os.environ,
        **base,
        "PYTHONPATH": pythonpath,
        "PYTHONUNBUFFERED": "1",
        "GUNICORN_LOG_LEVEL": os.environ.get("GUNICORN_LOG_LEVEL", "info"),
    }


def start_function(
    function: Function, *, port: int, env: Mapping[str, str], log_dir: Path, run_dir: Path
) -> FunctionProcess:
    executable = Path(sys.executable).parent / "functions-framework"
    if not executable.is_file():
        raise StackError(
            f"{executable} is missing; install the requirements "
            "(`pip install -r requirements-dev.txt`, or run ./scripts/run which does it)"
        )
    command = [
        str(executable),
        "--target",
        function.name,
        "--source",
        str(MAIN_PY),
        "--port",
        str(port),
        "--host",
        HOST,
    ]
    if function.signature_type != "http":
        command += ["--signature-type", function.signature_type]
    workers = _env_int(function.workers_env, function.workers)
    threads = _env_int(function.threads_env, function.threads)
    log_path = log_dir / f"{function.name}.log"
    runtime_dir = run_dir / function.name
    runtime_dir.mkdir(mode=0o700)
    log.info(
        "starting function",
        extra={
            "function": function.name,
            "port": port,
            "workers": workers,
            "threads": threads,
            "log": log_path,
        },
    )
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={
                **env,
                "WORKERS": str(workers),
                "THREADS": str(threads),
                # gunicorn >= 25 opens a control socket at $XDG_RUNTIME_DIR/gunicorn.ctl, else
                # at ~/.gunicorn/gunicorn.ctl: one path for every server of the user, which the
                # servers would take from each other. One folder per server keeps them apart.
                "XDG_RUNTIME_DIR": str(runtime_dir),
            },
            start_new_session=True,
        )
    return FunctionProcess(function=function, port=port, process=process, log_path=log_path)


def wait_function_ready(running: FunctionProcess, deadline: float) -> None:
    while not _answers_http(running.port):
        code = running.process.poll()
        if code is not None:
            raise StackError(
                f"{running.name} exited with code {code} before it answered; last lines of "
                f"{running.log_path}:\n{_tail(running.log_path)}"
            )
        if time.monotonic() >= deadline:
            raise StackError(
                f"{running.name} did not answer on {running.url} in time; last lines of "
                f"{running.log_path}:\n{_tail(running.log_path)}"
            )
        time.sleep(0.1)


# --- watchers: the hook for helpers that run beside the functions -----------------------------


@dataclass(frozen=True, slots=True)
class StackInfo:
    """What a watcher may need to know about the running stack."""

    project: str
    bucket: str
    topic: str
    env: Mapping[str, str]  # emulator hosts and the functions' settings
    function_urls: Mapping[str, str]  # by function name, only those running
    log_dir: Path


class Watcher(Protocol):
    """Something that runs beside the functions: started once they all answer, stopped first."""

    name: str

    def start(self) -> None: ...

    def failure(self) -> str | None:
        """Why it no longer works (the stack then stops), or None while it is healthy."""
        ...

    def stop(self) -> None: ...


def storage_notifier(info: StackInfo) -> Watcher | None:
    """The Storage emulator sends no object-finalized notifications: poll the imports bucket and
    deliver those CloudEvents to import_codes (None when import_codes is not running)."""
    url = info.function_urls.get("import_codes")
    if url is None:
        return None
    from scripts.storage_notifier import StorageNotifier, emulator_client

    client = emulator_client(info.env["STORAGE_EMULATOR_HOST"], project=info.project)
    return StorageNotifier(client=client, bucket=info.bucket, target_url=f"{url}/")


# Factories of the helpers that run beside the functions, in start order.
WATCHERS: list[Callable[[StackInfo], Watcher | None]] = [storage_notifier]


# --- Pub/Sub and Storage resources ------------------------------------------------------------


def create_pubsub_resources(config: Config, *, count_usage_url: str | None) -> list[str]:
    """The events topic and, once count_usage exists, its push subscription with retries and a
    dead-letter topic (with a pull subscription to inspect dead letters). Returns their names."""
    from google.api_core import exceptions as api_exceptions
    from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient
    from google.protobuf import duration_pb2

    created: list[str] = []
    publisher = PublisherClient()
    with SubscriberClient() as subscriber:

        def topic(name: str) -> str:
            path: str = publisher.topic_path(config.project, name)
            try:
                publisher.create_topic(name=path)
            except api_exceptions.AlreadyExists:
                log.info("topic exists", extra={"topic": path})
            created.append(f"topic {name}")
            return path

        def subscription(name: str, request: dict[str, Any]) -> None:
            path: str = subscriber.subscription_path(config.project, name)
            try:
                subscriber.create_subscription(request={"name": path, **request})
            except api_exceptions.AlreadyExists:
                log.info("subscription exists", extra={"subscription": path})
            created.append(f"subscription {name}")

        events = topic(config.topic)
        if count_usage_url is None:
            log.info("count_usage is not defined yet: no push subscription")
            return created
        dead_letters = topic(config.dead_letter_topic)
        subscription(
            "count-usage-push",
            {
                "topic": events,
                "push_config": {"push_endpoint": f"{count_usage_url}/"},
                "retry_policy": {
                    "minimum_backoff": duration_pb2.Duration(seconds=1),
                    "maximum_backoff": duration_pb2.Duration(seconds=60),
                },
                "dead_letter_policy": {
                    "dead_letter_topic": dead_letters,
                    "max_delivery_attempts": 5,
                },
            },
        )
        subscription(f"{config.dead_letter_topic}-pull", {"topic": dead_letters})
    return created


def verify_bucket(config: Config) -> None:
    from google.cloud.storage import Client

    client = Client(project=config.project)
    if client.lookup_bucket(config.bucket) is None:
        raise StackError(
            f"bucket {config.bucket} is missing from the Storage emulator (it should be its "
            "default bucket)"
        )


# --- the stack --------------------------------------------------------------------------------


class LocalStack:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.emulators = EmulatorStack(
            host=HOST,
            firestore_port=config.ports["firestore"],
            pubsub_port=config.ports["pubsub"],
            storage_port=config.ports["storage"],
            project=config.project,
            bucket=config.bucket,
            log_dir=config.log_dir,
            timeout=config.timeout,
        )
        self.env: dict[str, str] = {}
        self.run_dir: Path | None = None  # the functions' runtime folders, removed at stop
        self.functions: list[FunctionProcess] = []
        self.watchers: list[Watcher] = []
        self.resources: list[str] = []
        self.timings: dict[str, float] = {}

    def url(self, function: str) -> str:
        return f"http://{HOST}:{self.config.ports[function.replace('_', '-')]}"

    def start(self) -> None:
        config = self.config
        started = time.monotonic()
        functions = defined_functions()
        _check_ports_free(
            config, ["firestore", "pubsub", "storage", *(f.port_key for f in functions)]
        )

        self.emulators.start()
        self.timings["emulators"] = time.monotonic() - started
        self.env = {
            **self.emulators.env(),
            "GOOGLE_CLOUD_PROJECT": config.project,
            "FIREBASE_AUTH_EMULATOR_HOST": AUTH_EMULATOR_SWITCH,
            "CODEDROP_CORS_ORIGINS": config.cors_origins,
            "CODEDROP_IMPORTS_BUCKET": config.bucket,
            "CODEDROP_EVENTS_TOPIC": config.topic,
        }
        # The client libraries here (resources, --demo) read the same variables.
        os.environ.update(self.env)
        log.info("emulators ready", extra={"seconds": round(self.timings["emulators"], 2)})

        mark = time.monotonic()
        names = {f.name for f in functions}
        count_usage_url = self.url("count_usage") if "count_usage" in names else None
        self.resources = create_pubsub_resources(config, count_usage_url=count_usage_url)
        verify_bucket(config)
        self.timings["resources"] = time.monotonic() - mark

        mark = time.monotonic()
        env = _function_env(self.env)
        self.run_dir = Path(tempfile.mkdtemp(prefix="codedrop-run-"))
        for function in functions:
            self.functions.append(
                start_function(
                    function,
                    port=config.ports[function.port_key],
                    env=env,
                    log_dir=config.log_dir,
                    run_dir=self.run_dir,
                )
            )
        deadline = time.monotonic() + config.timeout
        for running in self.functions:
            wait_function_ready(running, deadline)
            log.info(
                "function ready",
                extra={"function": running.name, "url": running.url},
            )
        self.timings["functions"] = time.monotonic() - mark

        info = StackInfo(
            project=config.project,
            bucket=config.bucket,
            topic=config.topic,
            env=dict(self.env),
            function_urls={r.name: r.url for r in self.functions},
            log_dir=config.log_dir,
        )
        for factory in WATCHERS:
            watcher = factory(info)
            if watcher is not None:
                try:
                    watcher.start()
                except Exception as exc:
                    raise StackError(f"watcher {watcher.name} did not start: {exc}") from exc
                self.watchers.append(watcher)
                log.info("watcher started", extra={"watcher": watcher.name})
        self.timings["total"] = time.monotonic() - started

    def _processes(self) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
        for emulator in (self.emulators.firestore, self.emulators.pubsub, self.emulators.storage):
            if emulator is not None:
                yield f"{emulator.name} emulator", emulator.process, emulator.log_path
        for running in self.functions:
            yield running.name, running.process, running.log_path

    def supervise(self) -> None:
        """Block until a child dies or a watcher fails (raises StackError); signals interrupt."""
        while True:
            for name, process, log_path in self._processes():
                code = process.poll()
                if code is not None:
                    raise StackError(
                        f"{name} exited unexpectedly with code {code}; last lines of "
                        f"{log_path}:\n{_tail(log_path)}"
                    )
            for watcher in self.watchers:
                reason = watcher.failure()
                if reason is not None:
                    raise StackError(f"watcher {watcher.name} failed: {reason}")
            time.sleep(SUPERVISE_INTERVAL)

    def stop(self) -> None:
        """Watchers, then functions (all signalled at once), then emulators; never raises."""
        for watcher in reversed(self.watchers):
            try:
                watcher.stop()
            except Exception:
                log.exception("stopping a watcher failed", extra={"watcher": watcher.name})
        for running in self.functions:
            running.terminate()
        for running in self.functions:
            try:
                running.wait_stopped(FUNCTION_STOP_TIMEOUT)
            except Exception:
                log.exception("stopping a function failed", extra={"function": running.name})
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        try:
            self.emulators.stop(keep_logs=True)
        except Exception:
            log.exception("stopping the emulators failed")

    def describe(self) -> None:
        config = self.config
        env = self.env
        say("codedrop local stack (project " + config.project + ")")
        say(f"  Firestore emulator  {env['FIRESTORE_EMULATOR_HOST']}")
        say(f"  Pub/Sub emulator    {env['PUBSUB_EMULATOR_HOST']}  ({', '.join(self.resources)})")
        say(f"  Storage emulator    {env['STORAGE_EMULATOR_HOST']}  (bucket {config.bucket})")
        for running in self.functions:
            say(f"  {running.name:<19} {running.url}")
        for watcher in self.watchers:
            say(f"  {watcher.name:<19} {watcher}")
        missing = [f.name for f in FUNCTIONS if f.name not in {r.name for r in self.functions}]
        if missing:
            say(f"  not in functions/main.py yet: {', '.join(missing)}")
        say(f"  logs                {config.log_dir}")
        say("environment for clients and tools in another shell:")
        for name, value in env.items():
            say(f"  export {name}={value}")
        t = self.timings
        say(
            f"started in {t['total']:.1f} s (emulators {t['emulators']:.1f} s, "
            f"topics {t['resources']:.1f} s, functions {t['functions']:.1f} s)"
        )


# --- demo and check ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Demo:
    campaign_id: str
    shopper_token: str


def run_demo(stack: LocalStack) -> Demo:
    """Campaign `demo` through admin_api over HTTP, then 100 codes written directly."""
    config = stack.config
    admin_token = emulator_id_token(DEMO_ADMIN, project=config.project, admin=True)
    now = datetime.now(UTC)
    body = {
        "campaign_id": DEMO_CAMPAIGN,
        "title": "codedrop demo",
        "starts_at": (now - timedelta(minutes=1)).isoformat(),
        "ends_at": (now + timedelta(days=1)).isoformat(),
    }
    status, answer = http_json(
        "POST", f"{stack.url('admin_api')}/v1/campaigns", body=body, token=admin_token
    )
    if status == 201:
        say(f"demo: created campaign {DEMO_CAMPAIGN} through admin_api")
    elif status == 409:
        say(f"demo: campaign {DEMO_CAMPAIGN} already exists; reusing it")
    else:
        raise StackError(f"admin_api answered {status} to creating the demo campaign: {answer}")

    # The CSV intake comes later; until then the codes are written the way fixtures write them.
    from shared.coupon_store import add_codes
    from shared.firestore_db import get_db

    batch = secrets.token_hex(3).upper()  # codes stay new when the campaign is reused
    codes = [f"DEMO-{batch}-{n:03d}" for n in range(1, DEMO_CODES + 1)]
    written = add_codes(get_db(), campaign_id=DEMO_CAMPAIGN, codes=codes, now=now)
    say(f"demo: wrote {written} codes ({codes[0]} … {codes[-1]})")

    shopper_token = emulator_id_token(
        DEMO_SHOPPER, project=config.project, lifetime_seconds=7 * 24 * 3600
    )
    claim = f"{stack.url('claim_api')}/v1/campaigns/{DEMO_CAMPAIGN}/claims"
    say(f"claim a code as {DEMO_SHOPPER}:")
    say(f'  curl -s -X POST {claim} -H "Authorization: Bearer {shopper_token}"')
    say("see the campaign:")
    say(f"  curl -s {stack.url('claim_api')}/v1/campaigns/{DEMO_CAMPAIGN}")
    return Demo(campaign_id=DEMO_CAMPAIGN, shopper_token=shopper_token)


def run_check(stack: LocalStack, demo: Demo) -> None:
    """The printed curl, over HTTP: one claim must answer 201 with a code."""
    base = f"{stack.url('claim_api')}/v1/campaigns/{demo.campaign_id}"
    status, answer = http_json("POST", f"{base}/claims", token=demo.shopper_token)
    if status != 201 or not isinstance(answer, dict) or not answer.get("code"):
        raise StackError(f"check: claim answered {status} {answer}, expected 201 with a code")
    say(f"check: claim answered 201 with code {answer['code']}")
    status, answer = http_json("GET", base)
    if status != 200:
        raise StackError(f"check: GET campaign answered {status} {answer}, expected 200")
    say(f"check: campaign is {answer.get('status')} with {answer.get('remaining')} codes left")
    say("local stack check passed")


# --- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    config = _parse(argv)
    _log_to_file(config.log_dir / "local_stack.log")
    stack = LocalStack(config)
    for signum in STOP_SIGNALS:
        signal.signal(signum, _on_signal)
    try:
        say(f"starting the emulators and functions (logs in {config.log_dir}) …")
        stack.start()
        stack.describe()
        say(READY_LINE)
        if config.demo:
            demo = run_demo(stack)
            if config.check:
                run_check(stack, demo)
                return 0
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
        # A second Ctrl-C must not leave processes half-stopped; each stop is bounded anyway.
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        stack.stop()
        say("stopped")


if __name__ == "__main__":
    sys.exit(main())
