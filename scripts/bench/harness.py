"""What every benchmark does the same way: its command line, logging, the emulators it starts,
timing a phase (wall time, CPU time of this process and of the emulator, the machine's load),
threads that time each call, the printed table and the JSON file of figures."""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import logging
import math
import os
import pstats
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any, Generic, Self, TypeVar

from google.cloud import firestore

from devkit import http, provenance
from devkit.codes import add_codes
from devkit.emulators import RunningEmulator, free_port, start_auth, start_firestore, start_storage
from devkit.measure import cpu_seconds
from shared.campaigns import service as campaign_service
from shared.campaigns.models import CampaignCreate
from shared.clock import utcnow
from shared.events.models import CLAIMED_BATCH

PROJECT = "demo-codedrop-bench"
BUCKET = "codedrop-imports"
# The emulator's own reset gives up after 10 s; emptying a database of a million documents on a
# busy machine takes longer.
RESET_TIMEOUT = 600.0
PROGRESS_EVERY = 5.0

log = logging.getLogger("bench")
# The code a run measures is the code it started with, whatever the checkout holds by its end.
_COMMIT_AT_START = provenance.commit()

T = TypeVar("T")
R = TypeVar("R")


# --- command line, logging, signals --------------------------------------------------------------


# flag, type (None: a switch), default, help
Option = tuple[str, Callable[[str], Any] | None, Any, str]

# For a benchmark that lists it: run_with_emulators then uses this emulator instead of its own.
FIRESTORE_OPTION: Option = (
    "--firestore",
    str,
    None,
    "HOST:PORT of a running Firestore emulator to use instead of starting one (it may be emptied)",
)


