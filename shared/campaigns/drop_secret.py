"""A fair drop's secret: the seed its draw is made with, and the key entry ids are derived
with (docs/fair-drops.md). Stored in `fairness/secret`, never served until the seed is revealed
at the start; its commitment is published on the campaign from the moment it exists."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any


def new_drop_secret() -> tuple[dict[str, Any], str]:
    """The secret document, and the seed's commitment: its hex SHA-256."""
    seed = secrets.token_bytes(32)
    secret = {"seed": seed.hex(), "entry_key": secrets.token_bytes(32).hex()}
    return secret, hashlib.sha256(seed).hexdigest()
