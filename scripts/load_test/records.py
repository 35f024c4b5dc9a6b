"""What the shoppers of either client (locustfile.py, shoppers.py) record and how they retry: the
kinds of request in the JSONL records and the final answers of a claim."""

from __future__ import annotations

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
