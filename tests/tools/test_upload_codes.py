"""scripts/tools/upload_codes.py: upload a CSV, follow its job through admin_api, summarise.

End to end against the suite's emulators: admin_api and import_codes run under
functions-framework (subprocesses on free ports), the storage notifier delivers the upload's
event, and upload_codes.main() runs in this process as a user would run it.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from google.cloud.storage import Client as StorageClient

from devkit.emulators import free_port
from devkit.standins.storage_notifier import StorageNotifier
from scripts.tools import upload_codes
from shared.intake.service import import_job_id
from tests.support.jobs import followed_to_done, tool_options
from tests.support.stack import BUCKET, ROOT, MakeCampaign

CSV = (
    "\ufeffcode,note\r\n"
    "UP-001,a\r\n"
    "UP-002,b\r\n"
    "\r\n"
    "UP-003,c\r\n"
    "UP-001,again\r\n"
    "BAD CODE,space\r\n"
    "UP-004,d\r\n"
)


@pytest.fixture
def argv(
    servers: dict[str, str],
    storage_client: StorageClient,
    cleanup: list[Callable[[], object]],
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., list[str]]:
    """upload_codes arguments for the suite's emulators and servers; the object is deleted at
    the end."""
    storage_host = os.environ["STORAGE_EMULATOR_HOST"]
    # main() sets it from --storage-host: let the monkeypatch put it back afterwards.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage_host)

    def make(campaign_id: str, path: Path, *extra: str) -> list[str]:
        name = f"imports/{campaign_id}/{path.name}"
        blob = storage_client.bucket(BUCKET).blob(name)
        cleanup.append(lambda: blob.delete() if blob.exists() else None)
        options = tool_options(servers["admin_api"], storage_host, timeout=30)
        return [campaign_id, str(path), *options, *extra]

    return make


def _csv(tmp_path: Path, body: str = CSV, name: str = "codes.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(body.encode())
    return path


@pytest.mark.emulator
def test_an_upload_is_followed_to_done_with_a_summary(
    notifier: StorageNotifier,
    argv: Callable[..., list[str]],
    make_campaign: MakeCampaign,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    campaign_id = make_campaign()

    code = upload_codes.main(argv(campaign_id, _csv(tmp_path)))

    out, err = capsys.readouterr()
    assert code == 0, out + err
    name = f"imports/{campaign_id}/codes.csv"
    lines, generation = followed_to_done(out, notifier, name, import_job_id)
    assert lines[2:] == [  # the whole summary, in order
        f"  source      gs://{BUCKET}/{name}#{generation}",
        "  rows read   6",
        "  imported    4",
        "  duplicates  1 (in the file 1, already in the campaign 0)",
        "  invalid     1",
        "  first 1 of 1 invalid rows:",
        "    line 7: whitespace inside the code",
    ]
    # Progress on stderr, ending full (stderr is not a terminal here: plain lines).
    assert "(8 lines)" in err
    assert err.rstrip().splitlines()[-1].startswith(f"[{'#' * 28}] 100%  rows 6/8 lines")


@pytest.mark.emulator
def test_an_upload_for_a_missing_campaign_fails_with_the_reason(
    notifier: StorageNotifier,
    argv: Callable[..., list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    campaign_id = f"missing-{uuid.uuid4().hex[:8]}"

    code = upload_codes.main(argv(campaign_id, _csv(tmp_path, "NOPE-1\n", "late.csv")))

    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert " failed in " in out
    assert f"  failure     campaign '{campaign_id}' does not exist" in out


@pytest.mark.emulator
def test_without_an_event_it_times_out_with_exit_2(
    argv: Callable[..., list[str]],
    make_campaign: MakeCampaign,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No notifier: the job never appears; 404s are waited through until --timeout."""
    args = argv(make_campaign(), _csv(tmp_path, "T-1\n"))
    args[args.index("--timeout") + 1] = "1"

    assert upload_codes.main(args) == 2

    out, err = capsys.readouterr()
    assert out.startswith("job imp-")
    assert "timed out after 1 s (waiting for import_codes to pick the file up)" in err


@pytest.mark.emulator
def test_no_follow_prints_the_job_id_and_exits_0(
    argv: Callable[..., list[str]],
    make_campaign: MakeCampaign,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = upload_codes.main(argv(make_campaign(), _csv(tmp_path), "--no-follow"))

    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("job imp-")
    assert "/v1/jobs/imp-" in err


def test_names_the_service_would_not_import_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _csv(tmp_path, name="codes.txt")
    assert upload_codes.main(["demo", str(path)]) == 2
    assert "would not be imported" in capsys.readouterr().err
    assert upload_codes.main(["demo", str(path), "--name", "ok.csv", "--timeout", "0"]) == 2
    assert upload_codes.main(["has/slash", str(_csv(tmp_path))]) == 2
    assert upload_codes.main(["demo", str(tmp_path / "absent.csv")]) == 2


def test_a_real_project_needs_an_admin_token_to_follow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(upload_codes.TOKEN_ENV, raising=False)
    path = _csv(tmp_path)

    assert upload_codes.main(["demo", str(path), "--project", "acme-prod"]) == 2

    assert "--id-token" in capsys.readouterr().err


def test_line_count_counts_a_last_line_without_newline(tmp_path: Path) -> None:
    assert upload_codes.count_lines(_csv(tmp_path, "")) == 0
    assert upload_codes.count_lines(_csv(tmp_path, "A\nB")) == 2
    assert upload_codes.count_lines(_csv(tmp_path, "A\r\nB\r\n")) == 2


def test_the_wrapper_runs_the_script_from_anywhere(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ROOT / "scripts" / "upload_codes"), *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    result = run("--help")
    assert result.returncode == 0, result.stderr
    assert "usage: scripts/upload_codes" in result.stdout
    assert "CAMPAIGN_ID FILE.csv" in result.stdout
    # FILE.csv is found relative to the caller's directory (the name is then refused).
    _csv(tmp_path, name="codes.txt")
    result = run("demo", "codes.txt")
    assert result.returncode == 2
    assert "imports/demo/codes.txt would not be imported" in result.stderr


@pytest.mark.emulator
def test_an_admin_api_that_never_answers_ends_with_exit_2(
    argv: Callable[..., list[str]],
    make_campaign: MakeCampaign,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(upload_codes, "UNREACHABLE_LIMIT", 0.5)
    args = argv(make_campaign(), _csv(tmp_path, "U-1\n"))
    args[args.index("--admin-url") + 1] = f"http://127.0.0.1:{free_port()}"

    assert upload_codes.main(args) == 2

    assert "has not answered for 0.5 s" in capsys.readouterr().err
