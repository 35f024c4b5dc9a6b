"""A fair drop's draw as pure logic: ids, digest and places, the drawn entries in the waiting
room (admitted in place order, before later arrivals), and verify_drop against it."""

from __future__ import annotations

import hashlib
import hmac
import random
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from google.api_core.exceptions import ServiceUnavailable

from scripts.tools import verify_drop
from shared.campaigns.models import CampaignRecord
from shared.fairness import store
from shared.fairness.draw import (
    SHARDS,
    Draw,
    entries_digest,
    entry_id_for,
    order,
    pack,
    shard_of,
    unpack,
)
from shared.fairness.service import FairnessService
from shared.fairness.store import DropSecret
from shared.waiting_room.admission import AdmissionController

START = 1_800_000_000.0
SEED = bytes(range(32))


def make_draw(count: int, *, drawn_at: float = START + 3) -> Draw:
    rng = random.Random(count)
    ids = sorted(entry_id_for(b"key", f"uid:{rng.random()}") for _ in range(count))
    digest = entries_digest(ids)
    return Draw(
        starts_at=START,
        drawn_at=drawn_at,
        digest=digest,
        seed=SEED.hex(),
        by_place=order(SEED, digest, ids),
    )


def test_entry_ids_are_per_identity_and_the_shards_cover_the_id_space_in_order() -> None:
    assert entry_id_for(b"k", "uid:ann") == entry_id_for(b"k", "uid:ann")
    assert entry_id_for(b"k", "uid:ann") != entry_id_for(b"other", "uid:ann")
    ids = sorted(entry_id_for(b"k", str(i)) for i in range(1000))
    shards = [shard_of(entry_id) for entry_id in ids]
    assert shards == sorted(shards)  # ranges in order: their lists end to end are sorted
    assert set(shards) == set(range(SHARDS))
    assert unpack(pack(ids)) == ids


def test_places_follow_the_published_rule() -> None:
    draw = make_draw(200)
    ids = sorted(draw.by_place)

    def key(entry_id: str) -> bytes:
        message = bytes.fromhex(draw.digest) + entry_id.encode("ascii")
        return hmac.new(SEED, message, hashlib.sha256).digest()

    assert draw.digest == hashlib.sha256("".join(f"{i}\n" for i in ids).encode()).hexdigest()
    assert draw.by_place == sorted(ids, key=key)
    assert [draw.place_of(e) for e in draw.by_place] == list(range(1, 201))


