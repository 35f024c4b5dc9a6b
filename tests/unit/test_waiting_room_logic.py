"""The waiting room's pure logic on a virtual clock: tickets, the controller, the bucket."""

from __future__ import annotations

import pytest

from shared.waiting_room.admission import AdmissionController, InvalidTicket, Ticket, TicketSigner

NOW = 10_000.0  # the virtual clock's time


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
    ("campaign", "user", "message"),
    [("other-sale", "ann", "another campaign"), ("sale", "bob", "another shopper")],
)
def test_a_borrowed_ticket_is_refused(campaign: str, user: str, message: str) -> None:
    token = signer().issue(Ticket("sale", "ann", first_attempt=1.0))

    with pytest.raises(InvalidTicket, match=message):
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
    room = AdmissionController(rate=10, tick_seconds=1, kp=0.5, now=0.0)

    decisions = [room.arrive(t / 2) for t in range(10)]  # 2 shoppers a second, rate 10

    assert all(d.admitted for d in decisions)
    assert room.backlog == 0


def test_a_burst_is_admitted_in_arrival_order_at_the_target_rate() -> None:
    room = AdmissionController(rate=10, tick_seconds=1, kp=0.5, now=0.0)
    arrivals = [i * 0.001 for i in range(200)]  # 200 shoppers in 0.2 s
    first = [room.arrive(t) for t in arrivals]
    admitted_at: dict[int, float] = {i: 0.0 for i, d in enumerate(first) if d.admitted}

    now = 0.2
    while len(admitted_at) < 200 and now < 60:
        now = round(now + 0.1, 3)
        for i, t in enumerate(arrivals):  # everyone waiting polls every 0.1 s
            if i not in admitted_at and room.decide(t, now).admitted:
                admitted_at[i] = now

    assert len(admitted_at) == 200
    # About 10 a second: 200 shoppers take about 20 s.
    assert 17 <= max(admitted_at.values()) <= 23
    # Fair: nobody is admitted more than one tick after someone who arrived later.
    earliest_later = float("inf")
    for i in sorted(admitted_at, key=lambda i: arrivals[i], reverse=True):
        assert admitted_at[i] <= earliest_later + 1.0
        earliest_later = min(earliest_later, admitted_at[i])


def test_the_wait_estimate_counts_the_shoppers_ahead() -> None:
    room = AdmissionController(rate=5, tick_seconds=1, kp=0.5, now=0.0)
    for i in range(50):
        room.arrive(i * 0.01)

    estimate = room.estimated_wait(0.49)

    assert 8 <= estimate <= 10  # ~45-49 shoppers ahead at 5 a second


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
