"""Rehearse a flash sale through the HTTP API, audit it against the database, and report it.

    ./scripts/loadtest [--shoppers 10000] [--codes 5000] [--pattern ramp|burst]
        [--ramp-seconds 30] [--double-click-share 0.1] [--max-per-user 1] [--processes 1]
        [--claim-workers W] [--claim-threads T] [--free-ports | --claim-port P ...]
        [--target-claim URL --target-admin URL [--storage-host URL] [--firestore-host H:P]]
        [--report-dir DIR] [--settle-seconds 30] [--require-targets] [--prepare-only]

1. Starts the local stack (scripts/local_stack.py, on the ports of its CODEDROP_*_PORT
   variables, the --<name>-port flags, or free ones with --free-ports) and waits for its ready
   line, unless --target-claim and --target-admin name a running one.
2. Creates a campaign through admin_api and loads its pool through the real intake path: a CSV
   of --codes codes dropped at imports/{campaign}/loadtest.csv in the imports bucket, then
   GET /v1/jobs/{job} until the import job is done.
3. Runs locust headless (scripts/locustfile.py, FastHttpUser): --shoppers shoppers arriving all
   at once (burst: spawn rate = shoppers) or evenly over --ramp-seconds (ramp). Each opens the
   campaign, claims once with an ID token of its own (retrying 503/429 after Retry-After),
   reads its code back; --double-click-share of them send a second claim while the first is in
   flight. Every response is recorded in responses.jsonl.
4. Audits the sale from the database (shared.audit plus the claim documents) and the API:
   codes held by two shoppers, over-issue, shoppers over their limit, SOLD_OUT answered while
   codes remained, answers that disagree with the database, shoppers without an answer, and
   the usage counters (GET /v1/campaigns/{id} stats, polled until they settle) against the
   documents.
5. Writes reports/loadtest-<stamp>/ (report.html, summary.json, responses.jsonl, locust.html,
   the stack's logs) and prints the figures.

Exit status: 0 no violation; 1 a violation; 2 the run could not be made (setup failed);
3 no violation but a target missed, with --require-targets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import queue
import resource
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from emulator import free_port  # noqa: E402
from emulator.tokens import emulator_id_token  # noqa: E402
from scripts import loadtest_report as report  # noqa: E402
from scripts.local_stack import FUNCTIONS, PORTS, READY_LINE  # noqa: E402

LOCUSTFILE = REPO / "scripts" / "locustfile.py"
LOCAL_STACK = REPO / "scripts" / "local_stack.py"
DEFAULT_PROJECT = "demo-codedrop"
DEFAULT_BUCKET = "codedrop-imports"
ADMIN_USER = "loadtest-operator"

EXIT_OK, EXIT_VIOLATIONS, EXIT_SETUP, EXIT_TARGETS = 0, 1, 2, 3
STACK_READY_TIMEOUT = 240.0
STACK_STOP_TIMEOUT = 60.0
IMPORT_TIMEOUT = 600.0
PROGRESS_EVERY = 5.0
CPU_INTERVAL = 1.0
REST = "rest of the machine"


class SetupError(RuntimeError):
    """The sale could not be staged (stack, campaign, import, locust): exit 2."""


def say(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# --- options ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Options:
    shoppers: int
    codes: int
    pattern: str
    ramp_seconds: float
    double_click_share: float
    max_per_user: int
    processes: int
    claim_workers: int | None
    claim_threads: int | None
    ports: dict[str, int]  # by local_stack PORTS key, only those given
    free_ports: bool
    target_claim: str | None
    target_admin: str | None
    storage_host: str | None
    firestore_host: str | None
    bucket: str
    project: str
    report_dir: Path
    settle_seconds: float
    claim_attempts: int
    give_up_after: float
    waiting_room: bool
    admissions_per_second: float | None
    p95_target_ms: float
    sale_target_seconds: float
    require_targets: bool
    prepare_only: bool

    @property
    def spawn_rate(self) -> float:
        if self.pattern == "burst":
            return float(self.shoppers)
        return self.shoppers / self.ramp_seconds

    @property
    def arrival_seconds(self) -> float:
        return 0.0 if self.pattern == "burst" else self.ramp_seconds


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/loadtest",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sale = parser.add_argument_group("the sale")
    sale.add_argument("--shoppers", type=int, default=10_000, help="default %(default)s")
    sale.add_argument("--codes", type=int, default=5_000, help="default %(default)s")
    sale.add_argument(
        "--pattern",
        choices=("ramp", "burst"),
        default="ramp",
        help="ramp: shoppers arrive evenly over --ramp-seconds; burst: all at once",
    )
    sale.add_argument("--ramp-seconds", type=float, default=30.0, help="default %(default)s")
    sale.add_argument("--double-click-share", type=float, default=0.1, help="default %(default)s")
    sale.add_argument("--max-per-user", type=int, default=1, help="default %(default)s")
    sale.add_argument(
        "--waiting-room",
        action="store_true",
        help="create the campaign with its waiting room enabled",
    )
    sale.add_argument(
        "--admissions-per-second", type=float, help="the waiting room's admission rate"
    )
    sale.add_argument(
        "--claim-attempts",
        type=int,
        default=40,
        help="claim requests per click at most, retries included (default %(default)s)",
    )
    sale.add_argument(
        "--give-up-after",
        type=float,
        default=120.0,
        help="a shopper stops retrying after this many seconds (default %(default)s)",
    )

    load = parser.add_argument_group("load generator")
    load.add_argument(
        "--processes",
        type=int,
        default=1,
        help="locust processes (-1: one per core; default %(default)s: no extra process)",
    )

    stack = parser.add_argument_group(
        "the stack it starts (ports: flag, else $CODEDROP_<NAME>_PORT, else the default)"
    )
    stack.add_argument("--claim-workers", type=int, help="claim_api gunicorn processes")
    stack.add_argument("--claim-threads", type=int, help="claim_api threads per process")
    stack.add_argument("--free-ports", action="store_true", help="use free ports for everything")
    for port in PORTS:
        names = [f"--{port.key}-port"]
        if port.key in ("claim-api", "admin-api"):
            names.append(f"--{port.key.split('-')[0]}-port")
        stack.add_argument(
            *names,
            dest=f"port_{port.key.replace('-', '_')}",
            type=int,
            metavar="PORT",
            help=f"{port.what} (default ${port.env} or {port.default})",
        )
    stack.add_argument("--project", default=DEFAULT_PROJECT, help="default %(default)s")
    stack.add_argument(
        "--bucket",
        default=os.environ.get("CODEDROP_IMPORTS_BUCKET") or DEFAULT_BUCKET,
        help="imports bucket (default $CODEDROP_IMPORTS_BUCKET or %(default)s)",
    )

    running = parser.add_argument_group("a stack that is already running")
    running.add_argument("--target-claim", metavar="URL", help="claim_api base URL")
    running.add_argument("--target-admin", metavar="URL", help="admin_api base URL")
    running.add_argument(
        "--storage-host",
        metavar="URL",
        help="Storage emulator (default $STORAGE_EMULATOR_HOST or the storage port)",
    )
    running.add_argument(
        "--firestore-host",
        metavar="HOST:PORT",
        help="Firestore emulator (default $FIRESTORE_EMULATOR_HOST or the firestore port)",
    )
    running.add_argument(
        "--prepare-only",
        action="store_true",
        help="create the campaign and its codes, print the locust command for its web UI, exit",
    )

    out = parser.add_argument_group("audit and report")
    out.add_argument("--report-dir", type=Path, help="default reports/loadtest-<stamp>")
    out.add_argument(
        "--settle-seconds",
        type=float,
        default=30.0,
        help="how long the usage counters get to match the documents (default %(default)s)",
    )
    out.add_argument("--p95-target-ms", type=float, default=1000.0, help="default %(default)s")
    out.add_argument(
        "--sale-target-seconds",
        type=float,
        default=30.0,
        help="burst: the whole sale answered within (default %(default)s)",
    )
    out.add_argument(
        "--require-targets", action="store_true", help="exit 3 when a target is missed"
    )
    return parser


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.shoppers < 1 or args.codes < 1:
        parser.error("--shoppers and --codes must be positive")
    if args.pattern == "ramp" and args.ramp_seconds <= 0:
        parser.error("--ramp-seconds must be positive")
    if not 0 <= args.double_click_share <= 1:
        parser.error("--double-click-share must be between 0 and 1")
    if not args.project.startswith("demo-"):
        parser.error("--project must start with demo- (emulator ID tokens only work there)")
    if bool(args.target_claim) != bool(args.target_admin):
        parser.error("--target-claim and --target-admin go together")
    if args.prepare_only and not args.target_claim:
        parser.error("--prepare-only needs a running stack (--target-claim, --target-admin)")
    if args.processes == 0 or args.processes < -1:
        parser.error("--processes must be positive or -1")
    ports = {
        port.key: value
        for port in PORTS
        if (value := getattr(args, f"port_{port.key.replace('-', '_')}")) is not None
    }
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    report_dir: Path = args.report_dir or REPO / "reports" / f"loadtest-{stamp}"
    return Options(
        shoppers=args.shoppers,
        codes=args.codes,
        pattern=args.pattern,
        ramp_seconds=args.ramp_seconds,
        double_click_share=args.double_click_share,
        max_per_user=args.max_per_user,
        processes=args.processes,
        claim_workers=args.claim_workers,
        claim_threads=args.claim_threads,
        ports=ports,
        free_ports=args.free_ports,
        target_claim=args.target_claim.rstrip("/") if args.target_claim else None,
        target_admin=args.target_admin.rstrip("/") if args.target_admin else None,
        storage_host=args.storage_host,
        firestore_host=args.firestore_host,
        bucket=args.bucket,
        project=args.project,
        report_dir=report_dir.resolve(),
        settle_seconds=args.settle_seconds,
        claim_attempts=args.claim_attempts,
        give_up_after=args.give_up_after,
        waiting_room=args.waiting_room,
        admissions_per_second=args.admissions_per_second,
        p95_target_ms=args.p95_target_ms,
        sale_target_seconds=args.sale_target_seconds,
        require_targets=args.require_targets,
        prepare_only=args.prepare_only,
    )


# --- HTTP (local only: no proxy ever sees this traffic) ---------------------------------------

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_json(
    method: str,
    url: str,
    *,
    body: object | None = None,
    token: str | None = None,
    timeout: float = 30,
) -> tuple[int, Any]:
    """Status and decoded JSON body (None if not JSON); OSError when nothing answers."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an HTTP URL: {url}")
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(  # noqa: S310 (scheme checked above)
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


# --- the stack --------------------------------------------------------------------------------


@dataclass
class Target:
    claim_url: str
    admin_url: str
    storage_host: str
    firestore_host: str
    project: str
    bucket: str
    started: bool
    stack_pid: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    def ports(self) -> list[int]:
        """The ports of the stack's servers that these URLs name."""
        found: list[int] = []
        for url in (self.claim_url, self.admin_url, self.storage_host, self.firestore_host):
            port = urllib.parse.urlsplit(url if "//" in url else f"//{url}").port
            if port is not None:
                found.append(port)
        return found


def _env_port(key: str, given: Mapping[str, int]) -> int:
    port = next(p for p in PORTS if p.key == key)
    if key in given:
        return given[key]
    raw = os.environ.get(port.env, "").strip()
    return int(raw) if raw.isdigit() else port.default


class StartedStack:
    """scripts/local_stack.py as a child process, from its ready line until stop()."""

    def __init__(self, options: Options, log_dir: Path) -> None:
        self.options = options
        self.log_dir = log_dir
        self.process: subprocess.Popen[str] | None = None
        self.exports: dict[str, str] = {}
        self.ports: dict[str, int] = {}
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader: threading.Thread | None = None

    def _choose_ports(self) -> dict[str, int]:
        if self.options.free_ports:
            chosen: dict[str, int] = {}
            while len(chosen) < len(PORTS):
                number = free_port()
                if number not in chosen.values():
                    chosen[PORTS[len(chosen)].key] = number
            chosen.update(self.options.ports)
            return chosen
        return {p.key: _env_port(p.key, self.options.ports) for p in PORTS}

    def start(self) -> Target:
        self.ports = self._choose_ports()
        env = dict(os.environ)
        for port in PORTS:
            env[port.env] = str(self.ports[port.key])
        if self.options.claim_workers:
            env["CODEDROP_CLAIM_API_WORKERS"] = str(self.options.claim_workers)
        if self.options.claim_threads:
            env["CODEDROP_CLAIM_API_THREADS"] = str(self.options.claim_threads)
        env["CODEDROP_IMPORTS_BUCKET"] = self.options.bucket
        self.log_dir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            str(LOCAL_STACK),
            "--project",
            self.options.project,
            "--log-dir",
            str(self.log_dir),
        ]
        say(f"starting the local stack (logs in {self.log_dir}) …")
        # A session of its own: Ctrl-C reaches only us, and we stop it in order.
        self.process = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name="local-stack-output", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + STACK_READY_TIMEOUT
        seen: list[str] = []
        while True:
            try:
                line = self._lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise SetupError(
                    f"the local stack was not ready after {STACK_READY_TIMEOUT:g} s:\n"
                    + "\n".join(seen[-30:])
                ) from None
            if line is None:
                raise SetupError(
                    "the local stack exited before it was ready (ports in use? try --free-ports)"
                    ":\n" + "\n".join(seen[-30:])
                )
            seen.append(line)
            stripped = line.strip()
            if stripped.startswith("export ") and "=" in stripped:
                name, _, value = stripped[len("export ") :].partition("=")
                self.exports[name] = value
            if stripped == READY_LINE:
                break
        host = "http://127.0.0.1"
        claim_api = next(f for f in FUNCTIONS if f.name == "claim_api")
        workers = env.get(claim_api.workers_env) or str(claim_api.workers)
        threads = env.get(claim_api.threads_env) or str(claim_api.threads)
        return Target(
            claim_url=f"{host}:{self.ports['claim-api']}",
            admin_url=f"{host}:{self.ports['admin-api']}",
            storage_host=self.exports.get(
                "STORAGE_EMULATOR_HOST", f"{host}:{self.ports['storage']}"
            ),
            firestore_host=self.exports.get(
                "FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{self.ports['firestore']}"
            ),
            project=self.options.project,
            bucket=self.options.bucket,
            started=True,
            stack_pid=self.process.pid,
            settings={
                "ports": self.ports,
                "claim_api_workers": int(workers),
                "claim_api_threads": int(threads),
            },
        )

    def _read(self) -> None:
        assert self.process is not None
        assert self.process.stdout is not None
        with (self.log_dir / "local_stack.out").open("w") as copy:
            for line in self.process.stdout:
                copy.write(line)
                copy.flush()
                self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def died(self) -> str | None:
        """Why the stack is gone (its last lines), or None while it runs."""
        process = self.process
        if process is None or process.poll() is None:
            return None
        tail = (self.log_dir / "local_stack.out").read_text(errors="replace").splitlines()
        return f"exit {process.returncode}:\n" + "\n".join(tail[-20:])

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        say("stopping the local stack …")
        process.send_signal(signal.SIGTERM)  # it stops its functions and emulators itself
        try:
            process.wait(STACK_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            say(f"the local stack did not stop in {STACK_STOP_TIMEOUT:g} s; killing it")
            process.kill()
            process.wait(10)


def running_target(options: Options) -> Target:
    assert options.target_claim
    assert options.target_admin
    storage = (
        options.storage_host
        or os.environ.get("STORAGE_EMULATOR_HOST")
        or f"http://127.0.0.1:{_env_port('storage', options.ports)}"
    )
    firestore_host = (
        options.firestore_host
        or os.environ.get("FIRESTORE_EMULATOR_HOST")
        or f"127.0.0.1:{_env_port('firestore', options.ports)}"
    )
    return Target(
        claim_url=options.target_claim,
        admin_url=options.target_admin,
        storage_host=storage,
        firestore_host=firestore_host,
        project=options.project,
        bucket=options.bucket,
        started=False,
        settings={"claim_api_workers": "as running", "claim_api_threads": "as running"},
    )


# --- staging the sale -------------------------------------------------------------------------


def create_campaign(options: Options, target: Target, token: str) -> str:
    now = datetime.now(UTC)
    campaign_id = f"lt-{now.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    body: dict[str, Any] = {
        "campaign_id": campaign_id,
        "title": f"load test {options.shoppers:,} shoppers for {options.codes:,} codes",
        "starts_at": (now - timedelta(minutes=1)).isoformat(),
        "ends_at": (now + timedelta(days=1)).isoformat(),
        "max_per_user": options.max_per_user,
    }
    if options.waiting_room:
        body["waiting_room_enabled"] = True
        if options.admissions_per_second:
            body["admissions_per_second"] = options.admissions_per_second
    status, answer = http_json("POST", f"{target.admin_url}/v1/campaigns", body=body, token=token)
    if status != 201:
        raise SetupError(f"admin_api answered {status} to creating the campaign: {answer}")
    return campaign_id


