"""The push token check (shared/gcp/push_auth.py) remembers the tokens that passed until they
expire, and nothing else: a refused token is checked, and refused, every time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import jwt
import pytest

from devkit.standins.push_auth import LOCAL_ACCOUNT, LOCAL_AUDIENCE, DevPushKeys, PushRelay
from shared.gcp import push_auth
from shared.gcp.push_auth import PushRefused, PushVerifier
from shared.settings import Settings


@pytest.fixture
def keys() -> Iterator[PushRelay]:
    with PushRelay(DevPushKeys()) as relay:
        yield relay


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tokens whose signature was checked, in order."""
    checked: list[str] = []
    decode = jwt.decode

    def counted(token: str, *args: Any, **kwargs: Any) -> Any:
        checked.append(token)
        return decode(token, *args, **kwargs)

    monkeypatch.setattr(jwt, "decode", counted)
    return checked


def verifier(keys: PushRelay) -> PushVerifier:
    settings = SimpleNamespace(
        push_audience=LOCAL_AUDIENCE,
        push_service_account=LOCAL_ACCOUNT,
        push_jwks_url=keys.jwks_url,
    )
    return PushVerifier(cast(Settings, settings))


def test_a_token_that_passed_is_not_checked_again_until_it_expires(
    keys: PushRelay, checks: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    token = keys.keys.token(lifetime_seconds=600)
    pushes = verifier(keys)

    for _ in range(3):
        pushes.verify(f"Bearer {token}")
    assert checks == [token]

    later = time.time() + 600 + 31  # past its expiry and the leeway
    monkeypatch.setattr(push_auth, "time", SimpleNamespace(time=lambda: later))
    pushes.verify(f"Bearer {token}")  # checked anew (the signature check's own clock is now)
    assert checks == [token, token]


def test_a_refused_token_is_refused_every_time(keys: PushRelay, checks: list[str]) -> None:
    other = keys.keys.token(email="someone-else@demo-codedrop.iam.gserviceaccount.com")
    pushes = verifier(keys)

    for _ in range(2):
        with pytest.raises(PushRefused):
            pushes.verify(f"Bearer {other}")
    assert checks == [other, other]
