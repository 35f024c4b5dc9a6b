"""ID token checks on both APIs: missing, malformed, wrong audience or issuer, not admin."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from emulator.tokens import emulator_id_token
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
