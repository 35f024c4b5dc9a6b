"""The flash-sale load test behind ./scripts/loadtest (`python -m scripts.load_test`): `cli` (the
run: options, stages, summary), `stack` (the local stack it starts or the one it is pointed at),
`sale` (campaign, codes through the real intake path, the shoppers' client), `shoppers` (the
shoppers: a plain client of N threads), `records` (what they record), `cpu` (who used the
cores), `audit` (the sale's invariants against the database) and `report` (figures, charts and
the HTML page)."""

from __future__ import annotations

import sys


class SetupError(RuntimeError):
    """The sale could not be staged (stack, campaign, import, client): exit 2."""


def say(line: str = "") -> None:
    """Progress for the person running the test, on stdout as it happens."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
