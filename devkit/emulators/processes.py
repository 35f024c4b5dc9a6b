"""Child processes in process groups of their own, as the emulators, the local stack and the
tests run them: started with their output in a log file, waited for until they answer, stopped
as a whole group (SIGTERM, then SIGKILL), and the stop signals turned into an exception."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import psutil

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 30
READY_POLL_INTERVAL = 0.1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class ProcessFailed(RuntimeError):
    """The process exited, did not answer in time, or survived SIGKILL; the message says which,
    with the last lines of its log."""


class StopRequestedError(Exception):
    """Raised from the signal handler so that cleanup runs however far start-up got."""


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll `condition` until it holds (True) or `timeout` seconds passed (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


def group_exists(pgid: int) -> bool:
    """Whether the group has any member, zombies included."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or the id now belongs to someone else
        return False
    return True


def group_running(pgid: int) -> bool:
    """Whether the group has a member that is not a zombie."""
    for process in psutil.process_iter(["status"]):
        if process.info["status"] in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            continue
        try:
            if os.getpgid(process.pid) == pgid:
                return True
        except ProcessLookupError:  # exited while we looked
            continue
    return False


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send `sig` to the group; False if the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def port_taken(host: str, port: int) -> OSError | None:
    """Why `host:port` cannot be listened on (something else holds it), or None if it is free.

    SO_REUSEADDR ignores TIME_WAIT leftovers of a just-stopped server but still fails when
    something is listening: whatever listens would answer our readiness probes for us."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc
    return None


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


def spawn(
    command: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str],
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start `command` as the leader of a new process group, its output going to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log.debug("command: %s", " ".join(command))
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            list(command),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
        )


@dataclass(eq=False)
class GroupProcess:
    """A process started by spawn(), with every process it started (its group)."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    _signalled: bool = field(default=False, init=False, repr=False)

    @property
    def label(self) -> str:
        """What messages call it."""
        return self.name

    @property
    def pgid(self) -> int:
        """The process group id; start_new_session makes it the leader's pid."""
        return self.process.pid

    def group_alive(self) -> bool:
        """Whether any process of the group is still running (zombies aside)."""
        return group_running(self.pgid)

    def tail(self) -> str:
        return tail(self.log_path)

    def wait_ready(self, answers: Callable[[], bool], *, where: str, timeout: float) -> float:
        """Poll `answers` until it holds; the seconds it took. ProcessFailed, with the log's
        last lines, if the process exits first or `timeout` passes."""
        started = time.monotonic()
        deadline = started + timeout
        while not answers():
            code = self.process.poll()
            if code is not None:
                raise ProcessFailed(
                    f"{self.label} exited with code {code} before it was ready; last lines of "
                    f"{self.log_path}:\n{self.tail()}"
                )
            if time.monotonic() >= deadline:
                raise ProcessFailed(
                    f"{self.label} not ready on {where} after {timeout:.0f} s; last lines of "
                    f"{self.log_path}:\n{self.tail()}"
                )
            time.sleep(READY_POLL_INTERVAL)
        return time.monotonic() - started

    def terminate(self) -> None:
        """SIGTERM to the whole group, once (a launcher may not exec its program, so the
        leader's pid need not be the one that matters). The group cannot be someone else's
        while its leader is not reaped or any member exists, exactly when killpg reaches it."""
        if not self._signalled:
            self._signalled = True
            signal_group(self.pgid, signal.SIGTERM)

    def stop(self, timeout: float = 10.0) -> None:
        """terminate(), wait up to `timeout` for the group to go, then SIGKILL what is left."""
        self.terminate()
        if not self._wait_stopped(timeout):
            log.warning("%s did not stop within %.0f s; killing it", self.label, timeout)
            signal_group(self.pgid, signal.SIGKILL)
            if not self._wait_stopped(5):
                raise ProcessFailed(f"{self.label} (process group {self.pgid}) survived SIGKILL")
        self.process.wait()
        # Orphaned members (a program behind a launcher that died first) stay zombies until
        # init reaps them; wait for that so the group id is really gone when we return.
        if not wait_for(lambda: not group_exists(self.pgid), 5):
            log.debug("process group %d still has unreaped zombies", self.pgid)

    def _wait_stopped(self, timeout: float) -> bool:
        # poll() reaps the leader, which would otherwise stay a zombie member of its own group.
        return wait_for(
            lambda: self.process.poll() is not None and not group_running(self.pgid), timeout
        )


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise StopRequestedError(signal.Signals(signum).name)


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside the block, SIGINT, SIGTERM and SIGHUP raise StopRequestedError. Leaving it, they
    are ignored: a second Ctrl-C must not leave processes half-stopped by the cleanup that
    follows (each stop is bounded anyway)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise_stop)
    try:
        yield
    finally:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