def parser(
    doc: str | None, *, prog: str, options: Sequence[Option] = ()
) -> argparse.ArgumentParser:
    """A benchmark's parser: the module docstring as help, its options, --json and -v."""
    created = argparse.ArgumentParser(
        prog=f"python -m scripts.bench.{prog}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for flag, kind, default, text in options:
        if kind is None:
            created.add_argument(flag, action="store_true", help=text)
        else:
            shown = f"{text} (default %(default)s)" if default is not None else text
            created.add_argument(flag, type=kind, default=default, help=shown)
    created.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    created.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    return created


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def chosen(
    parser: argparse.ArgumentParser, flag: str, text: str, choices: Sequence[str]
) -> list[str]:
    """A comma-separated list of some of `choices`, given as `flag`, in the order given; the
    parser's usage error when it names one not in `choices`, or none."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in choices]
    if unknown or not names:
        parser.error(f"{flag}: unknown {unknown}; choose from {', '.join(choices)}")
    return names


def setup_logging(level: int, *, role: str = "%(processName)s") -> None:
    """Progress on stderr (the table goes to stdout); the client libraries kept quiet."""
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format=f"%(asctime)s {role} %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    for noisy in ("google", "grpc", "urllib3", "werkzeug"):
        logging.getLogger(noisy).setLevel(max(level, logging.INFO))


def level(verbose: bool) -> int:
    return logging.DEBUG if verbose else logging.INFO


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the emulators are stopped on the way out."""
    signal.signal(signal.SIGTERM, _interrupt)


# --- the emulators -------------------------------------------------------------------------------


def run_with_emulators(
    args: argparse.Namespace,
    bench: Callable[[argparse.Namespace, Emulators], int],
    *,
    storage: bool = False,
    auth: bool = False,
) -> int:
    """A benchmark's main: logging, SIGTERM as an interrupt, its own emulators (started before
    anything of shared is used, so worker processes inherit their environment; a running
    Firestore emulator instead if the benchmark has `--firestore`), exit 130 when interrupted
    (a benchmark that reports the phases that finished returns it: the logs are then kept)."""
    setup_logging(level(args.verbose))
    stop_on_sigterm()
    try:
        given = getattr(args, "firestore", None)
        with Emulators(firestore=given, storage=storage, auth=auth) as emulators:
            code = bench(args, emulators)
            emulators.keep_logs = code == 130
            return code
    except KeyboardInterrupt:
        log.warning("interrupted")
        return 130


def forget_services() -> None:
    """Settings and the service container are built once per process: from this environment."""
    from shared import container, settings

    settings.get_settings.cache_clear()
    container.instance_services.cache_clear()


class Emulators:
    """The emulators a benchmark runs on, each on a free port in its own process group, and the
    environment that points this process (and the processes it starts) at them.

    `firestore`: HOST:PORT of a running emulator to use instead of starting one; `auth`: the
    Firebase Auth emulator too, for a benchmark whose callers sign in (the functions check
    each account there). The logs stay in a temporary folder that is removed unless the
    benchmark failed.
    """

    def __init__(
        self, *, firestore: str | None = None, storage: bool = False, auth: bool = False
    ) -> None:
        self.project = PROJECT
        self._given = firestore
        self._with_storage = storage
        self._with_auth = auth
        self.log_dir = Path(tempfile.mkdtemp(prefix="codedrop-bench-"))
        self.firestore: RunningEmulator | None = None
        self.storage: RunningEmulator | None = None
        self.auth: RunningEmulator | None = None
        self._restarts = 0
        self.keep_logs = False

    @property
    def host_port(self) -> str:
        if self._given:
            return self._given
        if self.firestore is None:
            raise RuntimeError("the Firestore emulator is not started")
        return self.firestore.host_port

    @property
    def firestore_pid(self) -> int | None:
        """The emulator's process (None for one this benchmark did not start)."""
        return self.firestore.process.pid if self.firestore is not None else None

    def __enter__(self) -> Self:
        try:
            if self._with_storage:
                self.storage = start_storage(port=free_port(), bucket=BUCKET, log_dir=self.log_dir)
                os.environ["STORAGE_EMULATOR_HOST"] = f"http://{self.storage.host_port}"
                os.environ["CODEDROP_IMPORTS_BUCKET"] = BUCKET
            if self._with_auth:
                self.auth = start_auth(port=free_port(), project=self.project, log_dir=self.log_dir)
                os.environ["FIREBASE_AUTH_EMULATOR_HOST"] = self.auth.host_port
            if not self._given:
                self.firestore = start_firestore(
                    port=free_port(), project=self.project, log_dir=self.log_dir
                )
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        os.environ["FIRESTORE_EMULATOR_HOST"] = self.host_port
        os.environ["GOOGLE_CLOUD_PROJECT"] = self.project
        forget_services()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for emulator in (self.firestore, self.storage, self.auth):
            if emulator is None:
                continue
            try:
                emulator.stop()
            except Exception:
                log.exception("stopping the %s emulator failed", emulator.name)
        forget_services()
        failed = isinstance(exc_info[1], Exception)  # not when interrupted
        if failed or self.keep_logs:
            log.warning("emulator logs kept in %s", self.log_dir)
        else:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def reset(self) -> None:
        """Delete every document of the benchmark's project."""
        url = (
            f"http://{self.host_port}/emulator/v1/projects/{self.project}"
            "/databases/(default)/documents"
        )
        started = time.perf_counter()
        response = http.request("DELETE", url, timeout=RESET_TIMEOUT)
        if not response.ok:
            raise RuntimeError(f"DELETE {url} answered {response.status_code}")
        log.info("Firestore emulator emptied in %.1f s", time.perf_counter() - started)

    def restart_firestore(self) -> None:
        """A new emulator on the same port (the clients reconnect)."""
        if self.firestore is None:
            raise RuntimeError("only an emulator this benchmark started can be restarted")
        port = self.firestore.port
        self.firestore.stop()
        self._restarts += 1
        self.firestore = start_firestore(
            port=port, project=self.project, log_dir=self.log_dir / f"firestore-{self._restarts}"
        )


# --- timing --------------------------------------------------------------------------------------


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def shown_load(load: Sequence[float] | None = None) -> str:
    """The load average as `1.02 0.87 0.60`: other work on the machine skews every figure."""
    return " ".join(f"{x:.2f}" for x in (load if load is not None else load_average()))


@dataclass
class Phase:
    """Wall time, CPU time of this process and of the emulator, and the 1-minute load average
    before and after: what `timed()` measured."""

    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    emulator_cpu_seconds: float | None = None
    load: tuple[float, float] = (0.0, 0.0)


@contextlib.contextmanager
def timed(emulator_pid: int | None = None) -> Iterator[Phase]:
    phase = Phase()
    load_before = load_average()[0]
    emulator_before = cpu_seconds(emulator_pid) if emulator_pid is not None else None
    cpu_before = time.process_time()
    began = time.perf_counter()
    try:
        yield phase
    finally:
        phase.wall_seconds = time.perf_counter() - began
        phase.cpu_seconds = time.process_time() - cpu_before
        emulator_after = cpu_seconds(emulator_pid) if emulator_pid is not None else None
        if emulator_before is not None and emulator_after is not None:
            phase.emulator_cpu_seconds = emulator_after - emulator_before
        phase.load = (load_before, load_average()[0])


@contextlib.contextmanager
def profiled(path: Path | None) -> Iterator[None]:
    """cProfile the block in every Python thread it starts (a pool's committers too; cProfile
    alone sees one thread), the profiles merged into `path` (pstats). No path: no profiling."""
    if path is None:
        yield
        return
    profiles: list[cProfile.Profile] = []
    original = threading.Thread.run

    def run(thread: threading.Thread) -> None:
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.enable()
        try:
            original(thread)
        finally:
            profile.disable()

    threading.Thread.run = run  # type: ignore[method-assign,assignment]
    main = cProfile.Profile()
    main.enable()
    try:
        yield
    finally:
        main.disable()
        threading.Thread.run = original  # type: ignore[method-assign]
        stats = pstats.Stats(main)
        for profile in profiles:
            profile.disable()  # a thread still running (a daemon) stops being profiled here
            stats.add(profile)
        stats.dump_stats(path)
        log.info("profile of %d threads written to %s", len(profiles) + 1, path)


@dataclass(frozen=True, slots=True)
class Timed(Generic[T, R]):
    """One call: what it was given, what it returned, when it started and ended (perf_counter:
    CLOCK_MONOTONIC on Linux, one clock for every process of the machine)."""

    item: T
    result: R
    started: float
    ended: float

    @property
    def ms(self) -> float:
        return (self.ended - self.started) * 1000


@dataclass
class TimedCalls(Generic[T, R]):
    """`threads` threads take the items in order and time each call, until none is left or the
    cap given to `go` has passed (a call already running then finishes).

    Every thread builds its own call with `make_call` (a client that is not thread-safe) before
    `go` releases them all at once. A call that raises is answered by `on_error(exception)`.
    """

    items: Iterable[T]
    make_call: Callable[[], Callable[[T], R]]
    threads: int
    on_error: Callable[[Exception], R]
    name: str = "caller"
    answers: list[Timed[T, R]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self._queue: deque[T] = deque(self.items)
        self._total = len(self._queue)
        self._go = threading.Event()
        self._lock = threading.Lock()
        self._ready = 0
        self._setup_errors: list[str] = []
        self._stop_at = math.inf
        self.stop_at: float | None = None  # the cap given to go(), for calls that heed it
        self._threads = [
            threading.Thread(target=self._loop, name=f"{self.name}-{i}", daemon=True)
            for i in range(self.threads)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def not_issued(self) -> int:
        return len(self._queue)

    def go(self, stop_at: float | None = None) -> None:
        """Release the threads once each has built its call; `stop_at` is a perf_counter time
        after which no new call starts."""
        while True:
            with self._lock:
                if self._setup_errors:
                    self._stop_at = -math.inf
                    self._go.set()
                    raise RuntimeError(f"{self.name}: {'; '.join(self._setup_errors)}")
                if self._ready == self.threads:
                    break
            time.sleep(0.01)
        self.stop_at = stop_at
        self._stop_at = stop_at if stop_at is not None else math.inf
        self._go.set()

    def _loop(self) -> None:
        try:
            call = self.make_call()
        except Exception as exc:  # noqa: BLE001 (reported by go(), which raises)
            with self._lock:
                self._setup_errors.append(f"building the call: {exc!r}")
            return
        with self._lock:
            self._ready += 1
        self._go.wait()
        while time.perf_counter() < self._stop_at:
            try:
                item = self._queue.popleft()
            except IndexError:
                return
            started = time.perf_counter()
            try:
                result = call(item)
            except Exception as exc:  # noqa: BLE001 (on_error makes it an answer)
                result = self.on_error(exc)
            # At once, not when the thread ends: a capped run reports what answered in time.
            with self._lock:
                self.answers.append(Timed(item, result, started, time.perf_counter()))

    def wait(
        self, *, until: float | None = None, progress: Callable[[int], None] | None = None
    ) -> bool:
        """Join the threads (until `until`, a perf_counter time); True if all finished.
        `progress` is called every few seconds with the number of items issued so far."""
        next_progress = time.perf_counter() + PROGRESS_EVERY
        while alive := [t for t in self._threads if t.is_alive()]:
            now = time.perf_counter()
            if until is not None and now >= until:
                return False
            if progress is not None and now >= next_progress:
                progress(self._total - self.not_issued)
                next_progress = now + PROGRESS_EVERY
            limit = min(next_progress, until) if until is not None else next_progress
            alive[0].join(timeout=max(0.01, min(0.5, limit - now)))
        return True

    def still_running(self) -> int:
        return sum(1 for t in self._threads if t.is_alive())


def wall_seconds(answers: Sequence[Timed[Any, Any]]) -> float:
    """First call started to last call ended."""
    if not answers:
        return 0.0
    return max(a.ended for a in answers) - min(a.started for a in answers)


# --- output --------------------------------------------------------------------------------------


def fmt(value: Any, digits: int = 1) -> str:
    """A figure for the table: thousands separated, None as "-", booleans as yes/no."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if math.isinf(value):
            return "inf"
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(header: Sequence[str], rows: Iterable[Sequence[str] | str]) -> str:
    """Aligned columns: the first left-aligned, the others right-aligned; a row given as a
    plain string is a section title printed as `[title]`."""
    listed = list(rows)
    cells = [r for r in listed if not isinstance(r, str)]
    widths = [max(len(row[i]) for row in [header, *cells]) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    out = [line(header), "  ".join("-" * w for w in widths)]
    out += [f"[{row}]" if isinstance(row, str) else line(row) for row in listed]
    return "\n".join(out)


Row = tuple[str, Callable[[Mapping[str, Any]], str]]


def compare(columns: Mapping[str, Mapping[str, Any]], rows: Sequence[Row | str]) -> str:
    """One column of figures per design, one line per row: (label, figures -> cell); a design
    without figures (not run) shows "skipped"."""
    return table(
        ["", *columns],
        [
            row
            if isinstance(row, str)
            else [row[0], *(row[1](f) if f else "skipped" for f in columns.values())]
            for row in rows
        ],
    )


def _strict(value: Any) -> Any:
    """Strict JSON: NaN and infinities (no data) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def write_json(path: Path | None, document: Mapping[str, Any]) -> None:
    """The figures, with when, on which commit and on what machine they were measured, to
    `path` (if given). docs/benchmarks.md is generated from these files (scripts/bench/report)."""
    if path is None:
        return
    stamped = {
        **document,
        "command": _command_line(),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _COMMIT_AT_START,
        "machine": provenance.machine(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_strict(stamped), indent=2, default=str, allow_nan=False) + "\n")
    log.info("figures written to %s", path)


def _command_line() -> str:
    """How this benchmark was run, as a command to copy."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    program = f"python -m {spec.name}" if spec is not None else Path(sys.argv[0]).name
    return " ".join([program, *sys.argv[1:]])


# --- set-up --------------------------------------------------------------------------------------


class MemoryPublisher:
    """Pub/Sub's publisher, in memory: every event is kept (a batch message's claims as the
    events they are), every publish succeeds."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def publish(self, topic: str, data: bytes, **attributes: str) -> Future[str]:
        message = json.loads(data)
        carried = message["claims"] if message.get("type") == CLAIMED_BATCH else [message]
        with self._lock:
            self.events.extend(carried)
        future: Future[str] = Future()
        future.set_result(attributes.get("event_id", ""))
        return future

    def publish_now(self, topic: str, data: bytes, *, timeout: float, **attributes: str) -> None:
        self.publish(topic, data, **attributes)


def create_campaign(
    db: firestore.Client, *, campaign_id: str, title: str, codes: Iterable[str] = (), **fields: Any
) -> str:
    """An active campaign (started an hour ago, open for a day) holding `codes`."""
    now = utcnow()
    campaign_service.create_campaign(
        db,
        data=CampaignCreate(
            campaign_id=campaign_id,
            title=title,
            starts_at=now - timedelta(hours=1),
            ends_at=now + timedelta(days=1),
            **fields,
        ),
        now=now,
    )
    started = time.perf_counter()
    written = add_codes(db, campaign_id=campaign_id, codes=codes, now=now)
    if written:
        log.info(
            "campaign %s: %d codes written in %.1f s",
            campaign_id,
            written,
            time.perf_counter() - started,
        )
    return campaign_id
