"""Start, wait for, reset and stop the local Firestore, Pub/Sub, Cloud Storage and Firebase Auth
emulators."""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from devkit import http
from devkit.emulators.processes import GroupProcess, ProcessFailed, port_taken, spawn

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_TIMEOUT = 30.0
# For an emulator that failed to start: how long SIGTERM gets before SIGKILL.
FAILED_STOP_TIMEOUT = 10.0

SDK_ENV_VARS = ("CLOUDSDK_ROOT", "GCLOUD_SDK_ROOT")
SDK_USUAL_PATHS = (
    Path("/usr/lib/google-cloud-sdk"),
    Path("/usr/share/google-cloud-sdk"),
    Path("/opt/google-cloud-sdk"),
    Path("~/google-cloud-sdk"),
)
FIRESTORE_LAUNCHER = Path("platform/cloud-firestore-emulator/cloud_firestore_emulator")
PUBSUB_LAUNCHER = Path("platform/pubsub-emulator/bin/cloud-pubsub-emulator")

JAVA_HINT = (
    "Install a Java runtime (17 works), e.g. `sudo apt-get install openjdk-17-jre-headless` "
    "on Debian/Ubuntu or `brew install openjdk@17` on macOS, and make sure `java -version` "
    "works in this shell."
)
SDK_HINT = (
    "Install the Google Cloud CLI (https://cloud.google.com/sdk/docs/install, or "
    "`sudo apt-get install google-cloud-cli`), or point CLOUDSDK_ROOT at its root folder."
)
COMPONENT_HINT = (
    "Install the emulators with `gcloud components install cloud-firestore-emulator "
    "pubsub-emulator`, or, when the SDK came from apt, `sudo apt-get install "
    "google-cloud-cli-firestore-emulator google-cloud-cli-pubsub-emulator`."
)
REPO = Path(__file__).resolve().parents[2]
# firebase-tools, installed from package-lock.json by scripts/bootstrap.sh (`npm ci`).
FIREBASE_CLI = REPO / "node_modules" / ".bin" / "firebase"
NODE_MIN_MAJOR = 20
# Its start compiles the Identity Toolkit API description: 6-7 s of CPU; 10-30 s measured on two
# cores, 78 s once under a load average of 77.
AUTH_TIMEOUT = 180.0
NODE_HINT = (
    f"Install Node.js {NODE_MIN_MAJOR} or newer (https://nodejs.org/en/download, or your "
    "package manager) and make sure `node --version` works in this shell."
)
NPM_HINT = (
    "Install the project's Node packages with `npm ci --omit=optional` in the repository root "
    "(./scripts/run and ./scripts/test do it)."
)
STORAGE_HINT = (
    "Install it into this virtualenv with `pip install gcp-storage-emulator` "
    "(or `pip install -r requirements-dev.txt`)."
)


class EmulatorUnavailable(RuntimeError):
    """Java, the Cloud SDK or an emulator is missing; the message says how to install it."""


class EmulatorFailed(RuntimeError):
    """An emulator did not start, did not become ready, or refused a reset."""


# Emulators still running, so that an interpreter exit (a failed test run, Ctrl-C in a script)
# does not leave JVMs behind holding ports.
_running: dict[int, RunningEmulator] = {}


@dataclass(eq=False, kw_only=True)
class RunningEmulator(GroupProcess):
    """An emulator process group started by this module."""

    host: str
    port: int
    _stopped: bool = field(default=False, init=False, repr=False)

    @property
    def label(self) -> str:
        return f"{self.name} emulator"

    @property
    def host_port(self) -> str:
        """`host:port`, the form the *_EMULATOR_HOST variables use."""
        return f"{self.host}:{self.port}"

    def stop(self, timeout: float = 10) -> None:
        """Stop the whole process group: SIGTERM, wait up to `timeout`, then SIGKILL."""
        if self._stopped:
            return
        try:
            super().stop(timeout)
        except ProcessFailed as exc:
            raise EmulatorFailed(str(exc)) from exc
        self._stopped = True
        _running.pop(self.pgid, None)
        log.info("%s emulator stopped (exit code %s)", self.name, self.process.returncode)


