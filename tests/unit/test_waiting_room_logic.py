"""The waiting room's pure logic on a virtual clock: tickets, the controller, the bucket, and
several instances sharing one threshold through heartbeats that arrive late: the start of a
sale, a dead instance, a late-joining one."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scripts.bench.waiting_room import Config, FairPolicy, make_arrivals, measure, simulate
from shared.errors import TicketNotYours
from shared.waiting_room.admission import (
    HEARD_WITHIN_SECONDS,
    SLOT_SECONDS,
    AdmissionController,
    InvalidTicket,
    RoomShare,
    Ticket,
    TicketSigner,
    UnreadableShare,
    start_place,
)
from shared.waiting_room.service import LIVE_SECONDS

NOW = 10_000.0  # the virtual clock's time


class Board:
    """The heartbeat documents, without delay: exchange() writes an instance's share and hands
    it everyone else's, as the service's exchange does (live: written within LIVE_SECONDS)."""

    def __init__(self) -> None:
        self.shares: dict[str, RoomShare] = {}

    def exchange(self, name: str, room: AdmissionController, now: float) -> None:
        self.shares[name] = room.share(now)
        others = {k: v for k, v in self.shares.items() if k != name}
        live = {k for k, v in others.items() if now - v.published_at < LIVE_SECONDS}
        room.update_peers(others, live=live, now=now)


def settled_room(
    rate: float, *, board: Board | None = None, name: str = "a"
) -> tuple[AdmissionController, Board]:
    """A room of one instance that has learnt the room (heartbeats since 0.0)."""
    board = board or Board()
    room = AdmissionController(rate=rate, tick_seconds=1, kp=0.5, now=0.0)
    board.exchange(name, room, 0.0)
    board.exchange(name, room, HEARD_WITHIN_SECONDS)
    assert room.settled
    return room, board


def signer(max_age: int = 600, *, now: float = NOW, max_wait: int = 86_400) -> TicketSigner:
    return TicketSigner(
        secret="k" * 40, max_age_seconds=max_age, max_wait_seconds=max_wait, clock=lambda: now
    )


def test_a_ticket_round_trips_and_keeps_its_first_attempt() -> None:
    token = signer().issue(Ticket("sale", "ann", first_attempt=1000.5))

    assert signer().verify(token, campaign_id="sale", user_id="ann") == Ticket(
        "sale", "ann", 1000.5
    )


@pytest.mark.parametrize(
    ("campaign", "user", "error", "message"),
    [
        ("other-sale", "ann", InvalidTicket, "another campaign"),
        ("sale", "bob", TicketNotYours, "another shopper"),
    ],
)
def test_a_borrowed_ticket_is_refused(
    campaign: str, user: str, error: type[Exception], message: str
) -> None:
    token = signer().issue(Ticket("sale", "ann", first_attempt=1.0))

    with pytest.raises(error, match=message):
        signer().verify(token, campaign_id=campaign, user_id=user)


def test_a_forged_ticket_is_refused() -> None:
    token = signer().issue(Ticket("sale", "ann", first_attempt=5000.0))
    forged = TicketSigner(secret="x" * 40, max_age_seconds=600).issue(Ticket("sale", "ann", NOW))

    with pytest.raises(InvalidTicket, match="forged"):
        signer().verify(forged, campaign_id="sale", user_id="ann")
    with pytest.raises(InvalidTicket, match="forged"):
        signer().verify(token[:-3] + "AAA", campaign_id="sale", user_id="ann")


def test_an_expired_ticket_is_refused() -> None:
    token = signer().issue(Ticket("sale", "ann", first_attempt=1.0))

    with pytest.raises(InvalidTicket, match="expired"):
        signer(max_age=-1).verify(token, campaign_id="sale", user_id="ann")


def test_with_spare_capacity_everyone_passes_at_once() -> None:
    room, _ = settled_room(10)

    decisions = [room.arrive(1 + t / 2) for t in range(10)]  # 2 shoppers a second, rate 10

    assert all(d.admitted for d in decisions)
    assert room.backlog(6.0) == 0


def test_an_instance_that_has_not_heard_the_room_yet_queues_everyone_briefly() -> None:
    """The first moments of a sale: nobody is let straight in before the instance has heard
    the others, and the first tick's quota passes them as soon as the horizon covers them."""
    board = Board()
    room = AdmissionController(rate=10, tick_seconds=1, kp=0.5, now=0.0)
    board.exchange("a", room, 0.0)

    first = [room.arrive(t / 100) for t in range(3)]
    held = room.decide(0.0, 0.1)
    for t in (0.2, 0.3, 0.4, 0.5, 0.6):  # heartbeats, as the service exchanges them
        board.exchange("a", room, t)

    assert not any(d.admitted for d in first)
    assert not held.admitted  # not past the horizon yet
    assert room.settled
    assert [room.decide(t / 100, 0.6).admitted for t in range(3)] == [True, True, True]


