"""The HTTP edge without Firestore: CORS never reflects an unlisted origin with credentials,
validation messages stay short, and the router refuses oversized bodies before reading them."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from shared.container import Services
from shared.http import claim_api
from shared.http.cors import Cors
from shared.http.requests import MAX_BODY_BYTES, MAX_PROBLEMS, describe
from shared.settings import Settings
from tests.support.api import router_client

EVIL = "https://evil.example"
SHOP = "https://shop.example"


def services(origins: str) -> Services:
    return Services(Settings(project_id="demo-codedrop-test", cors_origins=origins))


@pytest.mark.parametrize("origin", [EVIL, "null", SHOP])
def test_a_wildcard_answers_star_without_credentials(origin: str) -> None:
    client = router_client(claim_api.router, services("*"))

    for response in (
        client.get("/openapi.json", headers={"Origin": origin}),
        client.options(
            "/v1/campaigns/x/claims",
            headers={"Origin": origin, "Access-Control-Request-Method": "POST"},
        ),
    ):
        assert response.headers["Access-Control-Allow-Origin"] == "*"
        assert "Access-Control-Allow-Credentials" not in response.headers


@pytest.mark.parametrize("origin", [EVIL, "null"])
def test_unlisted_origins_get_no_cors_headers(origin: str) -> None:
    client = router_client(claim_api.router, services(SHOP))

    response = client.get("/openapi.json", headers={"Origin": origin})

    assert "Access-Control-Allow-Origin" not in response.headers
    assert "Access-Control-Allow-Credentials" not in response.headers


def test_a_listed_origin_is_echoed_with_credentials_even_beside_a_wildcard() -> None:
    cors = Cors((SHOP, "*"))

    assert cors.headers_for(SHOP)["Access-Control-Allow-Origin"] == SHOP
    assert cors.headers_for(SHOP)["Access-Control-Allow-Credentials"] == "true"
    assert cors.headers_for(EVIL)["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in cors.headers_for(EVIL)
    assert cors.headers_for(EVIL)["Vary"] == "Origin"
    assert cors.headers_for("null")["Access-Control-Allow-Origin"] == "*"


def test_validation_messages_name_a_few_problems_and_never_the_input() -> None:
    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)

    long_key = "k" * 5_000
    with pytest.raises(ValidationError) as caught:
        Strict.model_validate({long_key: "v" * 5_000, **{f"x{i}": i for i in range(100)}})

    message = describe(caught.value)
    assert message.count("Extra inputs are not permitted") == MAX_PROBLEMS
    assert message.endswith(f"(and {101 - MAX_PROBLEMS} more)")
    assert len(message) < 600
    assert "k" * 40 not in message
    assert "vvvv" not in message


def test_the_router_refuses_a_large_body_before_reading_it() -> None:
    client = router_client(claim_api.router, services(SHOP))

    response = client.post(
        "/v1/campaigns/x/claims",
        data=b"{" + b" " * MAX_BODY_BYTES + b"}",
        content_type="application/json",
    )

    assert response.status_code == 413
    assert response.get_json()["error_code"] == "REQUEST_TOO_LARGE"
