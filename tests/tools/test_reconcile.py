"""scripts/reconcile against admin_api over HTTP, as an operator runs it beside a local stack."""

from __future__ import annotations

import json

import pytest
from google.cloud import firestore

from devkit.claims import claim_as
from scripts.tools import reconcile
from shared.container import instance_services
from tests.support.stack import PROJECT, MakeCampaign

pytestmark = pytest.mark.emulator


def run(servers: dict[str, str], *args: str) -> int:
    return reconcile.main([*args, "--admin-url", servers["admin_api"], "--project", PROJECT])


def test_counters_behind_the_codes_are_reported_then_repaired(
    servers: dict[str, str],
    make_campaign: MakeCampaign,
    db: firestore.Client,
    capsys: pytest.CaptureFixture[str],
) -> None:
    campaign_id = make_campaign(codes=3)
    # A claim whose event never reached count_usage: the counters say 0, the codes say 1.
    claim_as(instance_services().engine, campaign_id, "unseen")

    assert run(servers, campaign_id, "--dry-run") == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["claimed"]["counted"], report["claimed"]["counters"]) == (1, 0)
    assert report["repaired"] is False

    assert run(servers, campaign_id) == 0
    assert json.loads(capsys.readouterr().out)["repaired"] is True
    assert run(servers, campaign_id, "--dry-run") == 0
    assert json.loads(capsys.readouterr().out)["claimed"]["difference"] == 0
    assert instance_services().counters.totals(campaign_id).claimed == 1


def test_an_unknown_campaign_is_named_with_exit_2(
    servers: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(servers, "no-such-campaign") == 2
    assert "CAMPAIGN_NOT_FOUND" in capsys.readouterr().err


def test_a_stack_that_is_not_running_is_said_with_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert reconcile.main(["c", "--admin-url", "http://127.0.0.1:9", "--project", PROJECT]) == 2
    assert "does not answer" in capsys.readouterr().err