def test_a_burst_is_admitted_in_arrival_order_at_the_target_rate() -> None:
    room, board = settled_room(10)
    arrivals = [1 + i * 0.001 for i in range(200)]  # 200 shoppers in 0.2 s
    first = [room.arrive(t) for t in arrivals]
    admitted_at: dict[int, float] = {i: 0.0 for i, d in enumerate(first) if d.admitted}

    now = 1.2
    while len(admitted_at) < 200 and now < 60:
        now = round(now + 0.1, 3)
        board.exchange("a", room, now)
        for i, t in enumerate(arrivals):  # everyone waiting polls every 0.1 s
            if i not in admitted_at and room.decide(t, now).admitted:
                admitted_at[i] = now

    assert len(admitted_at) == 200
    # About 10 a second: 200 shoppers take about 20 s.
    assert 17 <= max(admitted_at.values()) - 1 <= 23
    # Fair: nobody is admitted more than one tick after someone who arrived later.
    earliest_later = float("inf")
    for i in sorted(admitted_at, key=lambda i: arrivals[i], reverse=True):
        assert admitted_at[i] <= earliest_later + 1.0
        earliest_later = min(earliest_later, admitted_at[i])


def test_the_wait_estimate_counts_the_shoppers_ahead() -> None:
    room, _ = settled_room(5)
    for i in range(50):
        room.arrive(1 + i * 0.01)

    estimate = room.estimated_wait(1.49, 1.5)

    # The first 5 passed at once (the bucket), 44 queued before this shopper, 5 of whom this
    # tick's quota passes: 39 ahead at 5 a second.
    assert estimate == pytest.approx(39 / 5, abs=0.5)


def _config(instances: int, *, lag: float, shoppers: int = 3000, rate: float = 100.0) -> Config:
    return Config(
        shoppers=shoppers,
        arrival_seconds=5.0,
        arrivals="uniform",
        rate=rate,
        tick=1.0,
        kp=0.5,
        jitter_low=0.5,
        jitter_high=1.0,
        instances=instances,
        heartbeat_lag=lag,
        exchange_seconds=0.0,
        seed=11,
        horizon_seconds=600.0,
    )


@pytest.mark.parametrize("instances", [1, 2, 4, 10])
def test_instances_sharing_heartbeats_admit_in_one_order_at_the_target_rate(
    instances: int,
) -> None:
    """Polls reach instances at random; each instance hears the others' counts only through
    heartbeats (seen 0.1 s after they are written). Nobody is admitted more than a tick after
    someone who came later, from the sale's first second on. 1,500 shoppers in 5 s queue 15 s
    at 100 a second: the worst lag and the rate come out as with 3,000 (and the random policy
    breaks the order as badly), for a third of the CPU."""
    cfg = _config(instances, lag=0.1, shoppers=1500)
    arrivals = make_arrivals(cfg)

    run = simulate(FairPolicy(cfg), arrivals, cfg, seed=cfg.seed + 1)
    figures = measure("fair", run, arrivals, cfg)

    assert figures.never_admitted == 0
    assert figures.order_violations == 0
    assert figures.order_worst_lag_s <= cfg.tick
    assert abs(figures.rate_mean - cfg.rate) <= 0.1 * cfg.rate


