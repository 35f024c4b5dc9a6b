"""scripts/tools/assign_codes.py: upload a recipient list, follow its job, download the result.

End to end against the suite's emulators: admin_api and import_codes run under
functions-framework (subprocesses on free ports), the storage notifier delivers the upload's
event, and assign_codes.main() runs in this process as a user would run it.
"""

from __future__ import annotations

import csv
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from google.cloud.storage import Client as StorageClient

from devkit.standins.storage_notifier import StorageNotifier
from scripts.tools import assign_codes
from shared.assignments.service import assignment_job_id
from tests.support.jobs import followed_to_done, tool_options
from tests.support.stack import BUCKET, ROOT, MakeCampaign

LIST = "recipient,first_name\r\nc-1,Ann\r\nc-2,Bob\r\nc 3,bad\r\nc-4,Dee\r\nc-5,Eve\r\n"


@pytest.mark.emulator
def test_a_list_is_followed_to_done_and_its_result_downloaded(
    notifier: StorageNotifier,
    servers: dict[str, str],
    storage_client: StorageClient,
    make_campaign: MakeCampaign,
    cleanup: list[Callable[[], object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    campaign_id = make_campaign(codes=3)
    folder = f"assignments/{campaign_id}/"
    cleanup.append(lambda: [b.delete() for b in storage_client.list_blobs(BUCKET, prefix=folder)])
    source = tmp_path / "may.csv"
    source.write_text(LIST)
    output = tmp_path / "codes-for-may.csv"
    storage_host = os.environ["STORAGE_EMULATOR_HOST"]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage_host)  # main() sets it again

    code = assign_codes.main(
        [
            *(campaign_id, str(source), "--output", str(output)),
            *tool_options(servers["admin_api"], storage_host, timeout=60),
        ]
    )

    out, err = capsys.readouterr()
    assert code == 0, out + err
    lines, _ = followed_to_done(out, notifier, f"{folder}may.csv", assignment_job_id)
    assert f"  result       gs://{BUCKET}/{folder}may.result.csv" in lines
    assert "  assigned     3" in lines
    assert "  unassigned   1" in lines
    assert "  no code left for lines 6" in lines
    assert "    line 4: whitespace inside the customer id" in lines
    assert "assigned 3  already held 0  unassigned 1  invalid 1" in err.splitlines()[-2]
    with output.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["recipient", "code", "first_name"]
    assert [(r[0], r[2]) for r in rows[1:]] == [("c-1", "Ann"), ("c-2", "Bob"), ("c-4", "Dee")]
    assert len({r[1] for r in rows[1:]}) == 3


def test_results_and_other_names_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "list.csv"
    path.write_text("recipient\nx\n")

    assert assign_codes.main(["demo", str(path), "--name", "list.result.csv"]) == 2
    assert "assignments/demo/list.result.csv would not be assigned" in capsys.readouterr().err
    assert assign_codes.main(["demo", str(path), "--name", "list.txt"]) == 2


def test_the_wrapper_runs_the_tool() -> None:
    result = subprocess.run(
        [str(ROOT / "scripts" / "assign_codes"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: scripts/assign_codes" in result.stdout
    assert "--output PATH" in result.stdout
