"""Claims' events share messages (shared/claims/events.py): a window, a size cap, each claim's own
outbox entry when its message fails, and concurrent claims (pure logic on stand-in clients)."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from google.api_core.exceptions import DeadlineExceeded

from shared.claims.events import ClaimBatcher
from shared.events import models as events
from shared.events.bus import EventBus

NOW = datetime(2026, 11, 28, 2, tzinfo=UTC)


class Publisher:
    """Records each message; acknowledges it at once, or never (stalled), or refuses it."""

    def __init__(self, *, stalled: bool = False, refused: bool = False) -> None:
        self.stalled, self.refused = stalled, refused
        self.messages: list[tuple[bytes, dict[str, str]]] = []
        self.lock = threading.Lock()

    def publish_now(self, topic: str, data: bytes, *, timeout: float, **attributes: str) -> None:
        if self.refused:
            raise RuntimeError("publisher closed")
        with self.lock:
            self.messages.append((data, attributes))
        if self.stalled:  # what the API call does when nothing answers
            time.sleep(timeout)
            raise DeadlineExceeded("publish not acknowledged")  # type: ignore[no-untyped-call]

    def claims(self) -> list[list[str]]:
        """The claim ids each message carried."""
        carried = []
        for data, _ in self.messages:
            message = events.parse_message(data)
            members = message.claims if isinstance(message, events.ClaimedBatch) else [message]
            carried.append([m.claim_id for m in members])  # type: ignore[union-attr]
        return carried


class Outbox:
    """db.collection("outbox").document(id).set(fields), remembered by id."""

    def __init__(self) -> None:
        self.kept: dict[str, Any] = {}

    def collection(self, name: str) -> Outbox:
        assert name == "outbox"
        return self

    def document(self, event_id: str) -> Any:
        outbox = self

        class Document:
            def set(self, fields: dict[str, Any]) -> None:
                outbox.kept[event_id] = fields

        return Document()


def batcher(
    publisher: Publisher, outbox: Outbox, *, window: float = 0.05, **caps: int
) -> ClaimBatcher:
    bus = EventBus(
        db=outbox,  # type: ignore[arg-type]
        publisher=publisher,
        project_id="demo-test",
        topic="coupon-events",
        attributes=lambda event: {"webhooks": "1"} if event.campaign_id == "hooked" else {},
    )
    return ClaimBatcher(bus, window_seconds=window, **caps)


def claimed(n: int, campaign_id: str = "sale") -> events.CouponClaimed:
    ids = {"coupon_id": f"coupon-{n}", "user_id": f"user-{n}", "claim_id": f"c{n}"}
    return events.CouponClaimed(
        event_id=f"claimed.{campaign_id}.c{n}", campaign_id=campaign_id, occurred_at=NOW, **ids
    )


def publish_all(
    claims: ClaimBatcher, batch: list[events.CouponClaimed], timeout: float = 5.0
) -> list[bool]:
    """Publish each event from its own thread, all at once (concurrent requests)."""
    with ThreadPoolExecutor(len(batch)) as pool:
        return list(pool.map(lambda e: claims.publish(e, now=NOW, timeout=timeout), batch))


def test_a_lone_claim_is_published_as_its_plain_event_after_the_window() -> None:
    publisher, outbox = Publisher(), Outbox()
    claims = batcher(publisher, outbox, window=0.02)

    started = time.monotonic()
    assert claims.publish(claimed(1), now=NOW, timeout=5) is True

    assert time.monotonic() - started >= 0.02
    [(data, attributes)] = publisher.messages
    assert events.parse_event(data) == claimed(1)
    assert attributes["type"] == "coupon.claimed"
    assert attributes["event_id"] == "claimed.sale.c1"
    assert outbox.kept == {}


def test_concurrent_claims_of_a_campaign_share_one_message_and_all_are_acknowledged() -> None:
    publisher, outbox = Publisher(), Outbox()
    claims = batcher(publisher, outbox, window=0.5)

    results = publish_all(claims, [claimed(n) for n in range(20)])

    assert results == [True] * 20
    assert [sorted(m) for m in publisher.claims()] == [sorted(f"c{n}" for n in range(20))]
    [(data, attributes)] = publisher.messages
    batch = events.parse_message(data)
    assert batch.event_id.startswith("claimed_batch.sale.")
    # Its id and type; no webhooks, so not marked for deliver_webhooks.
    assert attributes == {"event_id": batch.event_id, "type": "coupon.claimed.batch"}
    assert outbox.kept == {}


def test_batches_are_per_campaign_and_keep_their_campaigns_routing() -> None:
    publisher, outbox = Publisher(), Outbox()
    claims = batcher(publisher, outbox, window=0.3)

    mixed = [claimed(n, "hooked") for n in range(3)] + [claimed(n, "quiet") for n in range(3)]
    assert publish_all(claims, mixed) == [True] * 6

    routes = {
        events.parse_message(data).campaign_id: attributes
        for data, attributes in publisher.messages
    }
    assert {
        campaign: attributes.pop("event_id")[:20] for campaign, attributes in routes.items()
    } == {
        "hooked": "claimed_batch.hooked",
        "quiet": "claimed_batch.quiet.",
    }
    assert routes == {
        "hooked": {"type": "coupon.claimed.batch", "webhooks": "1"},
        "quiet": {"type": "coupon.claimed.batch"},
    }


def test_a_full_batch_is_published_at_once_and_the_next_claim_opens_another() -> None:
    """At max_claims the batch goes without waiting out its window (a minute here)."""
    publisher, outbox = Publisher(), Outbox()
    claims = batcher(publisher, outbox, window=60, max_claims=4)

    started = time.monotonic()
    assert publish_all(claims, [claimed(n) for n in range(4)]) == [True] * 4

    assert time.monotonic() - started < 5
    assert [len(m) for m in publisher.claims()] == [4]


def test_a_batch_never_outgrows_its_byte_bound() -> None:
    publisher, outbox = Publisher(), Outbox()
    size = len(events.encode_event(claimed(10))) + 1
    claims = batcher(publisher, outbox, window=0.3, max_bytes=3 * size)

    assert publish_all(claims, [claimed(n) for n in range(10, 19)]) == [True] * 9

    assert sorted(len(m) for m in publisher.claims()) == [3, 3, 3]
    assert all(len(data) <= events.MAX_BATCH_BYTES for data, _ in publisher.messages)


def test_the_largest_batch_fits_the_push_body_limit() -> None:
    """MAX_BATCH_CLAIMS claims with the longest ids and user ids a claim can have, as the push
    subscription delivers them (base64 in its JSON envelope), stay under 64 KiB: the claims
    beyond MAX_BATCH_BYTES go in the next message."""
    widest = events.CouponClaimed(
        event_id="e" * 200,
        campaign_id="c" * 63,
        occurred_at=NOW,
        coupon_id="p" * 128,
        user_id="u" * 128,
        claim_id="k" * 128,
        expires_at=NOW,
    )
    per_claim = len(events.encode_event(widest)) + 1
    fits = min(events.MAX_BATCH_CLAIMS, events.MAX_BATCH_BYTES // per_claim)
    data = events.encode_batch(
        [widest.model_copy(update={"event_id": f"{n:04d}" + "e" * 196}) for n in range(fits)]
    )

    assert len(data) * 4 / 3 + 2048 < 64 * 1024


def test_a_batch_spliced_from_its_members_bytes_is_the_validated_batch() -> None:
    """The publisher encodes each claim once: the message it splices from those bytes is, byte
    for byte, the batch model's own JSON, and count_usage parses it back to the same claims."""
    claims = [claimed(n) for n in range(3)]
    claims.append(claims[2].model_copy(update={"event_id": "claimed.sale.c9", "expires_at": NOW}))

    data = events.encode_batch(claims, [events.encode_event(c) for c in claims])

    validated = events.ClaimedBatch.of(claims).model_dump(mode="json")
    assert data == json.dumps(validated, separators=(",", ":")).encode()
    parsed = events.parse_message(data)
    assert isinstance(parsed, events.ClaimedBatch)
    assert parsed.claims == tuple(claims)