@pytest.mark.parametrize("instances", [1, 2, 10])
def test_slow_heartbeat_exchanges_keep_the_order(instances: int) -> None:
    """300 shoppers in half a second at 50 a second, each exchange's read taking 0.5 s (a busy
    instance, a slow emulator): the horizon lags the clock by a second and more. A lone
    instance whose horizon held the threshold back must not pass that tick's quota later all at
    once: its exact bucket would then let the passed in by who polls first."""
    cfg = replace(
        _config(instances, lag=0.1, shoppers=300, rate=50.0),
        arrival_seconds=0.5,
        exchange_seconds=0.5,
    )
    arrivals = make_arrivals(cfg)

    run = simulate(FairPolicy(cfg), arrivals, cfg, seed=cfg.seed + 1)
    figures = measure("fair", run, arrivals, cfg)

    assert figures.never_admitted == 0
    assert figures.order_violations == 0


def test_a_quota_the_horizon_held_back_is_lost_not_banked() -> None:
    """Alone, with the horizon stuck behind the queue for two ticks: once it moves, the
    threshold passes one tick's quota, not the three ticks' that went by."""
    room, _ = settled_room(10)
    for i in range(100):
        room.arrive(1 + i * 0.005)  # 100 shoppers between 1.0 and 1.5
    room.update_peers({}, live=(), now=1.0)  # horizon 0.5: nobody's ticket is known complete
    room.update_peers({}, live=(), now=2.0)  # 1.5
    assert room.passed(2.5) == pytest.approx(10)  # nothing passed before tick 2: its quota only

    room.update_peers({}, live=(), now=3.0)  # the horizon covers everyone now

    assert room.passed(3.5) == pytest.approx(20)  # tick 2's quota and tick 3's: not 40


def test_a_sale_starting_on_ten_instances_lets_nobody_in_before_they_heard_each_other() -> None:
    """2,000 shoppers in the first second over 10 instances that have never heard of each other:
    none is let straight in while instances cannot know who queues elsewhere, yet the first are
    admitted well within the first second, in order."""
    cfg = replace(_config(10, lag=0.1, shoppers=2000, rate=200.0), arrival_seconds=1.0)
    arrivals = make_arrivals(cfg)

    run = simulate(FairPolicy(cfg), arrivals, cfg, seed=cfg.seed + 1)
    figures = measure("fair", run, arrivals, cfg)

    straight_in = [i for i, t in enumerate(arrivals) if run.admitted_at[i] == t]
    assert not [i for i in straight_in if arrivals[i] < HEARD_WITHIN_SECONDS]
    assert min(run.admitted_at) < 1.0  # not stalled for a tick
    assert figures.order_violations == 0
    assert figures.never_admitted == 0


def test_thresholds_agree_once_everyone_has_heard_everyone() -> None:
    cfg = _config(3, lag=0.5)
    policy = FairPolicy(cfg)
    rng = random.Random(3)
    for arrival in make_arrivals(cfg):
        policy.first(rng.randrange(3), arrival)
    # Heartbeats go round (each instance's first request after its interval exchanges them).
    for now in (7.0, 9.5, 12.0):
        for instance in range(3):
            policy.poll(instance, 1e9, now)

    thresholds = {round(c.threshold(12.5), 6) for c in policy.controllers}
    passed = {round(c.passed(12.5), 6) for c in policy.controllers}

    assert len(thresholds) == 1
    assert len(passed) == 1


def test_a_late_joining_instance_takes_the_rooms_place_from_the_others_heartbeats() -> None:
    old, board = settled_room(10, name="old")
    for i in range(400):
        old.arrive(1 + i * 0.01)  # 400 shoppers in 4 s: a 40 s queue at 10 a second
    for second in range(2, 31):
        board.exchange("old", old, float(second))

    new = AdmissionController(rate=10, tick_seconds=1, kp=0.5, now=30.1)
    board.exchange("new", new, 30.1)  # its first request: it hears the room at once
    board.exchange("old", old, 30.2)
    board.exchange("new", new, 30.3)

    assert new.settled
    threshold = old.threshold(30.5)
    assert new.threshold(30.5) == pytest.approx(threshold, abs=1e-9)
    assert 3.5 <= threshold <= 4.5  # ~300 of the 400 passed by then
    assert new.decide(threshold - 0.01, 30.5).admitted
    assert not new.decide(threshold + 0.05, 30.5).admitted
    assert not new.arrive(30.5).admitted  # a queue it knows of: a ticket, not straight in


