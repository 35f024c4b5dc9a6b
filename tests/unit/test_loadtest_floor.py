"""The load test's floor comparison (scripts/load_test/paired.py) and its operations per claim
(scripts/load_test/operations.py), from made-up runs."""

from __future__ import annotations

from typing import Any

from scripts.load_test import operations
from scripts.load_test.paired import CLAIM_FUNCTION, compare


def _cpu(**ms: float) -> dict[str, Any]:
    return {"components": {name: {"ms_per_shopper": value} for name, value in ms.items()}}


def _run(side: str, seconds: float, claim: float, emulator: float) -> dict[str, Any]:
    function = "claim_api" if side == "codedrop" else "floor_claim"
    cpu = _cpu(**{function: claim, "firestore emulator": emulator, "threads": 0.5})
    cpu["components"]["rest of the machine"] = {"ms_per_shopper": 9.0}
    return {
        "side": side,
        "campaign_id": f"{side}-{seconds}",
        "figures": {"sale_seconds": seconds, "latency_ms": {"claim": {"p50": 1, "p95": 2}}},
        "violations": 0,
        "cpu": cpu,
        "cpu_with_counting": cpu,
        "operations": {
            "per_claim": {"firestore_documents_read": 1.0},
            "dollars_per_10000_claims": {"total": 0.1},
        },
    }


def test_the_comparison_takes_medians_and_pairs_the_claim_functions() -> None:
    runs = [
        _run("codedrop", 30.0, 4.0, 3.0),
        _run("floor", 10.0, 2.0, 1.0),
        _run("codedrop", 40.0, 6.0, 3.0),
        _run("floor", 12.0, 2.0, 2.0),
        _run("codedrop", 90.0, 5.0, 3.0),
        _run("floor", 11.0, 3.0, 1.0),
    ]

    comparison = compare(runs)

    assert comparison["medians"]["codedrop"]["sale_seconds"] == 40.0
    assert comparison["medians"]["floor"]["sale_seconds"] == 11.0
    ratios = comparison["codedrop / floor"]
    assert ratios["wall time (sale answered in)"] == round(40 / 11, 2)
    # The service: claim function and emulator, never the client nor the rest of the machine.
    # Medians of each run's service total: codedrop 7, 9, 8; the floor 3, 4, 4.
    assert ratios["CPU per shopper, the service's processes, counting included"] == 2.0
    rows = comparison["by_process_ms_per_shopper"]["cpu_ms_per_shopper_with_counting"]
    assert rows[CLAIM_FUNCTION] == {"codedrop": 5.0, "floor": 2.0, "codedrop / floor": 2.5}
    assert "rest of the machine" not in rows


def test_operations_per_claim_count_what_each_function_did_between_two_readings() -> None:
    before = {
        "claim_api": {
            "invocations": 10,
            "published": {"messages": 1},
            "firestore": {"documents read": 5, "documents written": 2},
        }
    }
    after = {
        "claim_api": {
            "invocations": 310,
            "published": {"messages": 101, "type coupon.claimed": 100},
            "firestore": {
                "documents read": 405,
                "documents written": 202,
                "read campaign_webhooks": 4,
            },
        },
        "count_usage": {
            "invocations": 100,
            "published": {},
            "firestore": {"documents read": 100, "documents written": 200},
        },
        "deliver_webhooks": {"invocations": 0, "published": {}, "firestore": {}},
    }

    changed = operations.difference(after, before)
    figures = operations.per_claim(
        changed, {"claim_api": 4.0, "count_usage": 2.0}, claims=100, shoppers=200
    )

    per = figures["per_claim"]
    assert per["firestore_documents_read"] == 5.0
    assert per["of_which_on_instances_own_schedule"] == 0.04
    assert per["firestore_documents_written"] == 4.0
    assert per["pubsub_messages_published"] == 1.0
    assert per["pubsub_messages_pushed"] == 1.0
    assert per["invocations"] == {"claim_api": 3.0, "count_usage": 1.0}  # none for webhooks
    assert per["function_cpu_ms"] == 12.0  # (4 + 2) ms x 200 shoppers / 100 claims
    dollars = figures["dollars_per_10000_claims"]
    assert dollars["total_at_64_instances"] > dollars["total"] > 0


def test_messages_of_many_claims_are_billed_by_their_bytes_and_counted_as_messages() -> None:
    """Ten messages carrying a hundred claims' events: ten published and pushed, a hundred
    events, and Pub/Sub's throughput from the bytes (3 kB a message), not 1 kB a message."""
    changed = {
        "claim_api": {
            "invocations": 100,
            "published": {"messages": 10, "events": 100, "bytes billed": 30_000},
            "firestore": {},
        },
        "count_usage": {"invocations": 10, "published": {}, "firestore": {}},
    }

    figures = operations.per_claim(changed, {}, claims=100, shoppers=100)

    per = figures["per_claim"]
    assert (per["pubsub_messages_published"], per["pubsub_events_published"]) == (0.1, 1.0)
    assert per["pubsub_messages_pushed"] == 0.1
    throughput = (30_000 + 10 * 3_000) * 100 * operations.PUBSUB_PER_TIB / 2**40
    assert figures["dollars_per_10000_claims"]["pubsub_throughput"] == round(throughput, 5)
