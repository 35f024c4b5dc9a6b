"""ID tokens in the Firebase Auth emulator's format (unsigned), for the local stack and tests.

The service accepts them only when FIREBASE_AUTH_EMULATOR_HOST is set, which it allows only for
`demo-` projects (shared/settings.py).
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any


def _b64(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def emulator_id_token(
    user_id: str,
    *,
    project: str,
    admin: bool = False,
    audience: str | None = None,
    lifetime_seconds: int = 3600,
    sign_in_provider: str = "custom",
    phone_number: str | None = None,
    email: str | None = None,
    email_verified: bool = False,
) -> str:
    """A token as the Auth emulator signs a user in: `firebase.sign_in_provider` says how
    (anonymous, password, phone, custom, ...); phone and email sign-ins carry their identity."""
    now = int(time.time())
    identities: dict[str, list[str]] = {}
    if phone_number is not None:
        identities["phone"] = [phone_number]
    if email is not None:
        identities["email"] = [email]
    claims: dict[str, Any] = {
        "iss": f"https://securetoken.google.com/{project}",
        "aud": audience or project,
        "sub": user_id,
        "user_id": user_id,
        "auth_time": now,
        "iat": now,
        "exp": now + lifetime_seconds,
        "firebase": {"identities": identities, "sign_in_provider": sign_in_provider},
    }
    if phone_number is not None:
        claims["phone_number"] = phone_number
    if email is not None:
        claims["email"] = email
        claims["email_verified"] = email_verified
    if admin:
        claims["admin"] = True
    return f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims)}."
