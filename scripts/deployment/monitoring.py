"""Operations as code: the log-based metrics, the dashboard and the alert policies of
deploy/monitoring/, created by the deploy and brought back to the files on every re-run.

- log-metrics.json: each metric is created when missing, then updated from the file;
- dashboard.json: the dashboard named by its displayName is created when missing, then
  updated from the file;
- alert-*.json: likewise, through `gcloud alpha monitoring policies` (the only release track
  with policies in the SDK; `gcloud components install alpha`). An update replaces the whole
  policy, notification channels included: give the channels to the deploy
  (`--alert-channels`), not to the console, or a re-run removes them.

The runbook for each alert is docs/runbook.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from scripts.deployment.plan import Lookup, Step
from scripts.deployment.resources import Target, gcloud_command

MONITORING = Path("deploy") / "monitoring"  # relative to the repository root, the plan's cwd


def _named(kind: Sequence[str], display_name: str, target: Target) -> list[str]:
    """Prints the resource's name when one of that display name exists."""
    return gcloud_command(
        *kind,
        "list",
        f'--filter=displayName="{display_name}"',
        "--format=value(name)",
        "--limit=1",
        target=target,
    )


def monitoring_steps(
    target: Target, *, root: Path, alert_channels: Sequence[str] = ()
) -> list[Step]:
    folder = root / MONITORING
    steps: list[Step] = []
    for metric in json.loads((folder / "log-metrics.json").read_text())["metrics"]:
        settings = [f"--description={metric['description']}", f"--log-filter={metric['filter']}"]
        name = metric["name"]
        steps += [
            Step(
                f"log-based metric {name}",
                gcloud_command("logging", "metrics", "create", name, *settings, target=target),
                exists_ok=True,
                unless=gcloud_command(
                    "logging", "metrics", "describe", name, "--format=value(name)", target=target
                ),
            ),
            Step(
                f"log-based metric {name} as the file says",
                gcloud_command("logging", "metrics", "update", name, *settings, target=target),
            ),
        ]
    dashboards = ("monitoring", "dashboards")
    policies = ("alpha", "monitoring", "policies")
    channels = ",".join(alert_channels)
    items: list[tuple[str, tuple[str, ...], Path, str, list[str], list[str]]] = [
        ("dashboard", dashboards, MONITORING / "dashboard.json", "--config-from-file", [], [])
    ] + [
        (
            "alert policy",
            policies,
            MONITORING / path.name,
            "--policy-from-file",
            [f"--notification-channels={channels}"] if channels else [],
            [f"--set-notification-channels={channels}"] if channels else [],
        )
        for path in sorted(folder.glob("alert-*.json"))
    ]
    for label, kind, path, flag, on_create, on_update in items:
        display_name = json.loads((root / path).read_text())["displayName"]
        existing = Lookup(f"<name of {display_name}>", tuple(_named(kind, display_name, target)))
        steps += [
            Step(
                f"{label} {display_name!r} ({path})",
                gcloud_command(*kind, "create", f"{flag}={path}", *on_create, target=target),
                unless=list(existing.command),
            ),
            Step(
                f"{label} {display_name!r} as {path} says",
                gcloud_command(
                    *kind, "update", existing.marker, f"{flag}={path}", *on_update, target=target
                ),
                lookups=(existing,),
            ),
        ]
    return steps
