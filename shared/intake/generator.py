"""Random coupon codes from a cryptographically secure source, over an alphabet without
look-alike characters (shared.models.CODE_ALPHABET)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

from shared.intake.models import CODE_ALPHABET

_SIZE = len(CODE_ALPHABET)
# Rejection sampling keeps every character equally likely: bytes at or above the largest
# multiple of the alphabet's size are dropped instead of folded in with a bias.
_LIMIT = 256 - 256 % _SIZE
_TABLE = bytes(ord(CODE_ALPHABET[b % _SIZE]) if b < _LIMIT else 0 for b in range(256))
_REJECTED = bytes(range(_LIMIT, 256))


def _characters(count: int) -> bytes:
    out = bytearray()
    while len(out) < count:
        raw = secrets.token_bytes(count - len(out) + 16)
        out += raw.translate(_TABLE, _REJECTED)
    return bytes(out[:count])


def generate_codes(
    count: int, *, length: int, prefix: str = "", chunk: int = 10_000
) -> Iterator[str]:
    """`count` codes of `length` random characters after `prefix`, streamed in chunks."""
    left = count
    while left > 0:
        n = min(chunk, left)
        raw = _characters(n * length).decode("ascii")
        for i in range(n):
            yield prefix + raw[i * length : (i + 1) * length]
        left -= n
