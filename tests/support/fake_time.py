"""A clock and a sleep that only move when told: sleeping advances the clock at once."""

from __future__ import annotations


class FakeTime:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
