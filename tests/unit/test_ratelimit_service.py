"""The guessing limit's pure part (shared/ratelimit/service.py): which key a client address
counts under. The limit itself runs on the emulators (tests/emulator/test_guessing.py)."""

from __future__ import annotations

import pytest

from shared.ratelimit.service import address_key


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("not an address", "not an address"),
    ],
)
def test_an_ipv6_client_counts_as_its_prefix(address: str, key: str) -> None:
    assert address_key(address) == key