def load_pool(
    options: Options, target: Target, campaign_id: str, token: str, directory: Path
) -> dict[str, Any]:
    """The CSV through the bucket and import_codes; the finished job."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.storage import Client

    from shared.import_service import StoredObject, import_job_id

    tag = campaign_id.rsplit("-", 1)[-1].upper()
    csv_path = directory / "codes.csv"
    with csv_path.open("w") as handle:
        handle.write("code\n")
        for number in range(1, options.codes + 1):
            handle.write(f"LT{tag}-{number:07d}\n")
    name = f"imports/{campaign_id}/loadtest.csv"
    started = time.monotonic()
    try:
        client = Client(
            project=target.project,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": target.storage_host},
        )
        blob = client.bucket(target.bucket).blob(name)
        blob.upload_from_filename(str(csv_path), content_type="text/csv")
    except Exception as exc:
        raise SetupError(
            f"cannot upload gs://{target.bucket}/{name} to {target.storage_host}: {exc}"
        ) from exc
    job_id = import_job_id(
        StoredObject(bucket=target.bucket, name=name, generation=str(blob.generation))
    )
    say(f"dropped {options.codes:,} codes at gs://{target.bucket}/{name}; import job {job_id}")
    deadline = time.monotonic() + IMPORT_TIMEOUT
    job: Any = None
    while time.monotonic() < deadline:
        try:
            status, job = http_json("GET", f"{target.admin_url}/v1/jobs/{job_id}", token=token)
        except OSError:
            status = 0
        if status == 200 and isinstance(job, dict) and job.get("state") in ("done", "failed"):
            break
        if status in (401, 403):
            raise SetupError(f"admin_api refused the admin token ({status}): {job}")
        time.sleep(0.25)
    else:
        raise SetupError(
            f"import job {job_id} did not finish in {IMPORT_TIMEOUT:g} s (last: {job}); is "
            "import_codes running and the bucket notifier wired in?"
        )
    if job.get("state") != "done" or job.get("imported") != options.codes:
        raise SetupError(f"import job {job_id} ended {job.get('state')}: {job}")
    seconds = time.monotonic() - started
    say(f"import job done: {job['imported']:,} codes in {seconds:.1f} s")
    return {"job_id": job_id, "seconds": round(seconds, 2), "job": job}


def wait_until_claimable(target: Target, campaign_id: str, codes: int) -> None:
    """claim_api sees the campaign active with its codes (its caches are short)."""
    deadline = time.monotonic() + 30
    answer: Any = None
    while time.monotonic() < deadline:
        status, answer = http_json("GET", f"{target.claim_url}/v1/campaigns/{campaign_id}")
        if status == 200 and answer.get("status") == "active":
            return
        time.sleep(0.25)
    raise SetupError(f"claim_api does not show campaign {campaign_id} active: {answer}")


# --- CPU: who used the two cores --------------------------------------------------------------


def _classify(cmdline: Sequence[str]) -> str:
    if "--target" in cmdline:
        index = cmdline.index("--target")
        if index + 1 < len(cmdline):
            return cmdline[index + 1]
    joined = " ".join(cmdline)
    for needle, name in (
        ("firestore", "firestore emulator"),
        ("pubsub", "pubsub emulator"),
        ("storage", "storage emulator"),
        ("local_stack", "local_stack + bucket notifier"),
    ):
        if needle in joined:
            return name
    return "stack (other)"


class CpuSampler(threading.Thread):
    """Samples CPU time per component every second: locust (and its workers), each function
    and emulator of the stack, this process, and the rest of the machine.

    The stack is the process tree of the local stack we started, or, for a running stack, the
    trees of the processes listening on its ports."""

    def __init__(self, *, stack_pid: int | None, stack_ports: Sequence[int], cores: int) -> None:
        super().__init__(name="cpu-sampler", daemon=True)
        self.stack_pid = stack_pid
        self.stack_ports = set(stack_ports)
        self.stack_roots: list[int] = []
        self.cores = cores
        self.locust_pid: int | None = None
        self._stop_event = threading.Event()
        self.series: defaultdict[str, list[float]] = defaultdict(list)
        self.totals: defaultdict[str, float] = defaultdict(float)
        self.seconds = 0.0
        self.samples: list[float] = []  # the length of each interval
        self.available = True

    def _find_roots(self, psutil: Any) -> list[int]:
        if self.stack_pid is not None:
            return [self.stack_pid]
        roots: set[int] = set()
        try:
            listening = psutil.net_connections(kind="tcp")
        except (psutil.Error, OSError):
            return []
        for conn in listening:
            if (
                conn.status != "LISTEN"
                or conn.pid is None
                or conn.laddr.port not in self.stack_ports
            ):
                continue
            try:
                process = psutil.Process(conn.pid)
                # A gunicorn worker's master, a Java emulator's launcher script: go up while
                # the parent is the same program.
                while (parent := process.parent()) is not None and parent.pid != 1:
                    if parent.cmdline()[-3:] != process.cmdline()[-3:]:
                        break
                    process = parent
            except psutil.Error:
                continue
            roots.add(process.pid)
        return sorted(roots)

    def _snapshot(self, psutil: Any) -> tuple[dict[str, float], float]:
        usage: defaultdict[str, float] = defaultdict(float)

        def tree(pid: int | None, name: str | None) -> None:
            if pid is None:
                return
            try:
                root = psutil.Process(pid)
                processes = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
            for process in processes:
                try:
                    times = process.cpu_times()
                    label = name or _classify(process.cmdline())
                except psutil.Error:
                    continue
                usage[label] += times.user + times.system

        tree(self.locust_pid, "locust")
        for root in self.stack_roots:
            tree(root, None)
        own = psutil.Process(os.getpid()).cpu_times()
        usage["loadtest (this script)"] += own.user + own.system
        machine = psutil.cpu_times()
        # guest time is already counted in user time; idle and iowait are not work.
        busy = sum(
            getattr(machine, name, 0.0)
            for name in ("user", "nice", "system", "irq", "softirq", "steal")
        )
        return dict(usage), busy

    def run(self) -> None:
        try:
            import psutil  # type: ignore[import-untyped]  # locust's dependency
        except ImportError:
            self.available = False
            return
        self.stack_roots = self._find_roots(psutil)
        previous, previous_busy = self._snapshot(psutil)
        previous_at = time.monotonic()
        while not self._stop_event.wait(CPU_INTERVAL):
            current, busy = self._snapshot(psutil)
            now = time.monotonic()
            # Walking the process trees takes time too: divide by the interval measured.
            interval, previous_at = now - previous_at, now
            known = 0.0
            for name in sorted((set(current) | set(self.series)) - {REST}):
                delta = max(
                    0.0, current.get(name, 0.0) - previous.get(name, current.get(name, 0.0))
                )
                known += delta
                self.totals[name] += delta
                if name not in self.series:
                    self.series[name] = [0.0] * len(self.samples)
                self.series[name].append(round(delta / interval * 100, 1))
            rest = max(0.0, busy - previous_busy - known)
            self.totals[REST] += rest
            self.series[REST].append(round(rest / interval * 100, 1))
            self.samples.append(interval)
            self.seconds += interval
            previous, previous_busy = current, busy

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)

    def summary(self, shoppers: int) -> dict[str, Any]:
        if not self.available or self.seconds <= 0:
            return {"note": "psutil missing: no CPU figures"}
        ordered = sorted(self.totals, key=lambda n: -self.totals[n])
        components = {
            name: {
                "cpu_seconds": round(self.totals[name], 1),
                "mean_percent": round(self.totals[name] / self.seconds * 100, 1),
                "machine_share": round(self.totals[name] / (self.seconds * self.cores) * 100, 1),
                "ms_per_shopper": round(self.totals[name] * 1000 / max(shoppers, 1), 2),
            }
            for name in ordered
        }
        busy = sum(self.totals.values())
        return {
            "cores": self.cores,
            "interval_seconds": CPU_INTERVAL,
            "seconds": self.seconds,
            "machine_busy_percent": round(busy / (self.seconds * self.cores) * 100, 1),
            "components": components,
            "series": {name: self.series[name] for name in ordered},
            "note": "sampled every second while locust ran; 'rest of the machine' is everything "
            "else on this host (other sessions included)",
        }


# --- the load ---------------------------------------------------------------------------------


@dataclass
class LocustRun:
    command: list[str]
    exit_code: int
    seconds: float
    cpu_seconds: float
    records_path: Path


def run_locust(
    options: Options, target: Target, campaign_id: str, directory: Path, sampler: CpuSampler
) -> LocustRun:
    records_path = directory / "responses.jsonl"
    records_path.unlink(missing_ok=True)
    limit = math.ceil(options.arrival_seconds + options.give_up_after + 180)
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "--users",
        str(options.shoppers),
        "--spawn-rate",
        f"{options.spawn_rate:g}",
        "--host",
        target.claim_url,
        "--campaign",
        campaign_id,
        "--project",
        target.project,
        "--double-click-share",
        f"{options.double_click_share:g}",
        "--claim-attempts",
        str(options.claim_attempts),
        "--give-up-after",
        f"{options.give_up_after:g}",
        "--record",
        str(records_path),
        "--run-time",
        f"{limit}s",
        "--only-summary",
        "--html",
        str(directory / "locust.html"),
    ]
    if options.processes != 1:
        command += ["--processes", str(options.processes)]
    say(
        f"locust: {options.shoppers:,} shoppers, "
        + (
            "all at once"
            if options.pattern == "burst"
            else f"over {options.ramp_seconds:g} s ({options.spawn_rate:.0f}/s)"
        )
        + (f", {options.processes} processes" if options.processes != 1 else "")
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with (directory / "locust.log").open("w") as log:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        sampler.locust_pid = process.pid
        try:
            _follow(process, records_path, options.shoppers, started)
        except KeyboardInterrupt:
            process.send_signal(signal.SIGINT)
            process.wait(30)
            raise
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    seconds = time.monotonic() - started
    say(f"locust finished in {seconds:.1f} s (exit {process.returncode}, {cpu:.1f} CPU s)")
    return LocustRun(
        command=command,
        exit_code=process.returncode,
        seconds=round(seconds, 2),
        cpu_seconds=round(cpu, 2),
        records_path=records_path,
    )


def _follow(process: subprocess.Popen[bytes], records: Path, shoppers: int, started: float) -> None:
    """Wait for locust, printing progress read from the records file."""
    offset = 0
    lines = journeys = 0
    last_print = time.monotonic()
    while process.poll() is None:
        time.sleep(0.5)
        if records.exists():
            with records.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            cut = chunk.rfind(b"\n") + 1
            offset += cut
            lines += chunk.count(b"\n", 0, cut)
            journeys += chunk.count(b'"kind":"journey"', 0, cut)
        if time.monotonic() - last_print >= PROGRESS_EVERY:
            last_print = time.monotonic()
            say(
                f"  [{last_print - started:5.0f} s] {lines - journeys:,} responses, "
                f"{journeys:,}/{shoppers:,} shoppers done"
            )


# --- the truth and the audit ------------------------------------------------------------------


@dataclass
class Truth:
    audit: Any  # shared.audit.AuditReport
    codes_by_user: dict[str, list[str]]
    claimed_at: list[float]


def read_truth(target: Target, campaign_id: str) -> Truth:
    os.environ["FIRESTORE_EMULATOR_HOST"] = target.firestore_host
    os.environ["GOOGLE_CLOUD_PROJECT"] = target.project
    from google.cloud import firestore

    from shared.audit import audit_campaign
    from shared.firestore_db import claims_collection

    db = firestore.Client(project=target.project)
    audit = audit_campaign(db, campaign_id=campaign_id)
    codes_by_user: defaultdict[str, list[str]] = defaultdict(list)
    claimed_at: list[float] = []
    for snapshot in claims_collection(db, campaign_id).stream():
        data = snapshot.to_dict() or {}
        codes_by_user[str(data.get("user_id"))].append(str(data.get("code")))
        when = data.get("claimed_at")
        if isinstance(when, datetime):
            claimed_at.append(when.timestamp())
    return Truth(audit=audit, codes_by_user=dict(codes_by_user), claimed_at=sorted(claimed_at))


def settle_counters(
    target: Target, campaign_id: str, token: str, truth: Truth, seconds: float
) -> dict[str, Any]:
    """Poll the admin stats until `claimed` equals the documents' count, or `seconds` pass."""
    url = f"{target.admin_url}/v1/campaigns/{campaign_id}"
    started = time.monotonic()
    expected = truth.audit.claims
    stats: dict[str, Any] = {}
    history: list[tuple[float, int | None]] = []
    while True:
        try:
            status, body = http_json("GET", url, token=token)
        except OSError:
            status, body = 0, None
        if status == 200 and isinstance(body, dict) and isinstance(body.get("stats"), dict):
            stats = body["stats"]
        claimed = stats.get("claimed")
        elapsed = time.monotonic() - started
        if not history or history[-1][1] != claimed:
            history.append((round(elapsed, 2), claimed))
        if claimed == expected or elapsed >= seconds:
            break
        time.sleep(0.5)
    reconcile: Any = None
    with contextlib.suppress(OSError):
        _, reconcile = http_json("POST", f"{url}/reconcile", body={"repair": False}, token=token)
    return {
        "settled": stats.get("claimed") == expected,
        "seconds_to_settle": round(time.monotonic() - started, 2),
        "stats": stats,
        "documents": {"claims": expected, "codes_total": truth.audit.codes_total},
        "history": history,
        "reconcile_dry_run": reconcile,
    }


