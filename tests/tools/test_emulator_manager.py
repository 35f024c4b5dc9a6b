"""Tests for devkit/emulators/: starting, readiness, reset and stopping of the local emulators."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devkit import http
from devkit.emulators import (
    EmulatorFailed,
    EmulatorStack,
    EmulatorUnavailable,
    RunningEmulator,
    check_auth_prerequisites,
    check_prerequisites,
    free_port,
    manager,
    processes,
    reset_firestore,
    reset_pubsub,
    start_auth,
    start_firestore,
    start_pubsub,
    start_storage,
)
from devkit.emulators.__main__ import main

PROJECT = "demo-test"
BUCKET = "codedrop-imports-test"
REPO = Path(__file__).resolve().parents[2]


# A missing Java or emulator fails these tests with the install hint (conftest.py): a suite
# that silently skips its emulator tests would pass on a machine that cannot run the service.
needs_emulators = pytest.mark.usefixtures("emulator_prerequisites")


def _http(method: str, url: str, body: object | None = None) -> tuple[int, bytes]:
    response = http.request(method, url, json=body, timeout=10)
    return response.status_code, response.content


def _group_gone(emulator: RunningEmulator) -> bool:
    try:
        os.killpg(emulator.pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture
def started() -> Iterator[list[RunningEmulator]]:
    """Emulators a test started; stopped afterwards even if the test failed."""
    emulators: list[RunningEmulator] = []
    yield emulators
    for emulator in emulators:
        emulator.stop()


def _timed(start: Callable[[], RunningEmulator]) -> tuple[RunningEmulator, float]:
    began = time.monotonic()
    emulator = start()
    return emulator, time.monotonic() - began


def _stop_and_check(emulator: RunningEmulator, ready: float, port: int) -> None:
    """Stop it; its whole group must be gone and its port free. The timings are shown with `-s`
    (the brief asks for these numbers)."""
    began = time.monotonic()
    emulator.stop()
    stopped = time.monotonic() - began
    sys.stderr.write(f"\n{emulator.name}: ready in {ready:.2f} s, stopped in {stopped:.2f} s\n")
    assert _group_gone(emulator)
    assert _port_free(port)


# --- the real emulators -----------------------------------------------------------------------


@pytest.mark.emulator
@needs_emulators
def test_firestore_starts_resets_and_stops(tmp_path: Path, started: list[RunningEmulator]) -> None:
    port = free_port()
    emulator, ready = _timed(
        lambda: start_firestore(port=port, project=PROJECT, log_dir=tmp_path, timeout=60)
    )
    started.append(emulator)
    assert emulator.host_port == f"127.0.0.1:{port}"
    assert _http("GET", f"http://{emulator.host_port}/")[1].strip() == b"Ok"

    docs = f"http://{emulator.host_port}/v1/projects/{PROJECT}/databases/(default)/documents"
    status, _ = _http(
        "POST", f"{docs}/things?documentId=a", {"fields": {"x": {"integerValue": "1"}}}
    )
    assert status == 200
    assert _http("GET", f"{docs}/things/a")[0] == 200

    reset_firestore(host_port=emulator.host_port, project=PROJECT)
    assert _http("GET", f"{docs}/things/a")[0] == 404

    _stop_and_check(emulator, ready, port)
    emulator.stop()  # a second stop is harmless
    assert emulator.log_path.read_text()


@pytest.mark.emulator
@needs_emulators
def test_pubsub_starts_resets_and_stops(tmp_path: Path, started: list[RunningEmulator]) -> None:
    port = free_port()
    emulator, ready = _timed(lambda: start_pubsub(port=port, log_dir=tmp_path, timeout=60))
    started.append(emulator)
    base = f"http://{emulator.host_port}/v1/projects/{PROJECT}"
    assert _http("GET", f"http://{emulator.host_port}/")[1].strip() == b"Ok"

    assert _http("PUT", f"{base}/topics/topic-a", {})[0] == 200
    assert b"topic-a" in _http("GET", f"{base}/topics")[1]

    reset_pubsub(host_port=emulator.host_port)
    assert b"topic-a" not in _http("GET", f"{base}/topics")[1]

    _stop_and_check(emulator, ready, port)


@pytest.mark.emulator
@needs_emulators
def test_storage_starts_with_bucket_and_stops(
    tmp_path: Path, started: list[RunningEmulator]
) -> None:
    port = free_port()
    emulator, ready = _timed(
        lambda: start_storage(port=port, bucket=BUCKET, log_dir=tmp_path, timeout=60)
    )
    started.append(emulator)
    base = f"http://{emulator.host_port}"
    assert _http("GET", f"{base}/storage/v1/b/{BUCKET}")[0] == 200

    _stop_and_check(emulator, ready, port)


@pytest.mark.emulator
@needs_emulators
def test_stack_exposes_env_and_stops_everything(tmp_path: Path) -> None:
    with EmulatorStack(project=PROJECT, bucket=BUCKET, log_dir=tmp_path) as stack:
        env = stack.env()
        assert set(env) == {
            "FIRESTORE_EMULATOR_HOST",
            "PUBSUB_EMULATOR_HOST",
            "STORAGE_EMULATOR_HOST",
        }
        assert env["STORAGE_EMULATOR_HOST"].startswith("http://127.0.0.1:")
        assert not env["FIRESTORE_EMULATOR_HOST"].startswith("http")
        assert _http("GET", f"http://{env['PUBSUB_EMULATOR_HOST']}/")[1].strip() == b"Ok"
        stack.reset()
        emulators = [stack.firestore, stack.pubsub, stack.storage]
    for emulator in emulators:
        assert emulator is not None
        assert _group_gone(emulator)


@pytest.mark.emulator
@needs_emulators
def test_stack_stops_the_started_ones_when_one_fails(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        stack = EmulatorStack(storage_port=taken.getsockname()[1], log_dir=tmp_path)
        with pytest.raises(EmulatorFailed, match="already in use"), stack:
            pytest.fail("the stack must not start")
    assert stack.firestore is not None
    assert stack.pubsub is not None
    assert _group_gone(stack.firestore)
    assert _group_gone(stack.pubsub)


@pytest.mark.long
@pytest.mark.emulator
@needs_emulators
def test_cli_start_prints_exports_and_stops_on_sigterm(tmp_path: Path) -> None:
    ports = [free_port(), free_port(), free_port()]
    stderr_path = tmp_path / "cli.err"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "devkit.emulators",
                "start",
                "--firestore-port",
                str(ports[0]),
                "--pubsub-port",
                str(ports[1]),
                "--storage-port",
                str(ports[2]),
                "--log-dir",
                str(tmp_path),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline().decode().strip() for _ in range(3)]
        assert lines == [
            f"export FIRESTORE_EMULATOR_HOST=127.0.0.1:{ports[0]}",
            f"export PUBSUB_EMULATOR_HOST=127.0.0.1:{ports[1]}",
            f"export STORAGE_EMULATOR_HOST=http://127.0.0.1:{ports[2]}",
        ], stderr_path.read_text(errors="replace")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, stderr_path.read_text(errors="replace")
    finally:
        # The CLI's emulators live in process groups of their own: only the CLI can stop them,
        # so it gets SIGTERM and time before SIGKILL would leave them behind.
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    # The CLI's emulators ran in groups of their own: check their ports, not its group.
    for port in ports:
        assert _port_free(port)


# --- failures and prerequisites, with fake launchers ------------------------------------------


def _fake_sdk(root: Path, pubsub_script: str) -> Path:
    """A Cloud SDK folder whose Pub/Sub launcher is `pubsub_script` (bash)."""
    launcher = root / "platform/pubsub-emulator/bin/cloud-pubsub-emulator"
    launcher.parent.mkdir(parents=True)
    launcher.write_text("#!/bin/bash\n" + pubsub_script)
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    return root


def test_free_port_is_bindable() -> None:
    port = free_port()
    assert 0 < port < 65536
    assert _port_free(port)


def test_missing_java_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    for start in (
        lambda: start_firestore(port=free_port(), project=PROJECT, log_dir=tmp_path),
        lambda: start_pubsub(port=free_port(), log_dir=tmp_path),
        check_prerequisites,
    ):
        with pytest.raises(EmulatorUnavailable, match="apt-get install openjdk-17-jre-headless"):
            start()


def test_missing_node_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EmulatorUnavailable, match=r"needs Node\.js.*nodejs\.org"):
        start_auth(port=free_port(), project=PROJECT, log_dir=tmp_path)


def test_old_node_is_refused_with_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = tmp_path / "node"
    node.write_text("#!/bin/sh\necho v18.19.1\n")
    node.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EmulatorUnavailable, match=r"20 or newer.*v18\.19\.1"):
        check_auth_prerequisites()


def test_missing_firebase_tools_names_npm_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manager, "FIREBASE_CLI", tmp_path / "firebase")
    with pytest.raises(EmulatorUnavailable, match="npm ci --omit=optional"):
        check_auth_prerequisites()


def test_cli_check_exits_1_with_the_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["check"]) == 1
    assert "openjdk-17-jre-headless" in capsys.readouterr().err


@needs_emulators
def test_cli_check_passes_here(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 0
    assert "OK" in capsys.readouterr().out


@needs_emulators
def test_missing_component_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLOUDSDK_ROOT", str(tmp_path))
    with pytest.raises(EmulatorUnavailable) as caught:
        start_firestore(port=free_port(), project=PROJECT, log_dir=tmp_path)
    assert "gcloud components install cloud-firestore-emulator" in str(caught.value)
    assert "apt-get install google-cloud-cli-firestore-emulator" in str(caught.value)


def test_missing_sdk_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLOUDSDK_ROOT", raising=False)
    monkeypatch.delenv("GCLOUD_SDK_ROOT", raising=False)
    monkeypatch.setattr(manager, "_gcloud_sdk_root", lambda: None)
    monkeypatch.setattr(manager, "SDK_USUAL_PATHS", ())
    with pytest.raises(EmulatorUnavailable, match="Google Cloud CLI"):
        manager.find_sdk_root()


def test_sdk_root_comes_from_the_environment_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLOUDSDK_ROOT", str(tmp_path))
    assert manager.find_sdk_root() == tmp_path


def test_missing_storage_emulator_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EmulatorUnavailable, match="pip install gcp-storage-emulator"):
        start_storage(port=free_port(), bucket=BUCKET, log_dir=tmp_path)


@needs_emulators
def test_early_exit_reports_the_log_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sdk = _fake_sdk(tmp_path / "sdk", 'echo "boom: bad flag $1"\nexit 3\n')
    monkeypatch.setenv("CLOUDSDK_ROOT", str(sdk))
    with pytest.raises(EmulatorFailed, match=r"(?s)exited with code 3.*boom: bad flag --host="):
        start_pubsub(port=free_port(), log_dir=tmp_path / "logs")


@needs_emulators
def test_not_ready_times_out_with_the_log_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk = _fake_sdk(tmp_path / "sdk", "echo starting\nexec sleep 60\n")
    monkeypatch.setenv("CLOUDSDK_ROOT", str(sdk))
    began = time.monotonic()
    with pytest.raises(EmulatorFailed, match=r"(?s)not ready .* after 1 s.*starting"):
        start_pubsub(port=free_port(), log_dir=tmp_path / "logs", timeout=1)
    assert time.monotonic() - began < 5


@needs_emulators
def test_unrecognised_firestore_launcher_is_run_as_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = tmp_path / "sdk/platform/cloud-firestore-emulator/cloud_firestore_emulator"
    launcher.parent.mkdir(parents=True)
    launcher.write_text('#!/bin/bash\necho "launched with $*"\nexit 2\n')
    launcher.chmod(0o755)
    monkeypatch.setenv("CLOUDSDK_ROOT", str(tmp_path / "sdk"))
    with pytest.raises(EmulatorFailed, match=r"launched with start --host=127\.0\.0\.1 --port="):
        start_firestore(port=free_port(), project=PROJECT, log_dir=tmp_path / "logs")


def test_stop_kills_a_group_that_ignores_sigterm(tmp_path: Path) -> None:
    # A launcher that does not exec, with a child that ignores SIGTERM (a hung JVM): only
    # SIGKILL to the whole group gets rid of it, and the child is no direct child of ours.
    pidfile = tmp_path / "child.pid"
    process = subprocess.Popen(
        ["bash", "-c", f"(trap '' TERM; echo $BASHPID > {pidfile}; exec sleep 60) & wait"],
        start_new_session=True,
    )
    emulator = RunningEmulator(
        name="fake", host="127.0.0.1", port=1, process=process, log_path=tmp_path / "none"
    )
    try:
        assert processes.wait_for(lambda: pidfile.exists() and pidfile.read_text() != "", 5)
        assert emulator.group_alive()
        began = time.monotonic()
        emulator.stop(timeout=0.5)
        assert time.monotonic() - began < 8
        assert not emulator.group_alive()
        assert _group_gone(emulator)
        with pytest.raises(ProcessLookupError):
            os.kill(int(pidfile.read_text()), 0)
    finally:
        if process.poll() is None or not _group_gone(emulator):
            os.killpg(process.pid, signal.SIGKILL)
