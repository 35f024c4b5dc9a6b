"""Random coupon codes from a cryptographically secure source, in a campaign's code format
(shared.codes: a pattern, an alphabet, an optional Luhn mod N check character)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

from shared.codes import CodeFormat, luhn_check_character, template


def _draw(alphabet: str, count: int) -> str:
    """`count` characters of `alphabet`, each equally likely. Rejection sampling: bytes at or
    above the largest multiple of the alphabet's size are dropped instead of folded in with a
    bias."""
    size = len(alphabet)
    limit = 256 - 256 % size
    table = bytes(ord(alphabet[b % size]) if b < limit else 0 for b in range(256))
    rejected = bytes(range(limit, 256))
    out = bytearray()
    while len(out) < count:
        raw = secrets.token_bytes(count - len(out) + 16)
        out += raw.translate(table, rejected)
    return out[:count].decode("ascii")


def generate_codes(count: int, *, code_format: CodeFormat, chunk: int = 10_000) -> Iterator[str]:
    """`count` codes of `code_format`, streamed in chunks."""
    form = template(code_format)
    width = code_format.random_characters
    alphabet = code_format.alphabet
    left = count
    while left > 0:
        n = min(chunk, left)
        raw = _draw(alphabet, n * width)
        for i in range(n):
            body = raw[i * width : (i + 1) * width]
            if code_format.check:
                body += luhn_check_character(body, alphabet)
            yield form % tuple(body)
        left -= n
