"""An instance's copy of each campaign it serves, kept current by a listener.

Every claim checks the campaign (paused? in its window? sold out? which pool generation?). A copy
re-read every half second costs a read per instance per half second: at 64 instances that was
more reads than a sale had codes. Here each instance listens to the campaign's document (one read
when the listener starts, one per change), so a pause, a window change, `sold_out`, or codes
imported after a sell-out reach it as soon as Firestore delivers the change.

A listener can go quiet without an error: the stream stops delivering (the client reconnects
after errors it sees, not after silence), or the instance's CPU is throttled between requests
(Cloud Run) and a change waits unread in a socket. So a listened copy is trusted only while
- a delivery or a read confirmed it less than `trust_seconds` ago: a silent stream is checked by
  one read that often;
- the instance kept serving since a read (a listener's first snapshot is one) confirmed it:
  after more than `max_age` with no request in progress (`serving`), in which its CPU may have
  been throttled, the first call for each campaign reads it, and the others wait for that read.
A read that finds a version the listener has not delivered is used at once; if the listener has
still not delivered it `trust_seconds` later, or it stopped, it is started again.

Without a listener (`trust_seconds` 0) a read is trusted for `max_age`, one caller re-reading
while the others go on with the copy (up to twice that; see shared/cache.py); with `max_age` 0,
every call reads. Versions are ordered by the document's update time: a late delivery or a slow
read never brings back an older one. (Campaigns are never deleted: a missing document is only
ever the first version seen.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from google.cloud import firestore

from shared.campaigns import store
from shared.campaigns.models import CampaignRecord
from shared.errors import CampaignNotFound
from shared.gcp.firestore import Snapshot, campaign_ref

log = logging.getLogger(__name__)

# The first call for a campaign waits this long for the listener's first snapshot (its read)
# before reading the document itself.
FIRST_SNAPSHOT_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Version:
    """The campaign as one read or delivery saw it (record None: no such document)."""

    record: CampaignRecord | None
    update_time: datetime | None

    def older_than(self, other: Version) -> bool:
        if other.update_time is None:
            return False
        return self.update_time is None or self.update_time < other.update_time

    def existing(self, campaign_id: str) -> tuple[CampaignRecord, datetime]:
        if self.record is None or self.update_time is None:
            raise CampaignNotFound(f"Campaign {campaign_id!r} does not exist.")
        return self.record, self.update_time


def version_of(snapshot: Snapshot | None) -> Version:
    if snapshot is None or not snapshot.exists:
        return Version(record=None, update_time=None)
    return Version(record=store.record_from_snapshot(snapshot), update_time=snapshot.update_time)


class Subscription(Protocol):
    @property
    def is_active(self) -> bool: ...

    def unsubscribe(self) -> None: ...


# read(campaign_id) -> the document now; listen(campaign_id, deliver) -> a running listener
Read = Callable[[str], Version]
Listen = Callable[[str, Callable[[Version], None]], Subscription]


def firestore_read(db: firestore.Client) -> Read:
    def read(campaign_id: str) -> Version:
        return version_of(store.get_campaign_snapshot(db, campaign_id=campaign_id))

    return read


def firestore_listen(db: firestore.Client) -> Listen:
    def listen(campaign_id: str, deliver: Callable[[Version], None]) -> Subscription:
        def on_snapshot(documents: list[Snapshot], _changes: object, _read_time: object) -> None:
            deliver(version_of(documents[0] if documents else None))

        subscription: Subscription = campaign_ref(db, campaign_id).on_snapshot(on_snapshot)
        return subscription

    return listen


@dataclass(eq=False)
class _Read:
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


@dataclass(eq=False)
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    version: Version | None = None
    confirmed_at: float = -float("inf")  # when the copy was last known current
    read_at: float = -float("inf")  # when the last read that confirmed it started
    reading: _Read | None = None
    subscription: Subscription | None = None
    delivered: Version | None = None  # the newest version the listener delivered
    first_delivery: threading.Event = field(default_factory=threading.Event)
    ahead: Version | None = None  # read, not delivered by the listener (since ahead_since)
    ahead_since: float = 0.0
    listen_again_at: float = 0.0
    listens: int = 0  # listeners started: a replaced one's late deliveries are ignored
    listened_at: float = 0.0  # when the current listener started (its first snapshot's read)


class LiveCampaigns:
    def __init__(
        self,
        *,
        read: Read,
        listen: Listen | None,
        max_age: float,
        trust_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._listen = listen if trust_seconds > 0 and max_age > 0 else None
        self._max_age = max_age
        self._trust = trust_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        # Requests in progress, since when none has been, and when the instance last started
        # serving after a longer pause than max_age.
        self._serving = 0
        self._quiet_since = clock()
        self._woke_at = -float("inf")

    @classmethod
    def on_firestore(
        cls, db: firestore.Client, *, max_age: float, trust_seconds: float
    ) -> LiveCampaigns:
        return cls(
            read=firestore_read(db),
            listen=firestore_listen(db),
            max_age=max_age,
            trust_seconds=trust_seconds,
        )

    def get(self, campaign_id: str) -> tuple[CampaignRecord, datetime]:
        """The campaign and its update time, as trusted by the rules above."""
        with self.serving():
            return self._version(campaign_id).existing(campaign_id)

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Around a request: while one is in progress the instance has its CPU (Cloud Run
        allocates it to requests), so its listeners keep up with their streams."""
        with self._lock:
            now = self._clock()
            if self._serving == 0 and now - self._quiet_since > self._max_age:
                self._woke_at = now
            self._serving += 1
        try:
            yield
        finally:
            with self._lock:
                self._serving -= 1
                if self._serving == 0:
                    self._quiet_since = self._clock()

    def read(self, campaign_id: str) -> tuple[CampaignRecord, datetime]:
        """A read of the campaign that starts now (the copy takes it if newer)."""
        started = self._clock()
        version = self._read(campaign_id)
        self.offer(campaign_id, version, read_at=started)
        return version.existing(campaign_id)

    def offer(self, campaign_id: str, version: Version, *, read_at: float | None = None) -> None:
        """A version of the document read at `read_at` (now if not given), or one this instance
        wrote (its own guarded write: nothing came in between)."""
        read_at = self._clock() if read_at is None else read_at
        entry = self._entry(campaign_id)
        with entry.lock:
            if entry.version is None or not version.older_than(entry.version):
                if (
                    entry.subscription is not None
                    and entry.delivered is not None
                    and entry.delivered.older_than(version)
                    and (entry.ahead is None or entry.ahead.older_than(version))
                ):
                    entry.ahead, entry.ahead_since = version, self._clock()
                entry.version = version
            # The newest version known was current when this read started, or later.
            entry.confirmed_at = max(entry.confirmed_at, read_at)
            entry.read_at = max(entry.read_at, read_at)

    def close(self) -> None:
        """Stop every listener (tests and benchmarks; a function instance keeps them)."""
        with self._lock:
            entries = list(self._entries.values())
        for entry in entries:
            with entry.lock:
                subscription, entry.subscription = entry.subscription, None
            if subscription is not None:
                subscription.unsubscribe()

    # --- the rules ----------------------------------------------------------------------------
    def _entry(self, campaign_id: str) -> _Entry:
        with self._lock:
            entry = self._entries.get(campaign_id)
            if entry is None:
                entry = self._entries[campaign_id] = _Entry()
            return entry

    def _version(self, campaign_id: str) -> Version:
        entry = self._entry(campaign_id)
        if self._max_age <= 0:
            return self._lead(campaign_id, entry, _Read(), self._clock())
        if self._listen is not None:
            self._keep_listening(campaign_id, entry)
            if entry.version is None and entry.subscription is not None:
                entry.first_delivery.wait(FIRST_SNAPSHOT_SECONDS)
        now = self._clock()
        with entry.lock:
            # Confirmed by no read since the instance came back from a pause: read first.
            suspect = self._listen is not None and entry.read_at < self._woke_at
            age = now - entry.confirmed_at
            window = self._window(entry)
            version = entry.version
            if version is not None and not suspect and age < window:
                return version
            in_flight = entry.reading
            if in_flight is None:
                in_flight = entry.reading = _Read()
                lead = True
            else:
                lead = False
                if version is not None and not suspect and age < 2 * window:
                    return version  # a re-read is under way: go on with the copy meanwhile
        if lead:
            return self._lead(campaign_id, entry, in_flight, now)
        in_flight.done.wait()
        if in_flight.error is not None:
            raise in_flight.error
        with entry.lock:
            assert entry.version is not None
            return entry.version

    def _window(self, entry: _Entry) -> float:
        """How long a confirmation is trusted: a healthy listener's, or a read's."""
        if (
            entry.subscription is not None
            and entry.subscription.is_active
            and entry.delivered is not None
        ):
            return self._trust
        return self._max_age

    def _lead(self, campaign_id: str, entry: _Entry, in_flight: _Read, started: float) -> Version:
        try:
            version = self._read(campaign_id)
            self.offer(campaign_id, version, read_at=started)
            if self._max_age <= 0:
                return version  # nothing is shared: this very read is the answer
            with entry.lock:
                assert entry.version is not None
                return entry.version
        except BaseException as exc:
            in_flight.error = exc
            raise
        finally:
            with entry.lock:
                if entry.reading is in_flight:
                    entry.reading = None
            in_flight.done.set()

    def _keep_listening(self, campaign_id: str, entry: _Entry) -> None:
        """Start the listener, or start it again if it stopped or fell behind a read."""
        assert self._listen is not None
        now = self._clock()
        with entry.lock:
            subscription = entry.subscription
            stopped = subscription is None or not subscription.is_active
            behind = entry.ahead is not None and now - entry.ahead_since > self._trust
            if not (stopped or behind) or now < entry.listen_again_at:
                return
            entry.subscription, entry.delivered, entry.ahead = None, None, None
            entry.listens += 1
            listens, entry.listened_at = entry.listens, now
            if subscription is not None:
                entry.listen_again_at = now + self._trust  # at most one restart that often
                log.warning(
                    "campaign listener started again",
                    extra={"campaign_id": campaign_id, "stopped": stopped, "behind": behind},
                )
            try:
                entry.subscription = self._listen(
                    campaign_id, lambda version: self._deliver(entry, version, listens)
                )
            except Exception:
                # Reads serve meanwhile (trusted max_age each); try again a bound later.
                entry.listen_again_at = now + self._trust
                log.exception("campaign listener not started", extra={"campaign_id": campaign_id})
        if subscription is not None:
            subscription.unsubscribe()

    def _deliver(self, entry: _Entry, version: Version, listens: int) -> None:
        """The listener's snapshot (its thread)."""
        with entry.lock:
            if listens != entry.listens:
                return
            now = self._clock()
            if entry.delivered is None:
                # The first snapshot of a stream is a whole read of the document.
                entry.read_at = max(entry.read_at, entry.listened_at)
            if entry.delivered is None or not version.older_than(entry.delivered):
                entry.delivered = version
            if entry.ahead is not None and not version.older_than(entry.ahead):
                entry.ahead = None
            if entry.version is None or not version.older_than(entry.version):
                entry.version = version
                entry.confirmed_at = max(entry.confirmed_at, now)
        entry.first_delivery.set()
