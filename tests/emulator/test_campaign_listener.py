"""An instance's listened copy of a campaign (shared/campaigns/live.py) on the emulator: a pause, a
sell-out recorded by another instance and an import after it reach the instance through its
listener, without reading the campaign; a listener that stops delivering is not trusted past its
bound, and is started again."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from google.cloud import firestore

from devkit import codes as fixture_codes
from devkit.claims import claim_as
from devkit.firestore_rpcs import RpcCounter
from shared.campaigns import store as campaign_store
from shared.campaigns.live import (
    LiveCampaigns,
    Subscription,
    Version,
    firestore_listen,
    firestore_read,
)
from shared.claims.engine import ClaimEngine
from shared.clock import utcnow
from shared.errors import CampaignNotActive, SoldOut
from shared.settings import get_settings
from tests.support.stack import PROJECT, MakeCampaign

pytestmark = pytest.mark.emulator

POLL_SECONDS = 0.05
# The engines here are never idle long enough for their first call to read the campaign (the
# rule for an instance whose CPU was throttled between requests): on a busy machine the writes
# between two calls can take longer than the production default, and that read would count.
NEVER_IDLE_SECONDS = 30.0


@pytest.fixture
def instance(emulators: object) -> Iterator[tuple[firestore.Client, RpcCounter]]:
    """A function instance's own client, its RPCs counted from the start."""
    client = firestore.Client(project=PROJECT)
    with RpcCounter(client) as counter:
        yield client, counter
    client.close()  # type: ignore[no-untyped-call]


def listened_engine(client: firestore.Client, *, trust_seconds: float) -> ClaimEngine:
    settings = get_settings().model_copy(
        update={
            "campaign_cache_seconds": NEVER_IDLE_SECONDS,
            "campaign_listen_seconds": trust_seconds,
        }
    )
    return ClaimEngine(db=client, settings=settings)


def until(condition: Callable[[], bool], *, within: float) -> float:
    """Call `condition` every POLL_SECONDS until it holds; how long that took."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < within, "not within the bound"
        time.sleep(POLL_SECONDS)
    return time.monotonic() - started


def test_a_pause_and_a_resume_reach_the_instance_without_reading_the_campaign(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    instance: tuple[firestore.Client, RpcCounter],
) -> None:
    client, counter = instance
    campaign_id = make_campaign(codes=3)
    engine = listened_engine(client, trust_seconds=60)
    try:
        assert not engine.campaign(campaign_id).paused

        campaign_store.update_campaign(
            db, campaign_id=campaign_id, changes={"paused": True}, now=utcnow()
        )
        until(lambda: engine.campaign(campaign_id).paused, within=10)
        with pytest.raises(CampaignNotActive):
            claim_as(engine, campaign_id, "shopper-1")

        campaign_store.update_campaign(
            db, campaign_id=campaign_id, changes={"paused": False}, now=utcnow()
        )
        until(lambda: not engine.campaign(campaign_id).paused, within=10)
        assert claim_as(engine, campaign_id, "shopper-1").created
    finally:
        engine.close()
    counts = counter.snapshot()
    # The listener's first snapshot and two changes; never a read of the campaign document.
    assert counts.reads.get("listen") == 3
    assert counts.reads_by_collection.get("campaigns") == 3


def test_a_sell_out_elsewhere_then_an_import_reach_the_instance(
    db: firestore.Client,
    make_campaign: MakeCampaign,
    instance: tuple[firestore.Client, RpcCounter],
) -> None:
    client, counter = instance
    campaign_id = make_campaign(codes=1)
    listened = listened_engine(client, trust_seconds=60)
    other = ClaimEngine(db=db, settings=get_settings())  # reads the campaign for every claim
    try:
        assert listened.campaign(campaign_id).status_at(utcnow()).value == "active"
        assert claim_as(other, campaign_id, "first").created
        with pytest.raises(SoldOut):  # the other instance proves and records it
            claim_as(other, campaign_id, "second")

        until(lambda: listened.campaign(campaign_id).sold_out, within=10)
        reads = counter.snapshot()
        with pytest.raises(SoldOut):  # answered from the copy: only the shopper's slot is read
            claim_as(listened, campaign_id, "third")
        late = counter.snapshot() - reads
        assert late.reads_by_collection == {"claims": 1}

        fixture_codes.add_codes(db, campaign_id=campaign_id, codes=["AFTER-1"], now=utcnow())
        until(lambda: not listened.campaign(campaign_id).sold_out, within=10)
        assert claim_as(listened, campaign_id, "third").claim.code == "AFTER-1"
    finally:
        listened.close()
        other.close()
    # First snapshot, sold_out, the import: the campaign was never read directly.
    assert counter.snapshot().reads_by_collection.get("campaigns") == 3


class DeafAfterFirst:
    """Firestore's listener, except that after its first snapshot nothing reaches the copy: a
    stream that went quiet without an error."""

    def __init__(self, db: firestore.Client) -> None:
        self._listen = firestore_listen(db)
        self.started = 0

    def __call__(self, campaign_id: str, deliver: Callable[[Version], None]) -> Subscription:
        self.started += 1
        delivered: list[Version] = []

        def first_only(version: Version) -> None:
            if not delivered:
                delivered.append(version)
                deliver(version)

        return self._listen(campaign_id, first_only)


def test_a_listener_gone_quiet_is_trusted_only_for_its_bound_then_started_again(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=1)
    deaf = DeafAfterFirst(db)
    trust = 1.0
    campaigns = LiveCampaigns(
        read=firestore_read(db), listen=deaf, max_age=0.5, trust_seconds=trust
    )
    try:
        campaigns.get(campaign_id)
        first_snapshot = time.monotonic()
        campaign_store.update_campaign(
            db, campaign_id=campaign_id, changes={"paused": True}, now=utcnow()
        )
        # The stream never delivers the pause: the copy is checked by a read once the
        # listener's silence is older than its bound.
        until(lambda: campaigns.get(campaign_id)[0].paused, within=trust + 2)
        assert time.monotonic() - first_snapshot >= trust
        # That read found what the listener had not delivered; it still has not, a bound later.
        until(lambda: bool(campaigns.get(campaign_id)) and deaf.started == 2, within=trust + 2)
    finally:
        campaigns.close()
