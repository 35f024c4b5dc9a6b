"""The one table of what gets deployed, and which of its entry points functions/main.py defines.

Each function is deployed from the same staged folder with its own entry point and trigger.
"""

from __future__ import annotations

import ast
import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from scripts.deployment import DeployError

LOG = logging.getLogger("codedrop.deploy")

# Must match shared.settings.Settings (tests/tools/test_deploy.py checks): the trigger and the
# code that reads the setting have to name the same bucket and topic.
DEFAULT_IMPORTS_BUCKET = "codedrop-imports"
DEFAULT_EVENTS_TOPIC = "coupon-events"


class Trigger(enum.Enum):
    PUBLIC_HTTP = "public http"
    PRIVATE_HTTP = "private http (IAM)"
    STORAGE_FINALIZED = "storage object finalized"
    PUBSUB = "pub/sub topic"

    @property
    def signature(self) -> str:
        """The functions-framework decorator the entry point needs for this trigger."""
        if self in (Trigger.PUBLIC_HTTP, Trigger.PRIVATE_HTTP):
            return "http"
        return "cloud_event"


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    entry_point: str
    trigger: Trigger
    memory: str
    cpu: str
    concurrency: int
    max_instances: int
    timeout: str
    retry: bool = False


# The one table of what gets deployed. Concurrency above 1 needs at least one CPU; THREADS (the
# functions-framework gunicorn thread count, otherwise 4 per CPU) is set to the concurrency so an
# instance really serves that many requests at once instead of queueing behind 4 threads.
FUNCTIONS: tuple[FunctionSpec, ...] = (
    # Shoppers' claims: the hot path; I/O-bound, so many requests share one CPU.
    FunctionSpec(
        name="claim_api",
        entry_point="claim_api",
        trigger=Trigger.PUBLIC_HTTP,
        memory="512Mi",
        cpu="1",
        concurrency=80,
        max_instances=100,
        timeout="60s",
    ),
    # Marketers and operators: Firebase admin claim in the app, and IAM in front of it.
    FunctionSpec(
        name="admin_api",
        entry_point="admin_api",
        trigger=Trigger.PRIVATE_HTTP,
        memory="512Mi",
        cpu="1",
        concurrency=20,
        max_instances=5,
        timeout="300s",
    ),
    # One CSV per instance at a time; redelivery is safe (idempotent import), so retry.
    FunctionSpec(
        name="import_codes",
        entry_point="import_codes",
        trigger=Trigger.STORAGE_FINALIZED,
        memory="1Gi",
        cpu="1",
        concurrency=1,
        max_instances=10,
        timeout="540s",
        retry=True,
    ),
    # Sharded counters; consumers are idempotent on event_id, so retry.
    FunctionSpec(
        name="count_usage",
        entry_point="count_usage",
        trigger=Trigger.PUBSUB,
        memory="512Mi",
        cpu="1",
        concurrency=40,
        max_instances=20,
        timeout="60s",
        retry=True,
    ),
)
FUNCTION_NAMES = tuple(spec.name for spec in FUNCTIONS)


def _decorator_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def defined_entry_points(main_py: Path) -> dict[str, str | None]:
    """Names bound at the top level of main.py, each with its functions-framework signature.

    The signature is "http" or "cloud_event" when a matching decorator is visible, else None.
    """
    tree = ast.parse(main_py.read_text(encoding="utf-8"), filename=str(main_py))
    names: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            kinds = {_decorator_name(d) for d in node.decorator_list} & {"http", "cloud_event"}
            names[node.name] = kinds.pop() if len(kinds) == 1 else None
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = None
        elif isinstance(node, ast.ImportFrom | ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = None
    return names


def select_functions(
    defined: Mapping[str, str | None], only: str | None = None
) -> list[FunctionSpec]:
    """The table's functions whose entry point main.py defines (or just `only`)."""
    selected = []
    for spec in FUNCTIONS:
        if only is not None and spec.name != only:
            continue
        if spec.entry_point not in defined:
            if only is not None:
                raise DeployError(
                    f"{spec.name}: entry point {spec.entry_point!r} is not defined in "
                    "functions/main.py"
                )
            LOG.info(
                "skipping %s: functions/main.py does not define %s (not written yet)",
                spec.name,
                spec.entry_point,
            )
            continue
        signature = defined[spec.entry_point]
        if signature is not None and signature != spec.trigger.signature:
            raise DeployError(
                f"{spec.name}: {spec.entry_point} is decorated @functions_framework.{signature} "
                f"but its trigger ({spec.trigger.value}) needs "
                f"@functions_framework.{spec.trigger.signature}"
            )
        selected.append(spec)
    if not selected:
        raise DeployError("functions/main.py defines none of: " + ", ".join(FUNCTION_NAMES))
    return selected
