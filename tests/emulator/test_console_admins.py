"""Owners invite and remove admins through admin_api, on the Firebase Auth emulator: the custom
claims change, the list and the audit log say who did it, and only owners may."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import firebase_admin
import pytest
from firebase_admin import auth as firebase_auth
from flask.testing import FlaskClient
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from emulator import RunningEmulator
from emulator.auth import AuthEmulatorClient
from scripts.tools import grant_owner
from shared.gcp.firebase import firebase_app
from shared.gcp.firestore import admins_collection, audit_collection
from tests.support.api import ADMIN
from tests.support.stack import PROJECT

pytestmark = pytest.mark.emulator


@pytest.fixture
def user_admin(auth_emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """firebase-admin's user management on this run's Auth emulator (the suite points token
    checks at a port nobody serves): its app is rebuilt now, and again after the test."""
    monkeypatch.setenv("FIREBASE_AUTH_EMULATOR_HOST", auth_emulator.host_port)
    firebase_admin.delete_app(firebase_app(PROJECT))
    yield
    firebase_admin.delete_app(firebase_app(PROJECT))


@pytest.fixture
def forget(
    db: firestore.Client, auth_users: AuthEmulatorClient, cleanup: list[Callable[[], object]]
) -> Callable[[str], None]:
    """Delete a user, their admins record and the audit entries about them after the test."""

    def register(uid: str) -> None:
        def remove() -> None:
            admins_collection(db).document(uid).delete()
            query = audit_collection(db).where(filter=FieldFilter("target", "==", uid))
            for snapshot in query.stream():
                snapshot.reference.delete()
            auth_users.delete_user(uid)

        cleanup.append(remove)

    return register


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _claims(uid: str) -> dict[str, Any]:
    return dict(firebase_auth.get_user(uid, app=firebase_app(PROJECT)).custom_claims or {})


def test_an_owner_invites_and_removes_an_admin_and_the_log_says_so(
    admin_client: FlaskClient,
    auth_users: AuthEmulatorClient,
    user_admin: None,
    forget: Callable[[str], None],
) -> None:
    owner = auth_users.ensure_user(
        "owner@shop.example", "secret-123", claims={"admin": True, "owner": True}
    )
    forget(owner.uid)
    colleague = auth_users.ensure_user("kim@shop.example", "secret-123", claims={"redeemer": True})
    forget(colleague.uid)

    invited = admin_client.post(
        "/v1/admins", json={"email": "Kim@Shop.example"}, headers=_bearer(owner.id_token)
    )
    by_admin = admin_client.post("/v1/admins", json={"email": "eve@shop.example"}, headers=ADMIN)
    listed = admin_client.get("/v1/admins", headers=_bearer(owner.id_token)).get_json()
    claims_while_admin = _claims(colleague.uid)
    removed = admin_client.delete(f"/v1/admins/{colleague.uid}", headers=_bearer(owner.id_token))
    again = admin_client.delete(f"/v1/admins/{colleague.uid}", headers=_bearer(owner.id_token))
    themselves = admin_client.delete(f"/v1/admins/{owner.uid}", headers=_bearer(owner.id_token))

    assert invited.status_code == 201
    assert invited.get_json()["uid"] == colleague.uid
    assert invited.get_json()["role"] == "admin"
    assert invited.get_json()["invited_by"] == "owner@shop.example"
    assert claims_while_admin == {"redeemer": True, "admin": True}
    assert by_admin.status_code == 403
    assert colleague.uid in {a["uid"] for a in listed["admins"]}
    assert removed.status_code == 204
    assert _claims(colleague.uid) == {"redeemer": True}
    assert again.status_code == 404
    assert again.get_json()["error_code"] == "ADMIN_NOT_FOUND"
    assert themselves.status_code == 409
    assert themselves.get_json()["error_code"] == "CANNOT_REMOVE_YOURSELF"
    entries = admin_client.get("/v1/audit?limit=200", headers=ADMIN).get_json()["entries"]
    mine = [(e["action"], e["actor"]["uid"]) for e in entries if e["target"] == colleague.uid]
    assert mine == [("admin.remove", owner.uid), ("admin.invite", owner.uid)]


def test_the_first_owner_is_made_by_the_bootstrap_command(
    db: firestore.Client,
    auth_users: AuthEmulatorClient,
    user_admin: None,
    forget: Callable[[str], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = grant_owner.main(["--project", PROJECT, "first.owner@shop.example"])

    assert status == 0
    uid = capsys.readouterr().out.strip().split()[-1]
    forget(uid)
    assert _claims(uid) == {"admin": True, "owner": True}
    record = admins_collection(db).document(uid).get().to_dict() or {}
    assert record["role"] == "owner"
    assert record["email"] == "first.owner@shop.example"
