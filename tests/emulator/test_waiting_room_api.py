"""The waiting room through claim_api on the emulators: 429 with a ticket, keeping one's place,
refused tickets, sold out at the next poll, the public status, and a new room's first moments."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from shared.campaigns import store as campaign_store
from shared.container import instance_services
from shared.errors import WaitingRoom
from shared.settings import get_settings
from shared.waiting_room.admission import DUE_JITTER, NEAR_RETRY, InvalidTicket, Ticket
from shared.waiting_room.service import WaitingRoomService
from tests.support.api import ADMIN, auth, function_client
from tests.support.stack import MakeCampaign, Pump, reset_instance

pytestmark = pytest.mark.emulator

# Rooms here admit 0.1 shoppers a second: whoever comes second waits, however slow the machine.
# A room's first moments on an instance (until it has heard the others' heartbeats) queue
# everyone, the first shopper too.


_browsers: dict[str, FlaskClient] = {}


@pytest.fixture
def fresh_stock() -> Iterator[None]:
    """The codes left read afresh at every poll (each instance otherwise trusts them a second)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CODEDROP_STOCK_CACHE_SECONDS", "0")
        reset_instance()
        yield
    reset_instance()  # back to the suite's settings


def browser(user: str) -> FlaskClient:
    """Each shopper has a browser of their own, with its own cookie jar."""
    if user not in _browsers:
        _browsers[user] = function_client("claim_api")
    return _browsers[user]


def claim(_: FlaskClient, campaign_id: str, user: str, ticket: str | None = None):  # type: ignore[no-untyped-def]
    headers = auth(user)
    if ticket:
        headers["X-Waiting-Room-Ticket"] = ticket
    return browser(user).post(f"/v1/campaigns/{campaign_id}/claims", headers=headers)


@pytest.fixture
def busy_room(make_campaign: MakeCampaign) -> str:
    """A campaign of 50 codes whose room admits 0.1 shoppers a second."""
    return make_campaign(codes=50, waiting_room_enabled=True, admissions_per_second=0.1)


def queued_ticket(client: FlaskClient, campaign_id: str, user: str) -> str:
    """The ticket `user` is given in a queue with a shopper ahead."""
    claim(client, campaign_id, f"{user}-ahead")
    ticket: str = claim(client, campaign_id, user).get_json()["ticket"]
    return ticket


def test_a_busy_room_queues_shoppers_with_a_signed_ticket(
    claim_client: FlaskClient, busy_room: str
) -> None:
    first = claim(claim_client, busy_room, "early")
    second = claim(claim_client, busy_room, "later")

    assert first.status_code == 429  # the room's first moments: nobody straight through
    assert second.status_code == 429
    body = second.get_json()
    assert body["error_code"] == "WAITING_ROOM"
    assert body["ticket"]
    assert body["estimated_wait_seconds"] is not None
    # Within about a tick (sooner when due at once, just past the next tick when due then), and
    # the header says it in whole seconds, rounded up.
    tick_ms = get_settings().waiting_room_tick_seconds * 1000
    assert NEAR_RETRY[0] * tick_ms <= body["retry_after_ms"] <= (1 + DUE_JITTER) * tick_ms
    assert second.headers["Retry-After"] == str(max(1, math.ceil(body["retry_after_ms"] / 1000)))
    assert f"codedrop_ticket_{busy_room}=" in second.headers["Set-Cookie"]
    assert "HttpOnly" in second.headers["Set-Cookie"]
    status = claim_client.get(f"/v1/campaigns/{busy_room}").get_json()["waiting_room"]
    assert status["enabled"] is True
    assert status["engaged"] is True


def test_the_browser_cookie_keeps_the_place_without_any_header(
    claim_client: FlaskClient, busy_room: str
) -> None:
    ticket = queued_ticket(claim_client, busy_room, "cookie-shopper")

    again = claim(claim_client, busy_room, "cookie-shopper")

    # Re-signed (its life slides with the polls) but for the same place in line.
    signer = instance_services().room.signer
    kept = signer.verify(
        again.get_json()["ticket"], campaign_id=busy_room, user_id="cookie-shopper"
    )
    assert kept == signer.verify(ticket, campaign_id=busy_room, user_id="cookie-shopper")