def test_a_batch_that_breaks_the_models_rules_is_not_spliced() -> None:
    """Splicing skips validating each member again, not the batch's own rules."""
    broken = {
        "1 to 100 claims": [],
        "each claim once": [claimed(1), claimed(1)],
        "of its campaign": [claimed(1), claimed(7, "another-sale")],
    }
    for rule, claims in broken.items():
        with pytest.raises(ValueError, match=rule):
            events.encode_batch(claims, [events.encode_event(c) for c in claims])
    with pytest.raises(ValueError, match="1 to 100 claims"):
        events.encode_batch([claimed(n) for n in range(events.MAX_BATCH_CLAIMS + 1)])


def test_a_failed_batch_leaves_each_claim_its_own_outbox_entry() -> None:
    publisher, outbox = Publisher(refused=True), Outbox()
    claims = batcher(publisher, outbox, window=0.2)

    results = publish_all(claims, [claimed(n) for n in range(5)])

    assert results == [False] * 5
    assert sorted(outbox.kept) == sorted(f"claimed.sale.c{n}" for n in range(5))
    kept = outbox.kept["claimed.sale.c3"]
    assert events.event_from_dict(kept["event"]) == claimed(3)
    assert kept["recorded_at"] == NOW


def test_a_stalled_batch_is_given_up_within_each_claims_own_deadline() -> None:
    """A stalled acknowledgement: the batch's request has its leader's time (the claim that
    joined later has at least as long), and neither claim answers past its own deadline; each
    keeps its own event."""
    publisher, outbox = Publisher(stalled=True), Outbox()
    claims = batcher(publisher, outbox, window=0.05)
    answered: dict[str, float] = {}

    def publish(event: events.CouponClaimed, timeout: float) -> bool:
        started = time.monotonic()
        result = claims.publish(event, now=NOW, timeout=timeout)
        answered[event.claim_id] = time.monotonic() - started
        return result

    with ThreadPoolExecutor(2) as pool:
        leader = pool.submit(publish, claimed(1), 0.3)
        time.sleep(0.01)  # the second joins the first's batch
        member = pool.submit(publish, claimed(2), 0.6)
        assert (leader.result(), member.result()) == (False, False)

    assert [len(m) for m in publisher.claims()] == [2]
    assert 0.3 <= answered["c1"] < 0.55
    assert answered["c2"] < 0.6 + 0.25
    assert sorted(outbox.kept) == ["claimed.sale.c1", "claimed.sale.c2"]


