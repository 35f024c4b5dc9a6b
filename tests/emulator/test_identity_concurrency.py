"""Many accounts behind one phone number or email, claiming at the same moment: the identity never
holds more than max_per_user codes, through the HTTP API (threads) and across two processes (two
function instances with their own pools), read back from Firestore."""

from __future__ import annotations

import multiprocessing
import random
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from devkit.audit import audit_campaign, holder_of
from shared.claims.engine import ClaimEngine
from shared.claims.identity import IdentityKind, identity_key
from shared.claims.policy import Shopper, holder_key
from shared.container import instance_services
from shared.errors import CodedropError
from shared.gcp.firestore import claims_collection
from shared.settings import get_settings
from tests.support.api import auth
from tests.support.stack import MakeCampaign

pytestmark = pytest.mark.emulator

Signer = Callable[[str, str], dict[str, str]]  # (account, identity) -> headers
SIGNERS: dict[IdentityKind, Signer] = {
    IdentityKind.PHONE: lambda user, phone: auth(
        user, sign_in_provider="phone", phone_number=phone
    ),
    IdentityKind.EMAIL: lambda user, email: auth(
        user, sign_in_provider="password", email=email, email_verified=True
    ),
}


def identities(kind: IdentityKind, count: int, group: int) -> list[str]:
    if kind is IdentityKind.PHONE:
        return [f"+1555{group:03d}{i:04d}" for i in range(count)]
    return [f"group-{group}-{i}@shop.example" for i in range(count)]


def claims_per_holder(db: firestore.Client, campaign_id: str) -> Counter[str]:
    return Counter(holder_of(s.id) for s in claims_collection(db, campaign_id).stream())


@pytest.mark.parametrize("kind", [IdentityKind.PHONE, IdentityKind.EMAIL])
def test_a_burst_of_accounts_sharing_identities_never_exceeds_the_limit(
    claim_client: FlaskClient, make_campaign: MakeCampaign, db: firestore.Client, kind: IdentityKind
) -> None:
    campaign_id = make_campaign(codes=100, identity=kind.value, max_per_user=2)
    farm = identities(kind, 6, 1)
    honest = identities(kind, 20, 2)
    # 10 accounts per farm identity, each clicking twice; honest shoppers have one account.
    requests = [SIGNERS[kind](f"farm-{f}-{a}", farm[f]) for f in range(6) for a in range(10)] * 2
    requests += [SIGNERS[kind](f"honest-{h}", honest[h]) for h in range(20)]
    random.Random(14).shuffle(requests)
    app = claim_client.application

    def post(headers: dict[str, str]) -> int:
        response = app.test_client().post(f"/v1/campaigns/{campaign_id}/claims", headers=headers)
        return response.status_code

    with ThreadPoolExecutor(32) as pool:
        statuses = Counter(pool.map(post, requests))

    held = claims_per_holder(db, campaign_id)
    report = audit_campaign(db, campaign_id=campaign_id)
    assert report.ok, report.violations
    assert {held[identity_key(kind, value)] for value in farm} == {2}
    assert {held[identity_key(kind, value)] for value in honest} == {1}  # one click each
    assert sum(held.values()) == report.assigned == 6 * 2 + 20
    assert statuses == {201: report.assigned, 200: len(requests) - report.assigned}


def _instance(args: tuple[str, list[tuple[str, str]], int]) -> list[str]:
    """One function instance in its own process: accounts (id, phone) claim through its engine
    with the holder key the campaign's policy gives them; returns the codes it answered."""
    campaign_id, accounts, threads = args
    engine = ClaimEngine(db=instance_services().db, settings=get_settings())
    campaign = engine.campaign(campaign_id)

    def one(account: tuple[str, str]) -> str:
        user, phone = account
        holder = holder_key(campaign, Shopper(user, "phone", phone_number=phone))
        try:
            outcome = engine.claim(campaign, user_id=user, holder=holder)
        except CodedropError as exc:
            return exc.error_code
        return outcome.claim.code

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, accounts))


@pytest.mark.long
def test_accounts_behind_one_phone_across_two_instances_share_one_limit(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=40, identity="phone")
    phones = identities(IdentityKind.PHONE, 8, 3)
    # 8 phones, 12 accounts each; every account clicks on both instances at once.
    accounts = [(f"acct-{p}-{a}", phones[p]) for p in range(8) for a in range(12)]
    random.Random(15).shuffle(accounts)

    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as processes:
        answers = processes.map(
            _instance, [(campaign_id, accounts, 16), (campaign_id, accounts[::-1], 16)]
        )

    held = claims_per_holder(db, campaign_id)
    report = audit_campaign(db, campaign_id=campaign_id)
    assert report.ok, report.violations
    assert held == Counter({identity_key(IdentityKind.PHONE, phone): 1 for phone in phones})
    # Every answer is the phone's one code: 192 answers, 8 distinct codes.
    codes = {code for result in answers for code in result}
    assert len(codes) == 8
    assert report.assigned == 8