def test_refreshing_keeps_the_original_place(claim_client: FlaskClient, busy_room: str) -> None:
    ticket = queued_ticket(claim_client, busy_room, "patient")

    again = claim(claim_client, busy_room, "patient", ticket)

    assert again.status_code == 429
    signer = instance_services().room.signer
    kept = signer.verify(again.get_json()["ticket"], campaign_id=busy_room, user_id="patient")
    original = signer.verify(ticket, campaign_id=busy_room, user_id="patient")
    assert kept.first_attempt == original.first_attempt


def test_a_ticket_older_than_the_threshold_is_admitted(
    claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=50, waiting_room_enabled=True, admissions_per_second=50)
    # A shopper who has been waiting since long before anyone else (an hour: tickets are
    # re-signed at every poll, so that is a valid place in line).
    ticket = instance_services().room.signer.issue(
        Ticket(campaign_id, "veteran", first_attempt=time.time() - 3600)
    )

    response = claim(claim_client, campaign_id, "veteran", ticket)

    assert response.status_code == 201


@pytest.mark.parametrize(
    ("case", "status", "error_code"),
    [
        ("forged", 400, "INVALID_TICKET"),
        ("borrowed", 403, "TICKET_NOT_YOURS"),
        ("other-campaign", 400, "INVALID_TICKET"),
    ],
)
def test_forged_or_borrowed_tickets_are_refused_and_never_admit(
    claim_client: FlaskClient, make_campaign: MakeCampaign, case: str, status: int, error_code: str
) -> None:
    campaign_id = make_campaign(codes=5, waiting_room_enabled=True, admissions_per_second=0.1)
    signer = instance_services().room.signer
    ticket = {
        "forged": signer.issue(Ticket(campaign_id, "mallory", 1.0))[:-4] + "AAAA",
        "borrowed": signer.issue(Ticket(campaign_id, "alice", 1.0)),
        "other-campaign": signer.issue(Ticket("another-sale", "mallory", 1.0)),
    }[case]

    response = claim(claim_client, campaign_id, "mallory", ticket)

    assert response.status_code == status
    assert response.get_json()["error_code"] == error_code


