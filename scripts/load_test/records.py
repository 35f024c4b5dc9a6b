"""What the shoppers of either client (locustfile.py, shoppers.py) record and how they retry: the
kinds of request in the JSONL records and the final answers of a claim."""

from __future__ import annotations

from typing import Any, Protocol

TICKET_HEADER = "X-Waiting-Room-Ticket"
# What a request is, in the JSONL records (and in locust's statistics).
KIND_CAMPAIGN, KIND_CLAIM, KIND_DOUBLE, KIND_ME, KIND_JOURNEY = (
    "campaign",
    "claim",
    "double_click",
    "me",
    "journey",
)
# Final answers of a claim; 503 and 429 are "try again", anything else is an error answer.
CODE, SOLD_OUT, ERROR, UNANSWERED = "code", "sold_out", "error", "unanswered"
RETRIED_STATUSES = (429, 503)
CONNECTION_RETRY_PAUSE = 0.1  # a browser retries a request on a dropped keep-alive at once
MAX_RETRY_AFTER = 30.0


class Click(Protocol):
    """How one click of the claim button (its request and retries) ended, in either client."""

    outcome: str
    status: int
    code: str | None
    attempts: int
    first_sent: float | None
    answered_at: float | None


def journey_record(
    shopper: str, first: Click, double: Click | None, read_back: list[str] | None
) -> dict[str, Any]:
    """A shopper's journey record: what the page ends up showing (a code if either click got
    one, else the first click's answer, the second's if the first got none) and the clicks."""
    final = first
    if double is not None and (
        (double.code is not None and first.code is None) or first.outcome == UNANSWERED
    ):
        final = double
    record: dict[str, Any] = {
        "shopper": shopper,
        "kind": KIND_JOURNEY,
        "outcome": final.outcome,
        "status": final.status,
        "code": final.code,
        "attempts": first.attempts,
        "first_claim_at": first.first_sent,
        "answered_at": final.answered_at,
        "double_click": double is not None,
    }
    if double is not None:
        record["double_outcome"] = double.outcome
        record["double_code"] = double.code
    if read_back is not None:
        record["read_back"] = read_back
    return record
