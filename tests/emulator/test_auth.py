"""ID token checks on both APIs: missing, malformed, wrong audience or issuer, not admin; and
tokens of users signed in on the real Auth emulator."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from devkit.emulators import RunningEmulator, reset_auth
from devkit.emulators.auth import AuthEmulatorClient
from devkit.emulators.tokens import emulator_id_token
from tests.support.api import auth
from tests.support.stack import PROJECT, MakeCampaign

pytestmark = pytest.mark.emulator

ADMIN_ROUTES = [
    ("post", "/v1/campaigns"),
    ("get", "/v1/campaigns"),
    ("get", "/v1/campaigns/some-campaign"),
    ("patch", "/v1/campaigns/some-campaign"),
]


def _bad_headers() -> list[dict[str, str]]:
    wrong_issuer = emulator_id_token("u", project=PROJECT).split(".")
    other = emulator_id_token("u", project="demo-other").split(".")
    return [
        {},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer not-a-jwt"},
        {
            "Authorization": "Bearer "
            + emulator_id_token("u", project=PROJECT, audience="demo-other")
        },
        # Audience right, issuer from another project.
        {"Authorization": "Bearer " + ".".join([wrong_issuer[0], other[1], ""])},
        {"Authorization": "Bearer " + emulator_id_token("", project=PROJECT)},
    ]


@pytest.mark.parametrize("headers", _bad_headers())
def test_claim_without_a_valid_token_is_401(
    claim_client: FlaskClient, make_campaign: MakeCampaign, headers: dict[str, str]
) -> None:
    campaign_id = make_campaign(codes=1)

    response = claim_client.post(f"/v1/campaigns/{campaign_id}/claims", headers=headers)

    assert response.status_code == 401
    assert response.get_json()["error_code"] == "UNAUTHENTICATED"


@pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
@pytest.mark.parametrize("headers", _bad_headers()[:5])
def test_admin_routes_need_a_valid_token(
    admin_client: FlaskClient, method: str, path: str, headers: dict[str, str]
) -> None:
    response = getattr(admin_client, method)(path, json={}, headers=headers)

    assert response.status_code == 401
    assert response.get_json()["error_code"] == "UNAUTHENTICATED"


@pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
def test_admin_routes_refuse_shoppers_with_403(
    admin_client: FlaskClient, method: str, path: str
) -> None:
    response = getattr(admin_client, method)(path, json={}, headers=auth("shopper"))

    assert response.status_code == 403
    assert response.get_json()["error_code"] == "FORBIDDEN"


def test_public_campaign_needs_no_token(
    claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=1)
    assert claim_client.get(f"/v1/campaigns/{campaign_id}").status_code == 200


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_users_signed_in_on_the_auth_emulator_claim_and_administer(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    make_campaign: MakeCampaign,
    auth_users: AuthEmulatorClient,
) -> None:
    campaign_id = make_campaign(codes=2)
    shopper = auth_users.sign_up_anonymous()  # as the landing page signs shoppers in
    admin = auth_users.ensure_user("ops@example.com", "secret-123", claims={"admin": True})
    colleague = auth_users.ensure_user("colleague@example.com", "secret-123")

    claimed = claim_client.post(
        f"/v1/campaigns/{campaign_id}/claims", headers=_bearer(shopper.id_token)
    )
    listed = admin_client.get("/v1/campaigns", headers=_bearer(admin.id_token))
    refused = admin_client.get("/v1/campaigns", headers=_bearer(colleague.id_token))

    assert claimed.status_code == 201
    assert claimed.get_json()["user_id"] == shopper.uid
    assert listed.status_code == 200
    assert refused.status_code == 403


def test_reset_auth_deletes_every_user(
    auth_emulator: RunningEmulator, auth_users: AuthEmulatorClient
) -> None:
    auth_users.sign_up_anonymous()
    assert auth_users.users()

    reset_auth(host_port=auth_emulator.host_port, project=PROJECT)

    assert auth_users.users() == []