def _run(
    rooms: dict[str, AdmissionController],
    board: Board,
    arrivals: list[tuple[float, str]],
    *,
    beats: dict[str, list[float]],
    since: float,
    until: float,
) -> None:
    """The arrivals (time, instance) and heartbeats in (since, until], in time order."""
    events = [(t, 1, name) for t, name in arrivals if since < t <= until]
    events += [(t, 0, name) for name, times in beats.items() for t in times if since < t <= until]
    for t, kind, name in sorted(events):
        if kind:
            rooms[name].arrive(t)
        else:
            board.exchange(name, rooms[name], t)


def test_instances_that_heard_different_heartbeats_differ_only_at_their_horizons() -> None:
    """No guessing: an instance with older news of another holds the threshold at its horizon
    (the other's older heartbeat) where an instance that knows more would put it further, and
    both put it at the same place below it."""
    board = Board()
    rooms = {n: AdmissionController(rate=50, tick_seconds=1, kp=0.5, now=0.0) for n in "ab"}
    # 80 a second for 4 s from the sale's start, in turn.
    arrivals = [(i / 80, "ab"[i % 2]) for i in range(320)]
    beats = {"a": [0.0, 0.25, 0.5, 1.0, 1.5, 2.1, 3.1], "b": [0.0, 0.25, 0.5, 1.0, 1.5, 2.0]}
    _run(rooms, board, arrivals, beats=beats, since=-1.0, until=2.05)
    stale = board.shares["b"]  # b's counts up to 2.0
    beats["b"].append(3.0)
    _run(rooms, board, arrivals, beats=beats, since=2.05, until=3.1)
    late = AdmissionController(rate=50, tick_seconds=1, kp=0.5, now=3.1)
    late.update_peers({"a": board.shares["a"], "b": stale}, live={"a", "b"}, now=3.1)

    # Tick 3 passes 4 ticks' worth, 200 of the 80 a second: up to 2.5 s of first attempts.
    best = rooms["a"].threshold(3.5)  # a heard the most: b's counts up to 3.0
    assert best == pytest.approx(2.5, abs=0.05)
    # Everyone else stops at the same place or, short of it, at their own horizon.
    for room in (rooms["b"], late):
        assert room.horizon < best
        assert room.threshold(3.5) == pytest.approx(min(best, room.horizon), abs=1e-9)
    assert late.horizon == pytest.approx(2.0)  # b's older heartbeat: not guessed further
    # Below every horizon, one threshold.
    assert late.threshold(2.5) == pytest.approx(rooms["a"].threshold(2.5), abs=1e-9)
    assert rooms["b"].threshold(2.5) == pytest.approx(rooms["a"].threshold(2.5), abs=1e-9)


def test_a_dead_instance_holds_the_threshold_back_only_until_its_heartbeat_is_stale() -> None:
    board = Board()
    rooms = {n: AdmissionController(rate=10, tick_seconds=1, kp=0.5, now=0.0) for n in "abc"}
    last_of_c = 1.5  # then c dies: no heartbeat, no request
    # 40 a second for 4 s, in turn while c lives: a queue for about 16 s.
    arrivals = [(i / 40, "abc"[i % 3] if i / 40 <= last_of_c else "ab"[i % 2]) for i in range(160)]
    every = [round(0.25 * k, 2) for k in range(80)]  # heartbeats every 0.25 s for 20 s
    beats = {"a": every, "b": every, "c": [t for t in every if t <= last_of_c]}
    thresholds: dict[float, float] = {}
    for step in range(60):
        until = step * 0.25
        _run(rooms, board, arrivals, beats=beats, since=until - 0.25, until=until)
        thresholds[until] = rooms["a"].threshold(until + 0.01)

    stale = last_of_c + LIVE_SECONDS
    # Held at c's last heartbeat while it counts as live, going on once it is stale: not
    # frozen for good.
    assert last_of_c - 1.5 * SLOT_SECONDS <= thresholds[5.0] <= last_of_c  # in whole slots
    assert max(th for t, th in thresholds.items() if t < stale) <= last_of_c
    assert thresholds[stale + 1] > last_of_c + 0.5  # ~90 passed by then: 2.25 s of arrivals
    # What c published still counts: its tickets are in the line.
    assert rooms["a"].issued_before(last_of_c) == pytest.approx(
        rooms["c"].issued_before(last_of_c), abs=1e-9
    )


