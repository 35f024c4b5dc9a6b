"""An instance's copy of a campaign: what a listener's deliveries, its silence, an idle instance
and reads do to it (pure logic: a clock the test moves, a listener and reads the test drives)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from shared.campaigns.live import LiveCampaigns, Version
from shared.campaigns.models import CampaignRecord
from shared.errors import CampaignNotFound

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
CAMPAIGN = "c1"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def version(n: int, **fields: object) -> Version:
    """The campaign at its n-th write (update time T0 + n seconds)."""
    record = CampaignRecord(
        campaign_id=CAMPAIGN,
        title="t",
        starts_at=T0 - timedelta(hours=1),
        ends_at=T0 + timedelta(days=1),
        created_at=T0,
        updated_at=T0 + timedelta(seconds=n),
        **fields,
    )
    return Version(record=record, update_time=T0 + timedelta(seconds=n))


class Document:
    """The campaign document as reads see it; counts reads, and can hold one at a gate."""

    def __init__(self, current: Version) -> None:
        self.current = current
        self.reads = 0
        self.gate: threading.Event | None = None
        self.started = threading.Event()

    def read(self, campaign_id: str) -> Version:
        assert campaign_id == CAMPAIGN
        self.reads += 1
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(5)
        return self.current


class Listener:
    """A listener the test drives: `deliver` is what Firestore would send."""

    def __init__(self) -> None:
        self.started = 0
        self.active = True
        self.unsubscribed = 0
        self._deliver: Callable[[Version], None] | None = None

    @property
    def is_active(self) -> bool:
        return self.active

    def unsubscribe(self) -> None:
        self.unsubscribed += 1

    def listen(self, campaign_id: str, deliver: Callable[[Version], None]) -> Listener:
        assert campaign_id == CAMPAIGN
        self.started += 1
        self.active = True
        self._deliver = deliver
        return self

    def deliver(self, delivered: Version) -> None:
        assert self._deliver is not None
        self._deliver(delivered)


def live(
    clock: Clock,
    document: Document,
    listener: Listener | None,
    *,
    max_age: float = 0.5,
    trust_seconds: float = 5.0,
) -> LiveCampaigns:
    return LiveCampaigns(
        read=document.read,
        listen=listener.listen if listener is not None else None,
        max_age=max_age,
        trust_seconds=trust_seconds,
        clock=clock,
    )


def listening(clock: Clock, document: Document) -> tuple[LiveCampaigns, Listener]:
    """A copy whose listener has delivered the document as it is."""
    listener = Listener()
    campaigns = live(clock, document, listener)
    threading.Timer(0.01, lambda: listener.deliver(document.current)).start()
    campaigns.get(CAMPAIGN)
    return campaigns, listener


def call_every_tenth_of_a_second(clock: Clock, campaigns: LiveCampaigns, calls: int) -> None:
    """A busy instance: `calls` calls, each a tenth of a second after the one before."""
    for _ in range(calls):
        clock.now += 0.1
        campaigns.get(CAMPAIGN)


def test_the_first_call_takes_the_listeners_first_snapshot_without_a_read() -> None:
    clock, document = Clock(), Document(version(1))

    campaigns, listener = listening(clock, document)

    assert campaigns.get(CAMPAIGN)[1] == T0 + timedelta(seconds=1)
    assert (listener.started, document.reads) == (1, 0)


def test_a_delivered_change_is_served_at_once_without_a_read() -> None:
    clock, document = Clock(), Document(version(1))
    campaigns, listener = listening(clock, document)

    clock.now += 0.1
    listener.deliver(version(2, paused=True))

    assert campaigns.get(CAMPAIGN)[0].paused
    assert document.reads == 0


def test_while_serving_a_silent_listener_is_trusted_for_its_bound_then_one_read_checks() -> None:
    clock, document = Clock(), Document(version(1))
    campaigns, _ = listening(clock, document)
    call_every_tenth_of_a_second(clock, campaigns, 49)  # never idle
    assert document.reads == 0

    document.current = version(2, paused=True)  # a change the stream never delivered
    clock.now += 0.2  # 5.1 s since the first snapshot

    assert campaigns.get(CAMPAIGN)[0].paused
    assert document.reads == 1
    clock.now += 0.1
    campaigns.get(CAMPAIGN)
    assert document.reads == 1  # confirmed again by that read


def test_after_an_idle_gap_the_next_calls_wait_for_one_read() -> None:
    clock, document = Clock(), Document(version(1))
    campaigns, _ = listening(clock, document)
    document.current = version(2, paused=True)  # arrived while the CPU was throttled, unread
    document.gate = threading.Event()
    clock.now += 0.6  # longer than max_age without a call
    pool = ThreadPoolExecutor(6)

    first = pool.submit(campaigns.get, CAMPAIGN)
    assert document.started.wait(5)
    others = [pool.submit(campaigns.get, CAMPAIGN) for _ in range(5)]
    assert not any(f.done() for f in [first, *others])  # nobody is served the old copy
    document.gate.set()

    assert all(f.result(5)[0].paused for f in [first, *others])
    assert document.reads == 1


def test_a_request_in_progress_keeps_the_instance_serving_between_calls() -> None:
    clock, document = Clock(), Document(version(1))
    campaigns, _ = listening(clock, document)

    with campaigns.serving():  # a claim that waits three seconds for a code
        for _ in range(3):
            clock.now += 1.0
            campaigns.get(CAMPAIGN)
    assert document.reads == 0

    clock.now += 1.0  # nothing in progress for a second: the next call reads
    campaigns.get(CAMPAIGN)
    assert document.reads == 1


def test_a_read_ahead_of_a_listener_that_stays_behind_restarts_it() -> None:
    clock, document = Clock(), Document(version(1))
    campaigns, listener = listening(clock, document)
    document.current = version(2, sold_out=True)
    clock.now += 5.1
    assert campaigns.get(CAMPAIGN)[0].sold_out  # the check read found what was not delivered
    call_every_tenth_of_a_second(clock, campaigns, 50)
    assert listener.started == 1  # not yet: the listener had trust_seconds to deliver it

    clock.now += 0.2
    campaigns.get(CAMPAIGN)

    assert (listener.started, listener.unsubscribed) == (2, 1)


def test_a_listener_that_delivers_what_the_read_found_is_kept() -> None:
    clock, document = Clock(), Document(version(1))
    campaigns, listener = listening(clock, document)
    document.current = version(2, sold_out=True)
    clock.now += 5.1
    campaigns.get(CAMPAIGN)
    listener.deliver(version(2, sold_out=True))  # a little late, but there

    call_every_tenth_of_a_second(clock, campaigns, 60)

    assert listener.started == 1


def test_a_stopped_listener_is_started_again_and_reads_are_trusted_max_age_meanwhile() -> None:
    clock, document = Clock(), Document(version(1))
    campaigns, listener = listening(clock, document)
    listener.active = False  # the stream ended with an error it would not retry

    clock.now += 0.1
    campaigns.get(CAMPAIGN)
    assert (listener.started, listener.unsubscribed) == (2, 1)
    # Nothing delivered yet by the new one: a read per half second.
    call_every_tenth_of_a_second(clock, campaigns, 12)
    assert document.reads == 2
    listener.deliver(version(1))
    call_every_tenth_of_a_second(clock, campaigns, 10)
    assert document.reads == 2


def test_a_listener_that_cannot_start_leaves_the_copy_to_reads() -> None:
    clock, document = Clock(), Document(version(1))

    def refused(campaign_id: str, deliver: Callable[[Version], None]) -> Listener:
        raise RuntimeError("no stream")

    campaigns = LiveCampaigns(
        read=document.read, listen=refused, max_age=0.5, trust_seconds=5.0, clock=clock
    )
    for _ in range(7):
        campaigns.get(CAMPAIGN)
        clock.now += 0.1

    assert document.reads == 2  # each trusted for half a second


def test_a_late_delivery_or_a_slow_read_never_brings_back_an_older_version() -> None:
    clock, document = Clock(), Document(version(1))
    campaigns, listener = listening(clock, document)
    campaigns.offer(CAMPAIGN, version(3, sold_out=True))  # e.g. this instance's own write

    listener.deliver(version(2))
    campaigns.offer(CAMPAIGN, version(1))

    assert campaigns.get(CAMPAIGN)[1] == T0 + timedelta(seconds=3)


def test_without_a_listener_a_read_is_trusted_for_max_age() -> None:
    clock, document = Clock(), Document(version(1))
    campaigns = live(clock, document, None)
    campaigns.get(CAMPAIGN)
    clock.now += 0.4
    campaigns.get(CAMPAIGN)
    assert document.reads == 1

    clock.now += 0.2
    document.current = version(2, paused=True)

    assert campaigns.get(CAMPAIGN)[0].paused
    assert document.reads == 2


def test_with_max_age_zero_every_call_reads_and_nothing_listens() -> None:
    clock, document, listener = Clock(), Document(version(1)), Listener()
    campaigns = live(clock, document, listener, max_age=0)

    for _ in range(3):
        campaigns.get(CAMPAIGN)

    assert (document.reads, listener.started) == (3, 0)


def test_a_missing_campaign_is_not_found() -> None:
    clock, document = Clock(), Document(Version(record=None, update_time=None))
    campaigns = live(clock, document, None)

    with pytest.raises(CampaignNotFound):
        campaigns.get(CAMPAIGN)
