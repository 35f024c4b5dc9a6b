"""Secrets never reach an error or a log: functions started with sentinel secrets, refused at
start-up in each way the settings can refuse, and a running one provoked into errors; every
byte they print is searched for the sentinels (whole, or the tail an error's `...` keeps)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

from tests.support.processes import run_module
from tests.support.stack import MAIN

TICKET = "sentinel-ticket-Q7vX2mKp9RtL4wZs8NbYc3Hd6Jf1GaUe"
WEBHOOK_KEY = "sentinel-webhook-Z3kP8vR2mX7tLq9WsB4nYc6Hd1JfGaUe"
SHOPIFY = "sentinel-shopify-M5nB8vC2xZ7lKj3H"
SENTINELS = (TICKET, WEBHOOK_KEY, SHOPIFY)


def leaked(text: str) -> list[str]:
    # pydantic cuts a long input to its head and tail: look for both ends of each secret too.
    pieces = [p for s in SENTINELS for p in (s, s[:12], s[-12:])]
    return [p for p in pieces if p in text]


def env(**overrides: str) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CODEDROP_", "FIREBASE_", "GOOGLE_CLOUD_PROJECT"))
        and not k.endswith("_EMULATOR_HOST")
    }
    return {
        **base,
        "GOOGLE_CLOUD_PROJECT": "codedrop-prod",
        "CODEDROP_TICKET_SECRET": TICKET,
        "CODEDROP_WEBHOOK_KEY": WEBHOOK_KEY,
        "CODEDROP_SHOPIFY_WEBHOOK_SECRET": SHOPIFY,
        **overrides,
    }


# A process start costs seconds of CPU: one per kind of refusal (a model check, a field check,
# the pushed functions' own check at start-up).
REFUSALS: Mapping[str, dict[str, str]] = {
    "short webhook key": {"CODEDROP_WEBHOOK_KEY": WEBHOOK_KEY[:20]},
    "bad number": {"CODEDROP_POOL_REFILL_SIZE": "lots"},
    "pushed function unconfigured": {},
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_refused_start_up_prints_no_secret(case: str) -> None:
    target = "count_usage" if case == "pushed function unconfigured" else "claim_api"
    finished = run_module(
        "functions_framework",
        ["--target", target, "--source", MAIN, "--port", "0", "--host", "127.0.0.1"],
        env=env(**REFUSALS[case]),
        timeout=120,
    )

    assert finished.returncode != 0, finished.stderr[-2000:]
    output = finished.stdout + finished.stderr
    assert "Error" in output  # it did refuse, and said something
    assert leaked(output) == []


def test_the_settings_error_itself_holds_no_secret() -> None:
    from pydantic import ValidationError

    from shared.settings import Settings

    with pytest.raises(ValidationError) as refused:
        Settings.model_validate(
            {
                "GOOGLE_CLOUD_PROJECT": "codedrop-prod",
                "CODEDROP_TICKET_SECRET": TICKET,
                "CODEDROP_WEBHOOK_KEY": WEBHOOK_KEY[:20],
                "CODEDROP_SHOPIFY_WEBHOOK_SECRET": SHOPIFY,
            }
        )

    assert leaked(str(refused.value)) == []
