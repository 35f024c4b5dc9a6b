"""Operations as code (deploy/monitoring): the dashboard and alert policies are what the
Monitoring API accepts, read only metrics that exist, and each alert has its runbook."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
POLICIES = sorted(MONITORING.glob("alert-*.json"))
USER_METRIC = re.compile(r"logging\.googleapis\.com/user/([a-z_]+)")


def _gcloud_info(field: str) -> str:
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        pytest.fail("gcloud is not installed: install the Google Cloud SDK", pytrace=False)
    result = subprocess.run(
        [gcloud, "info", f"--format=value({field})"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"CLOUDSDK_CORE_DISABLE_PROMPTS": "1", "PATH": "/usr/bin:/bin"},
    )
    return result.stdout.strip()


def test_every_field_is_one_the_monitoring_api_knows() -> None:
    python = _gcloud_info("basic.python_location")
    sdk_root = _gcloud_info("installation.sdk_root")
    result = subprocess.run(
        [
            python,
            str(Path(__file__).with_name("monitoring_schema.py")),
            sdk_root,
            str(MONITORING / "dashboard.json"),
            *map(str, POLICIES),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


def test_the_dashboard_and_alerts_read_only_metrics_the_deploy_creates() -> None:
    created = {
        m["name"] for m in json.loads((MONITORING / "log-metrics.json").read_text())["metrics"]
    }
    read = set()
    for path in [MONITORING / "dashboard.json", *POLICIES]:
        read |= set(USER_METRIC.findall(path.read_text()))
    assert read
    assert read <= created, read - created


def test_the_dashboard_shows_what_a_sale_needs_watched() -> None:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    titles = " | ".join(t["widget"]["title"] for t in dashboard["mosaicLayout"]["tiles"])
    for shown in (
        "Claims",
        "CONTENDED",
        "5xx",
        "Sold-out",
        "Dead-lettered",
        "Import failures",
        "Webhook",
    ):
        assert shown in titles, shown


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.stem)
def test_each_alert_names_its_runbook_section(path: Path) -> None:
    policy = json.loads(path.read_text())
    (section,) = re.findall(
        r'docs/runbook\.md, section "([^"]+)"', policy["documentation"]["content"]
    )
    runbook = (REPO / "docs" / "runbook.md").read_text()
    assert f"\n## {section}\n" in runbook
