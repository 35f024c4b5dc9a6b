"""Fixtures of the unit tier."""

from __future__ import annotations

import pytest

# The switches only a demo- project accepts, which the emulator tier sets for the whole session
# (a unit test that builds a production Settings after it must not inherit them).
LOCAL_SWITCHES = (
    "FIREBASE_AUTH_EMULATOR_HOST",
    "CODEDROP_APP_CHECK_JWKS_URL",
    "CODEDROP_PUSH_JWKS_URL",
    "CODEDROP_CHECK_REVOKED",
)


@pytest.fixture
def production_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """This process's environment without the local switches."""
    for name in LOCAL_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch
