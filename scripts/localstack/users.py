"""The local stack's demo users in its Auth emulator: real email/password accounts, created on
first use by ./scripts/run --demo and ./scripts/token. Local passwords, never real ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from emulator.auth import AuthEmulatorClient, SignedIn


@dataclass(frozen=True, slots=True)
class DemoUser:
    role: str
    email: str
    password: str
    claims: dict[str, Any] | None = field(default=None)

    def sign_in(self, client: AuthEmulatorClient) -> SignedIn:
        """Sign in, creating the account (verified, with its claims) on first use."""
        return client.ensure_user(self.email, self.password, claims=self.claims)


# An owner too: the console's demo admin may invite and remove admins.
ADMIN = DemoUser("admin", "admin@codedrop.test", "codedrop-admin", {"admin": True, "owner": True})
SHOPPER = DemoUser("shopper", "shopper@codedrop.test", "codedrop-shopper")
DEMO_USERS = {user.role: user for user in (ADMIN, SHOPPER)}
