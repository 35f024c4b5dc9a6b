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
) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": f"https://securetoken.google.com/{project}",
        "aud": audience or project,
        "sub": user_id,
        "user_id": user_id,
        "auth_time": now,
        "iat": now,
        "exp": now + lifetime_seconds,
        "firebase": {"identities": {}, "sign_in_provider": "custom"},
    }
    if admin:
        claims["admin"] = True
    return f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims)}."