@dataclass
class Check:
    name: str
    title: str
    description: str
    examples: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, example: str, count: int = 1) -> None:
        self.count += count
        if len(self.examples) < 10:
            self.examples.append(example)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "count": self.count,
            "examples": self.examples,
        }


def audit_sale(
    records: Sequence[dict[str, Any]],
    truth: Truth,
    counters: Mapping[str, Any],
    *,
    shoppers: int,
    max_per_user: int,
) -> tuple[list[Check], dict[str, Any]]:
    """Every invariant of the sale, from the records, the documents and the counters; and the
    shoppers' outcomes."""
    db = truth.audit
    requests = [r for r in records if r.get("kind") != "journey"]
    journeys = {str(r["shopper"]): r for r in records if r.get("kind") == "journey"}
    claims = [r for r in requests if r.get("kind") in report.CLAIM_KINDS]
    answered: defaultdict[str, set[str]] = defaultdict(set)  # shopper → codes answered
    owners: defaultdict[str, set[str]] = defaultdict(set)  # code → shoppers answered it
    for r in claims:
        if r.get("status") in (200, 201) and r.get("code"):
            answered[str(r["shopper"])].add(str(r["code"]))
            owners[str(r["code"])].add(str(r["shopper"]))

    twice = Check(
        "codes_held_twice",
        "codes held by two shoppers",
        "a coupon in two claims in the database, or one code answered to two shoppers",
    )
    for coupon_id in db.codes_held_twice:
        twice.add(f"coupon {coupon_id} is in two claims")
    for code, users in sorted(owners.items()):
        if len(users) > 1:
            twice.add(f"code {code} answered to {', '.join(sorted(users))}")

    over = Check(
        "over_issued",
        "over-issue",
        "more claims than codes in the pool, or more distinct codes answered than exist",
    )
    extra = max(db.over_issued, len(owners) - db.codes_total, 0)
    if extra:
        over.add(
            f"{db.claims:,} claims and {len(owners):,} codes answered for a pool of "
            f"{db.codes_total:,}",
            extra,
        )

    limit = Check(
        "shoppers_over_limit",
        "shoppers holding more than allowed",
        f"a shopper with more than {max_per_user} code(s), in the database or in the answers",
    )
    heavy = set(db.shoppers_over_limit) | {u for u, c in answered.items() if len(c) > max_per_user}
    for user in sorted(heavy):
        in_db = truth.codes_by_user.get(user, [])
        limit.add(f"{user}: database {in_db}, answered {sorted(answered[user])}")

    sold_out = Check(
        "sold_out_while_codes_remained",
        "SOLD_OUT while codes remained",
        "a 410 SOLD_OUT answered while the pool still had a code: unassigned coupons after the "
        "sale, or a new code issued to a request sent after that 410 arrived",
    )
    sold_out_answers = [r for r in claims if r.get("status") == 410]
    new_code_starts = [float(r["t"]) for r in claims if r.get("status") == 201]
    latest_new_start = max(new_code_starts, default=-math.inf)
    for r in sold_out_answers:
        ended = float(r["t"]) + float(r["ms"]) / 1000
        if db.unassigned > 0:
            sold_out.add(
                f"{r['shopper']} told SOLD_OUT; {db.unassigned:,} coupons are still unassigned"
            )
        elif ended < latest_new_start:
            sold_out.add(
                f"{r['shopper']} told SOLD_OUT at +{ended - float(claims[0]['t']):.3f} s; a "
                f"request sent {latest_new_start - ended:.3f} s later got a new code"
            )

    disagree = Check(
        "responses_disagree_with_db",
        "answers that disagree with the database",
        "a code answered (claim or claims/me) that the database does not give that shopper, or a "
        "code the database gives a shopper who was never answered it",
    )
    for user, codes in sorted(answered.items()):
        held = set(truth.codes_by_user.get(user, []))
        for code in sorted(codes - held):
            disagree.add(f"{user} was answered {code}; the database gives them {sorted(held)}")
    for r in requests:
        if r.get("kind") == "me" and r.get("status") == 200:
            user = str(r["shopper"])
            read = set(r.get("codes") or [])
            held = set(truth.codes_by_user.get(user, []))
            if read != held:
                disagree.add(f"{user} read back {sorted(read)}; the database has {sorted(held)}")
    for user, held_codes in sorted(truth.codes_by_user.items()):
        for code in sorted(set(held_codes) - answered.get(user, set())):
            outcome = journeys.get(user, {}).get("outcome", "not one of this run's shoppers")
            disagree.add(f"the database gives {code} to {user}, never answered it ({outcome})")

    unanswered = Check(
        "shoppers_without_answer",
        "shoppers never answered",
        "a shopper whose claim ended without a code or SOLD_OUT (gave up on retries, an error "
        "status, no response), or who never finished the journey",
    )
    outcomes = Counter(str(j.get("outcome")) for j in journeys.values())
    seen = {str(r["shopper"]) for r in records}
    unfinished = sorted(seen - set(journeys))
    never_seen = max(shoppers - len(seen), 0)
    if never_seen:
        unanswered.add(f"{never_seen:,} shoppers never sent a request", never_seen)
    for user in unfinished:
        unanswered.add(f"{user} never finished the journey (the run ended first)")
    if len(seen) > shoppers:
        unanswered.add(
            f"locust ran {len(seen):,} shoppers for {shoppers:,} asked (it restarted users)", 0
        )
    for user, journey in sorted(journeys.items()):
        if journey.get("outcome") not in ("code", "sold_out"):
            unanswered.add(
                f"{user}: {journey.get('outcome')} (last status {journey.get('status')}, "
                f"{journey.get('attempts')} attempts)"
            )

    counted = Check(
        "counters_disagree",
        "counters after they settle",
        "GET /v1/campaigns/{id} stats (sharded usage counters) against the documents, after "
        "polling until they match or the settle time ran out",
    )
    stats = counters.get("stats") or {}
    if stats.get("claimed") != db.claims:
        counted.add(
            f"stats.claimed {stats.get('claimed')} vs {db.claims:,} claim documents after "
            f"{counters.get('seconds_to_settle')} s"
        )
    if stats.get("codes_total") != db.codes_total:
        counted.add(f"stats.codes_total {stats.get('codes_total')} vs {db.codes_total:,} coupons")

    consistency = Check(
        "database_inconsistent",
        "claims and coupons disagree",
        "a claim whose coupon does not point back at it, or an assigned coupon without its claim",
    )
    for claim_id in db.claims_without_coupon:
        consistency.add(f"claim {claim_id} has no matching coupon")
    for coupon_id in db.coupons_without_claim:
        consistency.add(f"coupon {coupon_id} is assigned without a claim")

    doubles = [j for j in journeys.values() if j.get("double_click")]
    shoppers_summary = {
        "expected": shoppers,
        "seen": len(seen),
        "finished_journey": len(journeys),
        "got_a_code": outcomes.get("code", 0),
        "told_sold_out": outcomes.get("sold_out", 0),
        "error_answer": outcomes.get("error", 0),
        "no_answer": outcomes.get("unanswered", 0) + len(unfinished) + never_seen,
        "double_clickers": len(doubles),
        "double_click_same_code": sum(
            1 for j in doubles if j.get("double_code") and j.get("double_code") == j.get("code")
        ),
        "retried_at_least_once": sum(1 for j in journeys.values() if (j.get("attempts") or 0) > 1),
        "most_attempts": max((int(j.get("attempts") or 0) for j in journeys.values()), default=0),
    }
    checks = [twice, over, limit, sold_out, disagree, unanswered, counted, consistency]
    return checks, shoppers_summary


