"""The cost line of the claim benchmark: list prices applied to measured work."""

import pytest

from scripts.bench import cost


def test_a_claim_bill_scales_to_ten_thousand_claims() -> None:
    # 11,000 claims that read 26,400 and wrote 20,000 documents with 11 s of claimer CPU.
    bill = cost.per_claims(claims=11_000, reads=26_400, writes=20_000, cpu_seconds=11.0)

    assert bill.reads == pytest.approx(24_000 * 0.06 / 100_000)
    assert bill.writes == pytest.approx(20_000 / 1.1 * 0.18 / 100_000)
    assert bill.cpu_and_memory == pytest.approx(10.0 * (0.000024 + 0.5 * 0.0000025))
    assert bill.requests == pytest.approx(0.004)
    assert bill.as_dict()["total"] == pytest.approx(
        bill.reads + bill.writes + bill.cpu_and_memory + bill.requests
    )