def test_a_claim_without_time_left_publishes_at_once_and_waits_no_more() -> None:
    """No window for a claim whose deadline is gone: its event is published (an acknowledgement
    already there counts), else kept in the outbox at once."""
    acked, stalled, outbox = Publisher(), Publisher(stalled=True), Outbox()

    started = time.monotonic()
    assert batcher(acked, outbox, window=1).publish(claimed(1), now=NOW, timeout=0) is True
    assert batcher(stalled, outbox, window=1).publish(claimed(2), now=NOW, timeout=0) is False

    assert time.monotonic() - started < 0.5
    assert (acked.claims(), stalled.claims()) == ([["c1"]], [["c2"]])
    assert sorted(outbox.kept) == ["claimed.sale.c2"]


def test_one_claim_published_twice_rides_once() -> None:
    publisher, outbox = Publisher(), Outbox()
    claims = batcher(publisher, outbox, window=0.3)

    assert publish_all(claims, [claimed(1), claimed(1), claimed(2)]) == [True] * 3

    assert [sorted(m) for m in publisher.claims()] == [["c1", "c2"]]


def test_many_threads_many_campaigns_every_claim_published_once() -> None:
    publisher, outbox = Publisher(), Outbox()
    claims = batcher(publisher, outbox, window=0.002, max_claims=7)
    batch = [claimed(n, f"sale-{n % 3}") for n in range(300)]

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(lambda e: claims.publish(e, now=NOW, timeout=5), batch))

    assert all(results)
    carried = [c for m in publisher.claims() for c in m]
    assert sorted(carried) == sorted(e.claim_id for e in batch)
    assert len(publisher.messages) < 300  # shared, not one each
    assert all(len(m) <= 7 for m in publisher.claims())