def targets(
    options: Options,
    figures: Mapping[str, Any],
    shoppers: Mapping[str, Any],
    truth: Truth,
    violations: int,
) -> list[dict[str, Any]]:
    expected_codes = min(options.codes, options.shoppers * options.max_per_user)
    answered = shoppers["got_a_code"] + shoppers["told_sold_out"]
    p95 = ((figures.get("latency_ms") or {}).get("claim") or {}).get("p95")
    sale = figures.get("sale_seconds")
    rows = [
        {
            "name": "every shopper answered",
            "goal": f"{options.shoppers:,}",
            "value": f"{answered:,}",
            "met": answered == options.shoppers,
        },
        {
            "name": "all codes issued",
            "goal": f"{expected_codes:,}",
            "value": f"{truth.audit.assigned:,}",
            "met": truth.audit.assigned == expected_codes,
        },
        {"name": "zero violations", "goal": "0", "value": str(violations), "met": violations == 0},
    ]
    if options.pattern == "ramp":
        rows.append(
            {
                "name": "claim latency p95 (every POST /claims response)",
                "goal": f"< {options.p95_target_ms:g} ms",
                "value": f"{p95} ms",
                "met": p95 is not None and p95 < options.p95_target_ms,
            }
        )
    else:
        rows.append(
            {
                "name": "whole sale answered (first request → last shopper's answer)",
                "goal": f"< {options.sale_target_seconds:g} s",
                "value": f"{sale} s",
                "met": sale is not None and sale < options.sale_target_seconds,
            }
        )
    return rows