def test_a_new_room_lets_shoppers_straight_through_once_it_has_heard_the_others(
    claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    """Queued for a moment at the start (the instance has not heard the others yet), then, with
    spare capacity, straight through: from the tick after the one the first shopper was let in
    (a lone instance counts a ticket as passed once its horizon has covered it in a tick)."""
    campaign_id = make_campaign(codes=50, waiting_room_enabled=True, admissions_per_second=50)
    tick = get_settings().waiting_room_tick_seconds

    queued = claim(claim_client, campaign_id, "first-moment")
    assert queued.status_code == 429
    ticket = queued.get_json()["ticket"]
    started = time.time()
    polls = 0
    while (response := claim(claim_client, campaign_id, "first-moment", ticket)).status_code == 429:
        polls += 1
        assert time.time() - started < 10 * tick, "still queued with spare capacity"
        ticket = response.get_json()["ticket"]
        time.sleep(response.get_json()["retry_after_ms"] / 1000)
    assert response.status_code == 201
    admitted_by = time.time()
    # Once the tick it was let in is over, nobody is queued.
    time.sleep(max(0.0, (math.floor(admitted_by / tick) + 1) * tick + 0.05 - time.time()))

    assert claim(claim_client, campaign_id, "straight-through").status_code == 201
    status = claim_client.get(f"/v1/campaigns/{campaign_id}").get_json()["waiting_room"]
    assert status["engaged"] is False


def test_sold_out_reaches_waiting_shoppers_at_their_next_poll(
    admin_client: FlaskClient,
    claim_client: FlaskClient,
    make_campaign: MakeCampaign,
    pump_events: Pump,
    fresh_stock: None,
) -> None:
    # The last code went before the room was switched on.
    campaign_id = make_campaign(codes=1)
    assert claim(claim_client, campaign_id, "lucky").status_code == 201
    patched = admin_client.patch(
        f"/v1/campaigns/{campaign_id}",
        json={"waiting_room_enabled": True, "admissions_per_second": 0.1},
        headers=ADMIN,
    )
    assert patched.status_code == 200
    waiting = claim(claim_client, campaign_id, "waiting")
    assert waiting.status_code == 429
    pump_events()  # the counters learn that the last code went

    poll = claim(claim_client, campaign_id, "waiting", waiting.get_json()["ticket"])

    assert poll.status_code == 410
    assert poll.get_json()["error_code"] == "SOLD_OUT"
    assert claim(claim_client, campaign_id, "lucky").status_code == 200  # holders keep theirs


def test_the_room_is_managed_through_the_admin_api(
    admin_client: FlaskClient, claim_client: FlaskClient, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=5)
    assert claim_client.get(f"/v1/campaigns/{campaign_id}").get_json()["waiting_room"] == {
        "enabled": False,
        "engaged": False,
        "estimated_wait_seconds": 0.0,
    }

    patched = admin_client.patch(
        f"/v1/campaigns/{campaign_id}",
        json={"waiting_room_enabled": True, "admissions_per_second": 25},
        headers=ADMIN,
    )

    assert patched.status_code == 200
    assert patched.get_json()["waiting_room_enabled"] is True
    assert patched.get_json()["admissions_per_second"] == 25
    public = claim_client.get(f"/v1/campaigns/{campaign_id}").get_json()["waiting_room"]
    assert public["enabled"] is True
    bad = admin_client.patch(
        f"/v1/campaigns/{campaign_id}", json={"admissions_per_second": 0}, headers=ADMIN
    )
    assert bad.status_code == 400


def test_a_shopper_waiting_longer_than_a_ticket_life_keeps_their_place(
    db: firestore.Client, make_campaign: MakeCampaign
) -> None:
    """Finding 11: a shopper waiting more than the ticket's hour once lost their place. Every
    poll re-signs the ticket with its first attempt (sliding), up to the longest wait."""
    campaign_id = make_campaign(codes=50, waiting_room_enabled=True, admissions_per_second=1e-6)
    campaign = campaign_store.get_campaign(db, campaign_id=campaign_id)
    settings = get_settings()
    # The threshold passes a 20 ms slot's tickets as if spread over the slot, so a ticket at a
    # slot's very start passes with the first sliver of quota. The clock starts at a whole
    # second (a slot's start: the first's ticket at that worst place on every run, where
    # time.time() put it about 1% of runs); the patient comes a second later, in a slot of
    # their own that the room's quota (under 0.02 tickets in these three hours) never reaches.
    clock = [float(int(time.time()))]
    room = WaitingRoomService(db=db, settings=settings, clock=lambda: clock[0])
    with pytest.raises(WaitingRoom):  # the room's first moments: the first queues too
        room.admit(campaign=campaign, user_id="first", ticket_token=None, remaining=50)
    clock[0] += 1
    with pytest.raises(WaitingRoom) as queued:
        room.admit(campaign=campaign, user_id="patient", ticket_token=None, remaining=50)
    first_ticket = queued.value.details["ticket"]
    place = room.signer.verify(first_ticket, campaign_id=campaign_id, user_id="patient")

    ticket = first_ticket
    for _ in range(4):  # polls 50 minutes apart: over three hours in line
        clock[0] += 3000
        with pytest.raises(WaitingRoom) as still:
            room.admit(campaign=campaign, user_id="patient", ticket_token=ticket, remaining=50)
        ticket = still.value.details["ticket"]

    assert room.signer.verify(ticket, campaign_id=campaign_id, user_id="patient") == place
    with pytest.raises(InvalidTicket, match="expired"):  # a ticket never re-signed expires
        room.signer.verify(first_ticket, campaign_id=campaign_id, user_id="patient")
    clock[0] = place.first_attempt + settings.ticket_max_wait_seconds + 1
    with pytest.raises(InvalidTicket, match="expired"):  # no place is kept for ever
        room.admit(campaign=campaign, user_id="patient", ticket_token=ticket, remaining=50)
