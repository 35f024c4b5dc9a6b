"""The claim invariants under real parallel claimers: threads, two engine instances in one
process, and two processes (two function instances, each with its own candidate pool)."""

from __future__ import annotations

import multiprocessing
import random
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from google.cloud import firestore

from devkit.audit import audit_campaign
from devkit.claims import claim_as
from shared.claims.engine import ClaimEngine
from shared.container import instance_services
from shared.errors import CodedropError
from shared.settings import Settings, get_settings
from tests.support.stack import MakeCampaign

pytestmark = pytest.mark.emulator


@dataclass(frozen=True)
class Answer:
    user_id: str
    outcome: str  # "created", "held", or an error_code
    code: str | None


def _claim(engine: ClaimEngine, campaign_id: str, user_id: str) -> Answer:
    try:
        result = claim_as(engine, campaign_id, user_id)
    except CodedropError as exc:
        return Answer(user_id, exc.error_code, None)
    return Answer(user_id, "created" if result.created else "held", result.claim.code)


def _run(
    engines: list[ClaimEngine], campaign_id: str, users: list[str], threads: int
) -> list[Answer]:
    with ThreadPoolExecutor(threads) as pool:
        futures = [
            pool.submit(_claim, engines[i % len(engines)], campaign_id, user)
            for i, user in enumerate(users)
        ]
        return [f.result() for f in futures]


def _instance(args: tuple[str, list[str], int]) -> list[Answer]:
    """One function instance in its own process: its own client, engine and pool."""
    campaign_id, users, threads = args
    engine = ClaimEngine(db=instance_services().db, settings=get_settings())
    return _run([engine], campaign_id, users, threads)


def _shoppers(count: int, double_clicks: int, seed: int) -> list[str]:
    users = [f"shopper-{i}" for i in range(count)]
    users += users[:double_clicks]  # the same shoppers pressing the button again
    random.Random(seed).shuffle(users)
    return users


def assert_invariants(
    db: firestore.Client, campaign_id: str, answers: list[Answer], *, codes: int, per_user: int = 1
) -> None:
    report = audit_campaign(db, campaign_id=campaign_id)
    assert report.ok, report.violations
    shoppers = {a.user_id for a in answers}

    # The pool is handed out completely when there are enough shoppers, and never more.
    assert report.assigned == min(codes, len(shoppers) * per_user)
    assert report.claims == report.assigned
    created = [a for a in answers if a.outcome == "created"]
    assert len(created) == report.assigned
    assert len({a.code for a in created}) == len(created)
    # No shopper told SOLD_OUT while a code was free: every SOLD_OUT came with none left.
    if any(a.outcome == "SOLD_OUT" for a in answers):
        assert report.unassigned == 0
    assert not [a for a in answers if a.outcome not in {"created", "held", "SOLD_OUT"}]
    # A double click returns the code already held, and answers agree with the database.
    held_by: defaultdict[str, set[str]] = defaultdict(set)
    for a in answers:
        if a.code is not None:
            held_by[a.user_id].add(a.code)
    assert all(len(codes_) <= per_user for codes_ in held_by.values())
    per_user_claims = Counter(a.user_id for a in created)
    assert max(per_user_claims.values(), default=0) <= per_user


def test_threads_across_two_instances_in_one_process(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=120)
    engines = [ClaimEngine(db=db, settings=get_settings()) for _ in range(2)]
    users = _shoppers(240, double_clicks=80, seed=1)

    answers = _run(engines, campaign_id, users, threads=32)

    assert_invariants(db, campaign_id, answers, codes=120)
    assert Counter(a.outcome for a in answers)["created"] == 120


def test_two_processes_with_double_clicks_across_them(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=100)
    users = _shoppers(200, double_clicks=0, seed=2)
    # Every one of the first 60 shoppers clicks on both instances at once.
    first = users[:100] + users[100:160]
    second = users[100:] + users[:60]

    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as processes:
        results = processes.map(_instance, [(campaign_id, first, 16), (campaign_id, second, 16)])

    answers = [a for result in results for a in result]
    assert_invariants(db, campaign_id, answers, codes=100)


def test_per_user_limit_holds_under_simultaneous_clicks(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=60, max_per_user=2)
    engines = [ClaimEngine(db=db, settings=get_settings()) for _ in range(2)]
    users = [f"greedy-{i}" for i in range(20) for _ in range(5)]  # 5 clicks each, at once

    answers = _run(engines, campaign_id, users, threads=32)

    assert_invariants(db, campaign_id, answers, codes=60, per_user=2)
    assert Counter(a.outcome for a in answers)["created"] == 40


def test_last_codes_go_to_someone_and_nobody_is_stranded(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    """Many claimers fighting for a handful of codes: every code is issued, and the rest get
    SOLD_OUT (never CONTENDED) because losers move on instead of waiting on locks."""
    campaign_id = make_campaign(codes=5)
    engines = [ClaimEngine(db=db, settings=Settings()) for _ in range(4)]

    answers = _run(engines, campaign_id, [f"late-{i}" for i in range(64)], threads=64)

    assert_invariants(db, campaign_id, answers, codes=5)
    assert Counter(a.outcome for a in answers) == {"created": 5, "SOLD_OUT": 59}