# --- main -------------------------------------------------------------------------------------


@contextlib.contextmanager
def _stack(options: Options, log_dir: Path) -> Iterator[tuple[Target, StartedStack | None]]:
    if options.target_claim:
        yield running_target(options), None
        return
    stack = StartedStack(options, log_dir)
    try:
        yield stack.start(), stack
    finally:
        stack.stop()


def _print_summary(summary: Mapping[str, Any], out: IO[str]) -> None:
    figures = summary.get("figures") or {}
    shoppers = summary.get("shoppers") or {}
    latency = figures.get("latency_ms") or {}
    claim = latency.get("claim") or {}
    answer = latency.get("time_to_answer") or {}
    lines = [
        "",
        f"shoppers {shoppers.get('expected', 0):,}: code {shoppers.get('got_a_code', 0):,}, "
        f"SOLD_OUT {shoppers.get('told_sold_out', 0):,}, error {shoppers.get('error_answer', 0):,},"
        f" no answer {shoppers.get('no_answer', 0):,}",
        f"requests {figures.get('requests', 0):,} (claim answers {figures.get('claim_status')}), "
        f"mean {figures.get('mean_rps')}/s, peak {figures.get('peak_rps')}/s",
        f"claim latency ms: p50 {claim.get('p50')} p95 {claim.get('p95')} p99 {claim.get('p99')} "
        f"max {claim.get('max')}; time to answer p95 {answer.get('p95')} ms",
        f"sale answered in {figures.get('sale_seconds')} s; last new code at "
        f"+{figures.get('last_new_code_seconds')} s",
    ]
    cpu = summary.get("cpu") or {}
    if cpu.get("components"):
        parts = [
            f"{name} {c['mean_percent']:.0f}%"
            for name, c in cpu["components"].items()
            if c["mean_percent"] >= 1
        ]
        lines.append(
            f"CPU (100% = one core, {cpu.get('cores')} cores, machine busy "
            f"{cpu.get('machine_busy_percent')}%): " + ", ".join(parts)
        )
    lines.append("audit:")
    for check in summary.get("audit") or []:
        mark = "ok  " if not check["count"] else "FAIL"
        lines.append(f"  {mark} {check['title']}: {check['count']:,}")
        for example in check["examples"][:3]:
            lines.append(f"         {example}")
    lines.append("targets:")
    for target in summary.get("targets") or []:
        mark = "met " if target["met"] else "MISS"
        lines.append(f"  {mark} {target['name']}: {target['value']} (goal {target['goal']})")
    out.write("\n".join(lines) + "\n")
    out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    directory = options.report_dir
    directory.mkdir(parents=True, exist_ok=True)
    started_at = datetime.now(UTC)
    cores = os.cpu_count() or 1
    try:
        with _stack(options, directory / "logs") as (target, stack):
            token = emulator_id_token(ADMIN_USER, project=target.project, admin=True)
            campaign_id = create_campaign(options, target, token)
            say(f"campaign {campaign_id} created through admin_api")
            intake = load_pool(options, target, campaign_id, token, directory)
            wait_until_claimable(target, campaign_id, options.codes)
            if options.prepare_only:
                say("run the shoppers in locust's web UI with:")
                say(
                    f"  .venv/bin/locust -f scripts/locustfile.py --host {target.claim_url} "
                    f"--campaign {campaign_id} --project {target.project}"
                )
                return EXIT_OK
            sampler = CpuSampler(
                stack_pid=target.stack_pid, stack_ports=target.ports(), cores=cores
            )
            sampler.start()
            try:
                run = run_locust(options, target, campaign_id, directory, sampler)
            finally:
                sampler.stop()
            if stack is not None and (reason := stack.died()) is not None:
                raise SetupError(f"the local stack stopped during the sale ({reason})")
            records = report.load_records(run.records_path)
            if not records:
                raise SetupError(
                    f"locust recorded nothing (exit {run.exit_code}); see "
                    f"{directory / 'locust.log'}"
                )
            say("auditing: reading the campaign back from Firestore …")
            truth = read_truth(target, campaign_id)
            counters = settle_counters(target, campaign_id, token, truth, options.settle_seconds)
    except SetupError as exc:
        sys.stderr.write(f"loadtest: {exc}\n")
        return EXIT_SETUP
    except KeyboardInterrupt:
        sys.stderr.write("loadtest: interrupted\n")
        return 130

    figures = report.analyse(
        records, claimed_at=truth.claimed_at, codes_total=truth.audit.codes_total
    )
    checks, shoppers = audit_sale(
        records,
        truth,
        counters,
        shoppers=options.shoppers,
        max_per_user=options.max_per_user,
    )
    violations = sum(c.count for c in checks)
    audit = truth.audit
    summary: dict[str, Any] = {
        "schema": 1,
        "started_at": started_at.isoformat(timespec="seconds"),
        "host": f"{os.uname().nodename}, {cores} cores",
        "scenario": {
            "campaign_id": campaign_id,
            "shoppers": options.shoppers,
            "codes": options.codes,
            "pattern": options.pattern,
            "ramp_seconds": options.ramp_seconds if options.pattern == "ramp" else None,
            "spawn_rate": options.spawn_rate,
            "double_click_share": options.double_click_share,
            "max_per_user": options.max_per_user,
            "waiting_room": options.waiting_room,
            "locust_processes": options.processes,
            "locust_user_class": "FastHttpUser",
            "claim_url": target.claim_url,
            "admin_url": target.admin_url,
            "stack": "started by loadtest" if target.started else "already running",
            **target.settings,
        },
        "intake": intake,
        "violations": violations,
        "ok": violations == 0,
        "audit": [c.as_dict() for c in checks],
        "database": {
            "codes_total": audit.codes_total,
            "assigned": audit.assigned,
            "unassigned": audit.unassigned,
            "claims": audit.claims,
            "shoppers_holding_codes": audit.shoppers,
            "max_per_user": audit.max_per_user,
        },
        "shoppers": shoppers,
        "counters": counters,
        "figures": figures,
        "cpu": {**sampler.summary(options.shoppers), "locust_cpu_seconds_rusage": run.cpu_seconds},
        "locust": {
            "exit_code": run.exit_code,
            "seconds": run.seconds,
            "command": run.command,
        },
        "files": {
            "responses (JSONL)": "responses.jsonl",
            "locust's own report": "locust.html",
            "locust log": "locust.log",
            **({"stack logs": "logs/"} if target.started else {}),
        },
    }
    summary["targets"] = targets(options, figures, shoppers, truth, violations)
    json_path, html_path = report.write_report(summary, directory)
    _print_summary(summary, sys.stdout)
    say(f"report: {html_path}")
    say(f"summary: {json_path}")
    if violations:
        return EXIT_VIOLATIONS
    if options.require_targets and not all(t["met"] for t in summary["targets"]):
        return EXIT_TARGETS
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