def test_a_share_survives_the_heartbeat_document() -> None:
    room = AdmissionController(rate=10, tick_seconds=1, kp=0.5, now=0.0)
    for i in range(50):
        room.arrive(i * 0.02)
    share = room.share(1.5)

    assert RoomShare.from_fields(share.fields()) == share
    assert sum(share.tickets) + share.before == 50 - sum(share.admitted)


def test_a_ticket_re_signed_at_each_poll_outlives_its_signature_life() -> None:
    """Finding 11: a shopper polling for longer than a ticket's life keeps their place."""
    clock = [NOW]
    room_signer = TicketSigner(
        secret="k" * 40, max_age_seconds=3600, max_wait_seconds=86_400, clock=lambda: clock[0]
    )
    first = room_signer.issue(Ticket("sale", "ann", first_attempt=NOW))
    token = first
    for _ in range(5):  # five polls 50 minutes apart: over four hours in line
        clock[0] += 3000
        ticket = room_signer.verify(token, campaign_id="sale", user_id="ann")
        token = room_signer.issue(ticket)  # what the waiting room answers at every poll

    assert room_signer.verify(token, campaign_id="sale", user_id="ann").first_attempt == NOW
    with pytest.raises(InvalidTicket, match="expired"):
        room_signer.verify(first, campaign_id="sale", user_id="ann")  # never re-signed


def test_no_ticket_keeps_a_place_past_the_longest_wait() -> None:
    token = signer(now=NOW, max_wait=86_400).issue(Ticket("sale", "ann", first_attempt=NOW))

    # Re-signed a moment ago, but its first attempt is more than a day old.
    later = signer(now=NOW + 86_401, max_wait=86_400)
    resigned = later.issue(Ticket("sale", "ann", NOW))
    with pytest.raises(InvalidTicket, match="expired"):
        later.verify(resigned, campaign_id="sale", user_id="ann")
    assert signer().verify(token, campaign_id="sale", user_id="ann").first_attempt == NOW


def test_a_heartbeat_of_another_version_is_unreadable_not_a_crash() -> None:
    room = AdmissionController(rate=10, tick_seconds=1, kp=0.5, now=0.0)
    fields = room.share(0.0).fields()
    del fields["since"]

    with pytest.raises(UnreadableShare):
        RoomShare.from_fields(fields)
    with pytest.raises(UnreadableShare):
        RoomShare.from_fields({**room.share(0.0).fields(), "tickets": b"not zlib"})


def test_places_in_a_sales_first_seconds_do_not_follow_who_polled_first() -> None:
    start, window = 1_000.0, 2.0

    def place(now: float, draw: float) -> float:
        return start_place(now, starts_at=start, window=window, draw=draw)

    first_poller, last_of_window = place(start + 0.01, 0.9), place(start + 1.99, 0.1)
    after_window, much_later = place(start + 2.5, 0.0), place(start + 9.0, 0.5)

    assert last_of_window < first_poller  # the draw decides, not the poll
    assert start + window <= last_of_window < first_poller < start + 2 * window
    assert after_window == start + 2 * window  # behind the whole window, never in the past
    assert much_later == start + 9.0  # past the start, arrival order again
    assert place(start - 5.0, 0.3) == start - 5.0  # before the start (never in a room)
    assert start_place(start + 0.5, starts_at=start, window=0.0, draw=0.3) == start + 0.5
