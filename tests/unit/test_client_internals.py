"""The client libraries' internals: still where shared/gcp expects them (an upgrade that moves
one fails here, not in a sale), and google-cloud-firestore's private names nowhere outside
shared/gcp."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.pubsub_v1 import PublisherClient
from google.pubsub_v1.services.publisher import PublisherClient as ApiClient

from shared.gcp import client_internals
from shared.gcp.client_internals import PRIVATE_NAMES

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("shared", "functions", "devkit", "scripts", "tests")


@pytest.fixture
def db(monkeypatch: pytest.MonkeyPatch) -> firestore.Client:
    # No emulator and no network: every internal below is built locally.
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST", raising=False)
    return firestore.Client(project="demo-internals", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]


def test_the_client_has_the_private_attributes_shared_gcp_reads(db: firestore.Client) -> None:
    ref = db.collection("campaigns").document("c")
    batch = db.batch()
    assert db._database_string == "projects/demo-internals/databases/(default)"
    assert db._client_info.to_grpc_metadata()
    assert ref._document_path.endswith("/documents/campaigns/c")
    assert batch._write_pbs == []
    batch._add_write_pbs([])


def test_the_named_functions_reach_the_gapic_layer(db: firestore.Client) -> None:
    api = client_internals.gapic(db)
    for method in ("run_query", "commit", "get_document", "batch_get_documents", "listen"):
        assert callable(getattr(api, method)), method
    assert isinstance(client_internals.call_metadata(db), list | tuple)

    transport = client_internals.transport(api)
    commit = transport.commit  # the transport builds its stub on first use
    assert client_internals.transport_stubs(transport)["commit"] is commit
    assert commit in client_internals.wrapped_methods(transport)


def test_a_query_becomes_the_run_query_request_the_library_sends(db: firestore.Client) -> None:
    query = db.collection("campaigns").document("c").collection("coupons").limit(3)

    request = client_internals.query_request(query)

    assert request["parent"] == "projects/demo-internals/databases/(default)/documents/campaigns/c"
    assert request["structured_query"].limit == 3
    assert client_internals.raw_message(request["structured_query"]).limit.value == 3


def test_the_pubsub_client_still_overrides_the_api_publish_it_subclasses() -> None:
    # publish_request calls the API's method on the client: the client must still be the API's
    # client, with the API's publish (topic, messages, retry, timeout) beneath its own.
    assert issubclass(PublisherClient, ApiClient)
    assert PublisherClient.publish is not ApiClient.publish
    parameters = inspect.signature(ApiClient.publish).parameters
    assert {"topic", "messages", "retry", "timeout"} <= set(parameters)


def private_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')} {name}"
        for node in ast.walk(tree)
        if (name := _named(node)) in PRIVATE_NAMES
    ]


def _named(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value  # getattr(x, "_pb")
    return None


def test_no_module_outside_shared_gcp_names_a_private_internal() -> None:
    gcp = ROOT / "shared" / "gcp"
    found = [
        use
        for root in CHECKED
        for path in sorted((ROOT / root).rglob("*.py"))
        if gcp not in path.parents and path != Path(__file__)
        for use in private_uses(path)
    ]
    assert found == []