@atexit.register
def _stop_leftovers() -> None:
    for emulator in list(_running.values()):
        with contextlib.suppress(Exception):
            emulator.stop(timeout=5)


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((DEFAULT_HOST, 0))
        port: int = sock.getsockname()[1]
        return port


# --- prerequisites ----------------------------------------------------------------------------


def _find_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise EmulatorUnavailable(
            "The Firestore and Pub/Sub emulators need Java, but `java` is not on PATH. " + JAVA_HINT
        )
    # macOS ships a /usr/bin/java stub that only prints "Unable to locate a Java Runtime".
    try:
        result = subprocess.run([java, "-version"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmulatorUnavailable(f"`{java} -version` failed ({exc}). {JAVA_HINT}") from exc
    if result.returncode != 0:
        output = result.stderr.decode(errors="replace").strip()
        raise EmulatorUnavailable(f"`{java} -version` failed: {output}. {JAVA_HINT}")
    return java


# `gcloud info` costs about 0.7 s and its answer does not change while we run.
@functools.cache
def _gcloud_sdk_root() -> Path | None:
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        return None
    try:
        result = subprocess.run(
            [gcloud, "info", "--format=value(installation.sdk_root)"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("`gcloud info` failed: %s", exc)
        return None
    root = result.stdout.decode(errors="replace").strip()
    return Path(root) if result.returncode == 0 and root else None


def find_sdk_root() -> Path:
    """The Google Cloud SDK root: $CLOUDSDK_ROOT, $GCLOUD_SDK_ROOT, `gcloud info`, usual paths."""
    for var in SDK_ENV_VARS:
        value = os.environ.get(var)
        if value:
            path = Path(value).expanduser()
            if path.is_dir():
                return path
            log.warning("%s=%s is not a directory; looking elsewhere", var, value)
    from_gcloud = _gcloud_sdk_root()
    if from_gcloud is not None and from_gcloud.is_dir():
        return from_gcloud
    for candidate in SDK_USUAL_PATHS:
        path = candidate.expanduser()
        if path.is_dir():
            return path
    looked = ", ".join(
        [f"${var}" for var in SDK_ENV_VARS]
        + ["`gcloud info`"]
        + [str(path) for path in SDK_USUAL_PATHS]
    )
    raise EmulatorUnavailable(f"Google Cloud SDK not found (looked at {looked}). {SDK_HINT}")


def _sdk_launcher(relative: Path, component: str) -> Path:
    root = find_sdk_root()
    launcher = root / relative
    if not launcher.is_file():
        raise EmulatorUnavailable(
            f"The {component} emulator is not installed in the Cloud SDK at {root} "
            f"({launcher} is missing). {COMPONENT_HINT}"
        )
    return launcher


def _storage_command() -> list[str]:
    # The emulator with the CORS answers a browser upload needs (storage_cors.py beside this), run
    # by this interpreter, which has the emulator installed.
    if importlib.util.find_spec("gcp_storage_emulator") is not None:
        return [sys.executable, str(Path(__file__).with_name("storage_cors.py"))]
    raise EmulatorUnavailable(
        f"gcp-storage-emulator is not installed for {sys.executable}. {STORAGE_HINT}"
    )


def check_prerequisites() -> None:
    """Raise EmulatorUnavailable, with install hints, if any emulator cannot be started."""
    _find_java()
    _sdk_launcher(FIRESTORE_LAUNCHER, "Firestore")
    _sdk_launcher(PUBSUB_LAUNCHER, "Pub/Sub")
    _storage_command()


def check_auth_prerequisites() -> None:
    """Raise EmulatorUnavailable, with install hints, if the Auth emulator cannot be started:
    it needs Node.js and firebase-tools from the project's package-lock.json (no Java)."""
    node = shutil.which("node")
    if node is None:
        raise EmulatorUnavailable(
            f"The Firebase Auth emulator needs Node.js, but `node` is not on PATH. {NODE_HINT}"
        )
    try:
        result = subprocess.run([node, "--version"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmulatorUnavailable(f"`{node} --version` failed ({exc}). {NODE_HINT}") from exc
    version = result.stdout.decode(errors="replace").strip()
    match = re.match(r"v(\d+)\.", version)
    if result.returncode != 0 or match is None or int(match[1]) < NODE_MIN_MAJOR:
        raise EmulatorUnavailable(
            f"The Firebase Auth emulator needs Node.js {NODE_MIN_MAJOR} or newer; "
            f"`{node} --version` says {version or 'nothing'}. {NODE_HINT}"
        )
    if not FIREBASE_CLI.is_file():
        raise EmulatorUnavailable(f"firebase-tools is not installed ({FIREBASE_CLI}). {NPM_HINT}")


# --- start and readiness ----------------------------------------------------------------------


def _spawn(
    name: str,
    command: list[str],
    *,
    host: str,
    port: int,
    log_dir: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> RunningEmulator:
    taken = port_taken(host, port)
    if taken is not None:
        raise EmulatorFailed(
            f"{name} emulator: cannot bind {host}:{port} ({taken}); is the port already "
            "in use, perhaps by another emulator?"
        )
    log_path = log_dir / f"{name}.log"
    log.info("starting %s emulator on %s:%d (log: %s)", name, host, port, log_path)
    process = spawn(command, log_path=log_path, env={**os.environ, **(env or {})}, cwd=cwd)
    emulator = RunningEmulator(name=name, process=process, log_path=log_path, host=host, port=port)
    _running[emulator.pgid] = emulator
    return emulator


def _answers(emulator: RunningEmulator) -> bool:
    base = f"http://{emulator.host_port}"
    try:
        if emulator.name == "storage":
            return http.request("GET", f"{base}/storage/v1/b", timeout=2).status_code == 200
        response = http.request("GET", f"{base}/", timeout=2)
    except http.Unreachable:
        return False
    if emulator.name == "auth":
        return response.status_code == 200 and _auth_ready(response.text)
    return response.status_code == 200 and response.text.strip() == "Ok"


def _auth_ready(body: str) -> bool:
    try:
        answer = json.loads(body)
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("authEmulator", {}).get("ready") is True


def _ready(emulator: RunningEmulator, timeout: float) -> RunningEmulator:
    """Poll until the emulator answers; stop it and raise EmulatorFailed if it does not."""
    try:
        elapsed = emulator.wait_ready(
            lambda: _answers(emulator), where=emulator.host_port, timeout=timeout
        )
    except ProcessFailed as exc:
        emulator.stop(timeout=FAILED_STOP_TIMEOUT)
        raise EmulatorFailed(str(exc)) from exc
    log.info("%s emulator ready on %s in %.2f s", emulator.name, emulator.host_port, elapsed)
    return emulator


# The Firestore launcher runs `java ... -cp "${FIRESTORE_JAR}" <main class> $*` without exec.
_FIRESTORE_MAIN_CLASS = re.compile(r'-cp\s+"?\$\{?FIRESTORE_JAR\}?"?\s+([A-Za-z_][\w.]*)')


# The JIT's first tier only: the emulator lives for a test run or a benchmark (minutes), and on
# two cores compiling its hot paths again with C2 cost more CPU than it saved (a claim-shaped
# commit took 1.2-1.4 ms of emulator CPU with C2, 0.6-0.7 ms without, 3,000 commits a run).
FIRESTORE_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1",)


def _firestore_java_command(java: str, launcher: Path) -> list[str] | None:
    """The launcher's own java command line, or None if the launcher no longer looks as known.

    Running the JVM directly makes it our child: the launcher would leave it an orphan, whose
    exit init reaps late (about 1.5 s on these machines), and would hide its exit code.
    """
    jar = launcher.parent / "cloud-firestore-emulator.jar"
    try:
        match = _FIRESTORE_MAIN_CLASS.search(launcher.read_text(errors="replace"))
    except OSError:
        return None
    if match is None or not jar.is_file():
        return None
    # The launcher sets English because the emulator only supports English messages.
    return [java, "-Duser.language=en", *FIRESTORE_JVM_OPTIONS, "-cp", str(jar), match.group(1)]


def _spawn_firestore(
    *, host: str, port: int, project: str, log_dir: Path, rules: Path | None = None
) -> RunningEmulator:
    java = _find_java()
    launcher = _sdk_launcher(FIRESTORE_LAUNCHER, "Firestore")
    program = _firestore_java_command(java, launcher)
    if program is None:
        log.info("unrecognised %s; running it instead of java", launcher)
        program = [str(launcher)]
    # --project_id only names the default project; other project ids keep working.
    command = [*program, "start", f"--host={host}", f"--port={port}", f"--project_id={project}"]
    if rules is not None:
        # Enforced for clients that send an end-user token; the Admin SDK bypasses rules.
        command.append(f"--rules={rules}")
    # The launcher, if used, runs $JAVA (default `java`); pin the one we checked.
    return _spawn("firestore", command, host=host, port=port, log_dir=log_dir, env={"JAVA": java})


# The JIT's first tier only, as for Firestore: in a 5,000-shopper burst through the local stack
# (a publish and two pushes per claim) the Pub/Sub emulator took 1.09 ms of CPU per shopper with
# it, 1.92 without (same code, sale and settling).
PUBSUB_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1",)


def _spawn_pubsub(*, host: str, port: int, log_dir: Path) -> RunningEmulator:
    _find_java()
    launcher = _sdk_launcher(PUBSUB_LAUNCHER, "Pub/Sub")
    # No --projects: it would reject every other project id instead of just naming this one.
    command = [str(launcher), f"--host={host}", f"--port={port}"]
    # The launcher (a Gradle start script) adds $CLOUD_PUBSUB_EMULATOR_OPTS to the JVM's options.
    options = " ".join([*PUBSUB_JVM_OPTIONS, os.environ.get("CLOUD_PUBSUB_EMULATOR_OPTS", "")])
    env = {"CLOUD_PUBSUB_EMULATOR_OPTS": options.strip()}
    return _spawn("pubsub", command, host=host, port=port, log_dir=log_dir, env=env)


def _spawn_storage(*, host: str, port: int, bucket: str, log_dir: Path) -> RunningEmulator:
    command = [
        *_storage_command(),
        "start",
        f"--host={host}",
        f"--port={port}",
        "--in-memory",
        f"--default-bucket={bucket}",
    ]
    # Unbuffered, so that the log shows why it died.
    return _spawn(
        "storage", command, host=host, port=port, log_dir=log_dir, env={"PYTHONUNBUFFERED": "1"}
    )


def _auth_config(*, host: str, port: int, log_dir: Path) -> Path:
    """A firebase.json of its own: the Emulator UI off (it would be downloaded), and free ports
    for the hub and logging servers firebase-tools always opens (4400 and 4500 by default), so
    the test suite and a local stack can run side by side."""
    config = {
        "emulators": {
            "auth": {"host": host, "port": port},
            "hub": {"host": host, "port": free_port()},
            "logging": {"host": host, "port": free_port()},
            "ui": {"enabled": False},
        }
    }
    path = log_dir / "firebase-auth.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def _spawn_auth(*, host: str, port: int, project: str, log_dir: Path) -> RunningEmulator:
    check_auth_prerequisites()
    log_dir.mkdir(parents=True, exist_ok=True)
    config = _auth_config(host=host, port=port, log_dir=log_dir)
    command = [
        str(FIREBASE_CLI),
        *("emulators:start", "--only", "auth", "--project", project, "--config", str(config)),
    ]
    # CI: no prompts, no update check and no message-of-the-day fetch (all need the internet).
    # Run from the log folder: firebase-debug.log, when written, lands there.
    env = {"CI": "true", "NO_UPDATE_NOTIFIER": "1"}
    return _spawn("auth", command, host=host, port=port, log_dir=log_dir, env=env, cwd=log_dir)


def start_auth(
    *,
    host: str = DEFAULT_HOST,
    port: int,
    project: str,
    log_dir: Path,
    timeout: float = AUTH_TIMEOUT,
    wait: bool = True,
) -> RunningEmulator:
    """Start the Firebase Auth emulator (firebase-tools) and wait until it says it is ready.
    With `wait=False` return at once, so that its slow start overlaps other work; then
    `wait_ready(emulator, timeout)`."""
    emulator = _spawn_auth(host=host, port=port, project=project, log_dir=log_dir)
    return _ready(emulator, timeout) if wait else emulator


def wait_ready(emulator: RunningEmulator, timeout: float) -> RunningEmulator:
    """Wait until an emulator started with `wait=False` answers; EmulatorFailed (and it is
    stopped) if it does not in time."""
    return _ready(emulator, timeout)


def start_firestore(
    *,
    host: str = DEFAULT_HOST,
    port: int,
    project: str,
    log_dir: Path,
    timeout: float = DEFAULT_TIMEOUT,
    rules: Path | None = None,
) -> RunningEmulator:
    """Start the Firestore emulator (with a security rules file, if given) and wait until
    `GET /` answers `Ok`."""
    spawned = _spawn_firestore(host=host, port=port, project=project, log_dir=log_dir, rules=rules)
    return _ready(spawned, timeout)


def start_pubsub(
    *, host: str = DEFAULT_HOST, port: int, log_dir: Path, timeout: float = DEFAULT_TIMEOUT
) -> RunningEmulator:
    """Start the Pub/Sub emulator (it serves every project id) and wait until `GET /` answers
    `Ok`."""
    return _ready(_spawn_pubsub(host=host, port=port, log_dir=log_dir), timeout)


def start_storage(
    *,
    host: str = DEFAULT_HOST,
    port: int,
    bucket: str,
    log_dir: Path,
    timeout: float = DEFAULT_TIMEOUT,
) -> RunningEmulator:
    """Start gcp-storage-emulator in memory with `bucket` and wait until it lists buckets."""
    return _ready(_spawn_storage(host=host, port=port, bucket=bucket, log_dir=log_dir), timeout)


# --- reset ------------------------------------------------------------------------------------


def _reset(what: str, method: str, url: str) -> None:
    try:
        response = http.request(method, url, timeout=10)
    except http.Unreachable as exc:
        raise EmulatorFailed(f"resetting {what} failed: {method} {url}: {exc}") from exc
    if not response.ok:
        raise EmulatorFailed(
            f"resetting {what} failed: {method} {url} answered {response.status_code}: "
            f"{response.text[:500]}"
        )


def reset_firestore(*, host_port: str, project: str) -> None:
    """Delete every document of the project's (default) database."""
    _reset(
        "Firestore",
        "DELETE",
        f"http://{host_port}/emulator/v1/projects/{project}/databases/(default)/documents",
    )


def reset_auth(*, host_port: str, project: str) -> None:
    """Delete every user of the project."""
    _reset("Auth", "DELETE", f"http://{host_port}/emulator/v1/projects/{project}/accounts")


def reset_pubsub(*, host_port: str) -> None:
    """Delete every topic and subscription of every project."""
    _reset("Pub/Sub", "POST", f"http://{host_port}/reset")


# --- the whole stack --------------------------------------------------------------------------


class EmulatorStack:
    """Firestore, Pub/Sub and Storage emulators together, and with `auth=True` the Firebase Auth
    emulator, as a context manager.

    Ports left as None are picked free. Without `log_dir`, logs go to a temporary folder that
    is removed on a clean exit and kept (and named in the error) when something failed.
    """

    def __init__(
        self,
        *,
        host: str = DEFAULT_HOST,
        firestore_port: int | None = None,
        pubsub_port: int | None = None,
        storage_port: int | None = None,
        project: str = "demo-codedrop",
        bucket: str = "codedrop-imports",
        log_dir: Path | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        auth: bool = False,
        auth_port: int | None = None,
    ) -> None:
        self.host = host
        self.with_auth = auth
        self.auth_port = auth_port
        self.firestore_port = firestore_port
        self.pubsub_port = pubsub_port
        self.storage_port = storage_port
        self.project = project
        self.bucket = bucket
        self.timeout = timeout
        self._own_log_dir = log_dir is None
        self.log_dir = log_dir
        self.firestore: RunningEmulator | None = None
        self.pubsub: RunningEmulator | None = None
        self.storage: RunningEmulator | None = None
        self.auth: RunningEmulator | None = None
        self.ready_seconds: dict[str, float] = {}

    def emulators(self) -> Iterator[RunningEmulator]:
        """Those started so far."""
        for emulator in (self.firestore, self.pubsub, self.storage, self.auth):
            if emulator is not None:
                yield emulator

    def start(self) -> Self:
        """Start them all; on any failure stop those already started and re-raise."""
        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="codedrop-emulators-"))
        try:
            # Spawn all first and wait afterwards: they then boot in parallel. The Auth emulator
            # first, as the slowest (its start is CPU-bound).
            if self.with_auth:
                self.auth = _spawn_auth(
                    host=self.host,
                    port=self.auth_port or free_port(),
                    project=self.project,
                    log_dir=self.log_dir,
                )
            self.firestore = _spawn_firestore(
                host=self.host,
                port=self.firestore_port or free_port(),
                project=self.project,
                log_dir=self.log_dir,
            )
            self.pubsub = _spawn_pubsub(
                host=self.host, port=self.pubsub_port or free_port(), log_dir=self.log_dir
            )
            self.storage = _spawn_storage(
                host=self.host,
                port=self.storage_port or free_port(),
                bucket=self.bucket,
                log_dir=self.log_dir,
            )
            started = time.monotonic()
            for emulator in self.emulators():
                budget = max(self.timeout, AUTH_TIMEOUT) if emulator is self.auth else self.timeout
                _ready(emulator, max(budget - (time.monotonic() - started), 0.5))
                self.ready_seconds[emulator.name] = time.monotonic() - started
        except BaseException:
            self.stop(keep_logs=True)
            raise
        return self

    def stop(self, *, keep_logs: bool = False) -> None:
        """Stop every emulator that was started; remove a temporary log folder unless kept."""
        errors: list[BaseException] = []
        for emulator in self.emulators():  # all at once: each takes seconds to stop
            with contextlib.suppress(OSError):  # stop() below tells
                emulator.terminate()
        for emulator in self.emulators():
            try:
                emulator.stop()
            except (EmulatorFailed, OSError) as exc:  # stop the others all the same
                errors.append(exc)
        if self._own_log_dir and self.log_dir is not None and self.log_dir.exists():
            if (keep_logs or errors) and any(self.log_dir.iterdir()):
                log.warning("emulator logs kept in %s", self.log_dir)
                # Said once: stop() runs again when start() failed inside a `with`.
                self._own_log_dir = False
            else:
                shutil.rmtree(self.log_dir, ignore_errors=True)
        if errors:
            raise errors[0]

    def env(self) -> dict[str, str]:
        """The variables that point client libraries at these emulators."""
        if self.firestore is None or self.pubsub is None or self.storage is None:
            raise RuntimeError("EmulatorStack is not started")
        env = {
            "FIRESTORE_EMULATOR_HOST": self.firestore.host_port,
            "PUBSUB_EMULATOR_HOST": self.pubsub.host_port,
            # Unlike the other two, the storage client wants a URL.
            "STORAGE_EMULATOR_HOST": f"http://{self.storage.host_port}",
        }
        if self.auth is not None:
            # firebase-admin then manages users there and accepts its (unsigned) ID tokens.
            env["FIREBASE_AUTH_EMULATOR_HOST"] = self.auth.host_port
        return env

    def reset(self) -> None:
        """Empty Firestore (this project) and Pub/Sub."""
        if self.firestore is None or self.pubsub is None:
            raise RuntimeError("EmulatorStack is not started")
        reset_firestore(host_port=self.firestore.host_port, project=self.project)
        reset_pubsub(host_port=self.pubsub.host_port)
        if self.auth is not None:
            reset_auth(host_port=self.auth.host_port, project=self.project)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(keep_logs=exc is not None)
