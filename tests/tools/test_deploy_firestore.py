"""What `firebase deploy --only firestore` (scripts/deploy) makes of firestore.indexes.json: the
pinned firebase-tools' own validation accepts it, and it would deploy every index, every field
override and the TTL policies, the same file the suite's index checker reads."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import stack

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("firebase_indexes.cjs")


def _firebase_spec(indexes: Path) -> subprocess.CompletedProcess[str]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("Node.js is not installed (scripts/bootstrap.sh with node)", pytrace=False)
    return subprocess.run(
        [node, str(SCRIPT), str(REPO), str(indexes)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_firebase_tools_would_deploy_every_index_override_and_ttl_policy() -> None:
    firebase = json.loads((REPO / "firebase.json").read_text())["firestore"]
    assert REPO / firebase["indexes"] == stack.INDEXES
    result = _firebase_spec(stack.INDEXES)
    assert result.returncode == 0, result.stderr
    spec: dict[str, Any] = json.loads(result.stdout)
    config = json.loads(stack.INDEXES.read_text())
    assert len(spec["indexes"]) == len(config["indexes"])
    assert len(spec["fieldOverrides"]) == len(config["fieldOverrides"])
    ttl = {(f["collectionGroup"], f["fieldPath"]) for f in spec["fieldOverrides"] if f.get("ttl")}
    assert ttl == {("deliveries", "expire_at"), ("processed_events", "expire_at")}


def test_firebase_tools_refuses_what_production_would(tmp_path: Path) -> None:
    bad = tmp_path / "indexes.json"
    index = {"collectionGroup": "c", "queryScope": "EVERYWHERE", "fields": []}
    bad.write_text(json.dumps({"indexes": [index], "fieldOverrides": []}))
    result = _firebase_spec(bad)
    assert result.returncode != 0
    assert "queryScope" in result.stderr
