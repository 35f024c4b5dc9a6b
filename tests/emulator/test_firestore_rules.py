"""firestore.rules, enforced by a Firestore emulator started with it: a client holding an
end-user ID token can neither read nor write any collection. (The functions use the Admin SDK,
which rules do not apply to; the emulator's `owner` token stands for it here.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from devkit.emulators import RunningEmulator, free_port, start_firestore
from devkit.emulators.tokens import emulator_id_token
from tests.support.stack import PROJECT, RULES

pytestmark = pytest.mark.emulator

# Every collection the service writes, at the depth it lives.
DOCUMENTS = [
    "campaigns/c1",
    "campaigns/c1/coupons/k1",
    "campaigns/c1/claims/u1-0",
    "campaigns/c1/counter_shards/0",
    "campaigns/c1/counters/config",
    "campaigns/c1/processed_events/e1",
    "campaigns/c1/announcements/e1",
    "campaigns/c1/room_instances/i1",
    "jobs/j1",
    "outbox/e1",
]


@pytest.fixture(scope="module")
def firestore_with_rules(
    emulator_prerequisites: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    log_dir: Path = tmp_path_factory.mktemp("rules-emulator")
    emulator: RunningEmulator = start_firestore(
        port=free_port(), project=PROJECT, log_dir=log_dir, rules=RULES
    )
    try:
        yield f"http://{emulator.host_port}/v1/projects/{PROJECT}/databases/(default)/documents"
    finally:
        emulator.stop()


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


SHOPPER = _as(emulator_id_token("shopper-1", project=PROJECT))
ADMIN_CLAIM = _as(emulator_id_token("operator-1", project=PROJECT, admin=True))
OWNER = _as("owner")  # the emulator's stand-in for the Admin SDK: rules do not apply
FIELDS = {"fields": {"code": {"stringValue": "MINE"}, "assigned": {"booleanValue": False}}}


@pytest.mark.parametrize("headers", [SHOPPER, ADMIN_CLAIM], ids=["shopper", "admin-claim"])
@pytest.mark.parametrize("document", DOCUMENTS)
def test_a_client_with_an_id_token_cannot_write_or_read(
    firestore_with_rules: str, headers: dict[str, str], document: str
) -> None:
    url = f"{firestore_with_rules}/{document}"
    assert requests.patch(url, json=FIELDS, headers=OWNER, timeout=10).status_code == 200

    read = requests.get(url, headers=headers, timeout=10)
    write = requests.patch(url, json=FIELDS, headers=headers, timeout=10)
    delete = requests.delete(url, headers=headers, timeout=10)

    for answer in (read, write, delete):
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["status"] == "PERMISSION_DENIED"
    assert requests.get(url, headers=OWNER, timeout=10).status_code == 200  # still there


@pytest.mark.parametrize("collection", sorted({d.split("/")[-2] for d in DOCUMENTS}))
def test_a_client_with_an_id_token_cannot_query(firestore_with_rules: str, collection: str) -> None:
    query = {"structuredQuery": {"from": [{"collectionId": collection, "allDescendants": True}]}}
    answer = requests.post(
        f"{firestore_with_rules}:runQuery", json=query, headers=SHOPPER, timeout=10
    )
    assert answer.status_code == 403, answer.text