@pytest.mark.parametrize("count", [1, 49, 50, 51, 1234])
def test_each_place_has_its_own_first_attempt_before_the_start(count: int) -> None:
    draw = make_draw(count)

    attempts = [draw.first_attempt(place) for place in range(1, count + 1)]

    assert attempts == sorted(attempts)
    assert len(set(attempts)) == count
    assert attempts[-1] < START
    for place in (1, count // 2 + 1, count):
        at = draw.first_attempt(place)
        assert draw.released(at) == place
        assert draw.released(at - 1e-6) == place - 1
    share = draw.share(-float("inf"), tick_seconds=1.0)
    assert share.before + sum(share.tickets) == count
    assert share.settled
    collapsed = draw.share(START, tick_seconds=1.0)
    assert (collapsed.before, collapsed.tickets) == (count, ())


def test_the_room_admits_the_drawn_places_in_order_then_later_arrivals() -> None:
    draw = make_draw(120)
    rate = 40.0
    room = AdmissionController(rate=rate, tick_seconds=1.0, kp=0.5, now=draw.drawn_at)
    room.update_peers(
        {"drawn": draw.share(-float("inf"), tick_seconds=1.0)}, live=(), now=draw.drawn_at
    )
    late = draw.drawn_at + 0.1
    assert not room.arrive(late).admitted
    admitted: list[int] = []
    late_admitted_after: int | None = None
    now = draw.drawn_at + 0.2
    while now < draw.drawn_at + 10 and late_admitted_after is None:
        room.update_peers(
            {"drawn": draw.share(room.threshold(now), tick_seconds=1.0)}, live=(), now=now
        )
        waiting = [p for p in range(1, draw.count + 1) if p not in admitted]
        for place in waiting:  # everyone polls, in a random order
            if room.decide(draw.first_attempt(place), now).admitted:
                admitted.append(place)
        if room.decide(late, now).admitted:
            late_admitted_after = len(admitted)
        now += 0.25

    assert sorted(admitted) == list(range(1, len(admitted) + 1))  # always a prefix of places
    assert late_admitted_after == draw.count  # the later arrival only after every place


def fetcher(draw: Draw, admissions: list[dict[str, Any]]) -> verify_drop.Fetch:
    fairness: dict[str, Any] = {
        "seed": draw.seed,
        "seed_commitment": hashlib.sha256(bytes.fromhex(draw.seed)).hexdigest(),
        "entries_digest": draw.digest,
        "entries": draw.count,
        "state": "drawn",
    }
    entries = [{"entry_id": e, "place": i + 1} for i, e in enumerate(draw.by_place)]
    pages: dict[str, dict[str, Any]] = {
        "/fairness": fairness,
        "/fairness/entries": {"entries": entries[:7], "next_page_token": "7"},
        "/fairness/entries?page_token=7": {"entries": entries[7:], "next_page_token": None},
        "/fairness/admissions": {"admissions": admissions, "next_page_token": None},
    }
    return pages.__getitem__


def test_verify_drop_accepts_an_honest_drop_and_names_each_kind_of_mismatch() -> None:
    draw = make_draw(10)
    honest: list[dict[str, Any]] = [
        {"entry_id": draw.by_place[0], "place": 1, "admitted_at": 1.0, "released": 3},
        {"entry_id": None, "place": None, "admitted_at": 2.0, "released": 10},
    ]
    assert verify_drop.verify(fetcher(draw, honest)).ok

    early: list[dict[str, Any]] = [
        {"entry_id": draw.by_place[5], "place": 6, "admitted_at": 1.0, "released": 3}
    ]
    queue_jumper: list[dict[str, Any]] = [
        {"entry_id": None, "place": None, "admitted_at": 1.0, "released": 9}
    ]
    for admissions, failed in ((early, "admission order"), (queue_jumper, "admission order")):
        verdict = verify_drop.verify(fetcher(draw, admissions))
        assert not verdict.ok
        assert verdict.checks[failed] is False
    swapped = make_draw(10)
    swapped.by_place[0], swapped.by_place[1] = swapped.by_place[1], swapped.by_place[0]
    assert verify_drop.verify(fetcher(swapped, [])).checks["places"] is False
    other_seed = Draw(
        starts_at=START, drawn_at=START, digest=draw.digest, seed="00" * 32, by_place=draw.by_place
    )
    verdict = verify_drop.verify(fetcher(other_seed, []))
    assert verdict.checks["places"] is False


def test_the_verify_drop_command_exits_0_1_or_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    draw = make_draw(5)
    late: list[dict[str, Any]] = [
        {"entry_id": None, "place": None, "admitted_at": 1.0, "released": 2}
    ]
    answers = {"honest": fetcher(draw, []), "late": fetcher(draw, late)}
    monkeypatch.setattr(verify_drop, "http_fetch", lambda url: answers[url.rsplit("/", 1)[1]])

    assert verify_drop.main(["http://127.0.0.1:8001/v1/campaigns/honest"]) == 0
    assert '"ok": true' in capsys.readouterr().out
    assert verify_drop.main(["http://127.0.0.1:8001/v1/campaigns/late"]) == 1
    assert "later arrival" in capsys.readouterr().out
    assert verify_drop.main(["file:///etc/passwd"]) == 2
    unreadable = {**answers, "drawing": {"/fairness": {"state": "drawing"}}.__getitem__}
    monkeypatch.setattr(verify_drop, "http_fetch", lambda url: unreadable[url.rsplit("/", 1)[1]])
    assert verify_drop.main(["http://127.0.0.1:8001/v1/campaigns/drawing"]) == 2
    assert "not published yet" in capsys.readouterr().err


def test_a_failed_step_of_the_draw_is_retried_at_the_next_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    starts_at = datetime(2030, 3, 1, 10, tzinfo=UTC)
    campaign = CampaignRecord(
        campaign_id="drop",
        title="Drop",
        starts_at=starts_at,
        ends_at=starts_at + timedelta(hours=1),
        pre_queue_seconds=600,
        waiting_room_enabled=True,
        created_at=starts_at - timedelta(days=1),
        updated_at=starts_at - timedelta(days=1),
    )
    failures: list[str] = []

    def unavailable(*args: object) -> None:
        failures.append("read_draw")
        raise ServiceUnavailable("the database is busy")  # type: ignore[no-untyped-call]

    monkeypatch.setattr(store, "read_secret", lambda *args: DropSecret(seed=SEED, entry_key=b"k"))
    monkeypatch.setattr(store, "read_draw", unavailable)
    fairness = FairnessService(
        db=cast(Any, None),
        usage=cast(Any, None),
        tick_seconds=1.0,
        clock=lambda: starts_at + timedelta(minutes=1),
    )

    assert fairness.draw(campaign) is None  # the request is told to retry, not failed
    assert fairness.draw(campaign) is None
    assert failures == ["read_draw", "read_draw"]
