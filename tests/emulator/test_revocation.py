"""Revoked access ends within the revocation cache's bound: admin_api served as a function
process whose Firebase Auth is the real Auth emulator, with the revocation check on and a
1-second cache (a revoked token acts for at most twice that; docs/security.md)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from devkit.emulators import EmulatorStack, RunningEmulator
from devkit.emulators.auth import AuthEmulatorClient, SignedIn
from tests.support.servers import function_servers

pytestmark = pytest.mark.emulator

CACHE_SECONDS = 1.0
# Twice the cache (shared/cache.RecentReads), one Auth read, and a loaded machine's slack.
BOUND_SECONDS = 2 * CACHE_SECONDS + 3.0


@pytest.fixture(scope="module")
def admin_url(
    emulators: EmulatorStack,
    auth_emulator: RunningEmulator,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FIREBASE_AUTH_EMULATOR_HOST", auth_emulator.host_port)
        mp.setenv("CODEDROP_CHECK_REVOKED", "true")
        mp.setenv("CODEDROP_REVOCATION_CACHE_SECONDS", str(CACHE_SECONDS))
        with function_servers(
            {"admin_api": "http"}, run_dir=tmp_path_factory.mktemp("revocation")
        ) as urls:
            yield urls["admin_api"]


def issued_at(token: str) -> int:
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return int(claims["iat"])


def status(url: str, signed_in: SignedIn) -> int:
    answer = httpx.get(url, headers={"Authorization": f"Bearer {signed_in.id_token}"}, timeout=30)
    return answer.status_code


def refused_within(url: str, signed_in: SignedIn, *, until_then: int) -> float:
    """Seconds until the token is refused (401), polled; fails past the bound."""
    started = time.monotonic()
    while time.monotonic() - started < BOUND_SECONDS + 5:
        answer = httpx.get(
            url, headers={"Authorization": f"Bearer {signed_in.id_token}"}, timeout=30
        )
        if answer.status_code == 401:
            assert answer.json()["error_code"] == "UNAUTHENTICATED"
            return time.monotonic() - started
        assert answer.status_code == until_then
        time.sleep(0.1)  # polling the service under test: its clock is its own
    pytest.fail("a revoked token kept acting")


Revoke = Callable[[AuthEmulatorClient, SignedIn], None]
REVOCATIONS: dict[str, Revoke] = {
    "disabled": lambda users, who: users.disable(who.uid),
    "deleted": lambda users, who: users.delete_user(who.uid),
    "tokens revoked": lambda users, who: users.revoke_tokens(
        who.uid, valid_since=issued_at(who.id_token) + 1
    ),
}


@pytest.mark.parametrize("revoke", REVOCATIONS.values(), ids=REVOCATIONS.keys())
@pytest.mark.parametrize(
    ("claims", "path"),
    [({"admin": True}, "/v1/campaigns"), ({"redeemer": True}, "/v1/campaigns/x/codes/NONE")],
    ids=["admin", "redeemer"],
)
def test_a_revoked_account_is_refused_within_the_bound(
    admin_url: str,
    auth_users: AuthEmulatorClient,
    revoke: Revoke,
    claims: dict[str, bool],
    path: str,
) -> None:
    email = f"revoked-{time.monotonic_ns()}@example.com"
    signed_in = auth_users.ensure_user(email, "secret-123", claims=claims)
    url = f"{admin_url}{path}"
    before = status(url, signed_in)

    revoke(auth_users, signed_in)
    took = refused_within(url, signed_in, until_then=before)

    assert before in (200, 404)  # the redeemer's lookup of an unknown code: 404, not 401
    assert took <= BOUND_SECONDS


def test_signing_out_of_the_console_ends_the_session_within_the_bound(
    admin_url: str, auth_users: AuthEmulatorClient
) -> None:
    email = f"signs-out-{time.monotonic_ns()}@example.com"
    signed_in = auth_users.ensure_user(email, "secret-123", claims={"admin": True})
    url = f"{admin_url}/v1/campaigns"
    assert status(url, signed_in) == 200
    # Revocation counts in whole seconds: a token issued in the second it is revoked stays good
    # (Firebase's rule), so the sign-out comes in a later second, as a real one does.
    while int(time.time()) <= issued_at(signed_in.id_token):
        time.sleep(0.1)

    answer = httpx.post(
        f"{admin_url}/v1/me:sign_out",
        headers={"Authorization": f"Bearer {signed_in.id_token}"},
        timeout=30,
    )

    assert answer.status_code == 204
    assert refused_within(url, signed_in, until_then=200) <= BOUND_SECONDS
