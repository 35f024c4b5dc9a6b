"""The warm-up's ramp follows Firestore's 500/50/5 rule: start at 500 writes/s at most, then
+50% at most every 5 minutes, up to the sale's rate."""

from __future__ import annotations

from itertools import pairwise

import pytest

from scripts.deployment.warmup import GROWTH, START_RATE, STEP_SECONDS, schedule


@pytest.mark.parametrize("target", [1, 499, 500, 501, 750, 751, 3000, 20_000])
def test_each_step_is_at_most_half_again_the_last(target: int) -> None:
    steps = schedule(target)
    assert steps[0] <= START_RATE
    assert steps[-1] == target
    assert all(later <= earlier * GROWTH for earlier, later in pairwise(steps))
    assert steps == sorted(steps)


def test_a_three_thousand_claims_a_second_sale_takes_six_steps_of_five_minutes() -> None:
    assert schedule(3000) == [500, 750, 1125, 1687, 2530, 3000]
    assert STEP_SECONDS == 300
