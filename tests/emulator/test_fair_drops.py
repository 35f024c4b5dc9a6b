"""Fair drops through claim_api on the emulators (docs/fair-drops.md): the commitment before the
pre-queue opens, the seed only after the start, a frozen entry list, places recomputed from
public data that equal the admissions, and tickets that cannot change hands or places.

The campaign's window is moved in Firestore to step through a drop's phases (the pre-queue
open, then the start); the instance's campaign listener carries the change to the service."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from scripts.tools import verify_drop
from shared.clock import utcnow
from shared.container import instance_services
from shared.fairness.service import FREEZE_SECONDS
from shared.gcp.firestore import campaign_ref, drop_secret_ref
from shared.waiting_room.admission import Ticket, TicketSigner
from tests.support.api import ADMIN, auth, function_client
from tests.support.stack import MakeCampaign, Pump

pytestmark = pytest.mark.emulator

PRE_QUEUE = 1800


@dataclass
class Drop:
    db: firestore.Client
    client: FlaskClient
    campaign_id: str
    browsers: dict[str, FlaskClient] = field(default_factory=dict)

    def browser(self, user: str) -> FlaskClient:
        """Each shopper has a browser of their own, with its own cookie jar."""
        if user not in self.browsers:
            self.browsers[user] = function_client("claim_api")
        return self.browsers[user]

    @property
    def url(self) -> str:
        return f"/v1/campaigns/{self.campaign_id}"

    def _move_start(self, starts_at: Any) -> None:
        campaign_ref(self.db, self.campaign_id).update({"starts_at": starts_at})
        engine = instance_services().engine
        deadline = time.monotonic() + 10
        while engine.campaign(self.campaign_id).starts_at != starts_at:
            assert time.monotonic() < deadline, "the campaign listener never saw the change"
            time.sleep(0.05)

    def open(self) -> None:
        """The pre-queue is open: the start is 10 minutes away."""
        self._move_start(utcnow().replace(microsecond=0) + timedelta(minutes=10))

    def start(self) -> None:
        """The start (and the freeze that follows it) have passed."""
        self._move_start(utcnow().replace(microsecond=0) - timedelta(seconds=FREEZE_SECONDS + 1))

    def fairness(self) -> dict[str, Any]:
        response = self.client.get(f"{self.url}/fairness")
        assert response.status_code == 200
        body: dict[str, Any] = response.get_json()
        return body

    def drawn(self) -> dict[str, Any]:
        """The fairness document once the draw is made (each read does part of the work)."""
        deadline = time.monotonic() + 30
        while (body := self.fairness())["state"] != "drawn":
            assert time.monotonic() < deadline, f"never drawn: {body}"
        return body

    def join(self, user: str) -> Any:
        return self.browser(user).post(f"{self.url}/entries", headers=auth(user), json={})

    def drawn_with(self, users: list[str]) -> list[Any]:
        """The pre-queue opens, `users` join it, the start passes and the draw is made; their
        answers to joining."""
        self.open()
        joined = [self.join(user) for user in users]
        self.start()
        self.drawn()
        return joined

    def claim(self, user: str, ticket: str | None = None) -> Any:
        headers = auth(user)
        if ticket:
            headers["X-Waiting-Room-Ticket"] = ticket
        return self.browser(user).post(f"{self.url}/claims", headers=headers, json={})

    def claim_until_served(self, user: str) -> tuple[Any, list[dict[str, Any]]]:
        """Poll as a landing page does, honouring retry_after_ms; the 429 bodies seen."""
        seen: list[dict[str, Any]] = []
        ticket = None
        deadline = time.monotonic() + 30
        while (response := self.claim(user, ticket)).status_code == 429:
            assert time.monotonic() < deadline, f"{user} never admitted"
            body = response.get_json()
            seen.append(body)
            ticket = body["ticket"] or ticket
            time.sleep(body["retry_after_ms"] / 1000)
        return response, seen

    def fetch(self) -> Callable[[str], dict[str, Any]]:
        def fetch(path: str) -> dict[str, Any]:
            response = self.client.get(self.url + path)
            assert response.status_code == 200, response.get_json()
            body: dict[str, Any] = response.get_json()
            return body

        return fetch


@pytest.fixture
def make_drop(
    db: firestore.Client, claim_client: FlaskClient, make_campaign: MakeCampaign
) -> Callable[..., Drop]:
    def make(codes: int = 20, rate: float = 50) -> Drop:
        now = utcnow()
        campaign_id = make_campaign(
            codes=codes,
            starts_at=now + timedelta(seconds=PRE_QUEUE + 600),
            ends_at=now + timedelta(hours=3),
            pre_queue_seconds=PRE_QUEUE,
            waiting_room_enabled=True,
            admissions_per_second=rate,
        )
        return Drop(db=db, client=claim_client, campaign_id=campaign_id)

    return make


def test_the_commitment_is_published_before_the_pre_queue_opens_and_the_seed_kept(
    db: firestore.Client, admin_client: FlaskClient, make_drop: Callable[..., Drop]
) -> None:
    drop = make_drop()

    fairness = drop.fairness()

    assert fairness["state"] == "scheduled"
    assert fairness["seed"] is None
    assert fairness["entries_digest"] is None
    secret = drop_secret_ref(db, drop.campaign_id).get().to_dict() or {}
    assert hashlib.sha256(bytes.fromhex(secret["seed"])).hexdigest() == fairness["seed_commitment"]
    admin = admin_client.get(drop.url, headers=ADMIN).get_json()
    assert admin["seed_commitment"] == fairness["seed_commitment"]
    assert (
        drop.client.get(drop.url).get_json()["pre_queue_opens_at"] == fairness["pre_queue_opens_at"]
    )
    early = drop.join("too-early")
    assert early.status_code == 409
    assert early.get_json()["error_code"] == "CAMPAIGN_NOT_ACTIVE"
    # Once the pre-queue is open, its window and commitment cannot change.
    drop.open()
    moved = admin_client.patch(drop.url, json={"starts_at": "2099-01-01T00:00:00Z"}, headers=ADMIN)
    assert moved.status_code == 400


def test_entries_one_per_identity_and_the_seed_revealed_only_after_the_start(
    make_drop: Callable[..., Drop],
) -> None:
    drop = make_drop()
    drop.open()

    first = drop.join("ann")
    again = drop.join("ann")
    others = [drop.join(user).get_json()["entry_id"] for user in ("bob", "cy")]

    assert first.status_code == 201
    assert again.status_code == 200
    assert again.get_json()["entry_id"] == first.get_json()["entry_id"]
    before = drop.fairness()
    assert before["state"] == "open"
    assert before["seed"] is None
    assert before["entries"] is None
    assert drop.claim("ann").get_json()["error_code"] == "CAMPAIGN_NOT_ACTIVE"
    assert drop.client.get(f"{drop.url}/fairness/entries").status_code == 409

    drop.start()
    after = drop.drawn()

    assert hashlib.sha256(bytes.fromhex(after["seed"])).hexdigest() == before["seed_commitment"]
    ids = sorted([first.get_json()["entry_id"], *others])
    listed = "".join(f"{entry_id}\n" for entry_id in ids).encode()
    assert after["entries"] == 3
    assert after["entries_digest"] == hashlib.sha256(listed).hexdigest()


def test_the_list_is_frozen_at_the_start_and_latecomers_queue_behind(
    make_drop: Callable[..., Drop],
) -> None:
    # One place every 5 s: the room passes the (absent) entrants' places at its rate from the
    # draw on, so the latecomer asking a few seconds after it still has most of them ahead.
    drop = make_drop(rate=0.2)
    joined = drop.drawn_with([f"early-{i}" for i in range(4)])
    assert [j.status_code for j in joined] == [201] * 4

    late = drop.join("latecomer")
    listed = drop.fetch()("/fairness/entries")["entries"]
    queued = drop.claim("latecomer")

    assert late.status_code == 409
    assert len(listed) == 4
    assert queued.status_code == 429
    assert queued.get_json()["estimated_wait_seconds"] >= 5.0
    assert "place" not in queued.get_json()


def test_recomputed_places_equal_the_admissions_and_each_shopper_sees_their_place(
    make_drop: Callable[..., Drop],
) -> None:
    drop = make_drop(codes=20, rate=5)
    entrants = [f"fan-{i}" for i in range(8)]
    joined = drop.drawn_with(entrants)
    entry_ids = {user: j.get_json()["entry_id"] for user, j in zip(entrants, joined, strict=True)}
    places = {e["entry_id"]: e["place"] for e in drop.fetch()("/fairness/entries")["entries"]}

    served: dict[str, list[dict[str, Any]]] = {}
    for user in entrants:
        response, waits = drop.claim_until_served(user)
        assert response.status_code == 201
        served[user] = waits
    later, _ = drop.claim_until_served("later-arrival")
    assert later.status_code == 201

    for user, waits in served.items():
        for body in waits:
            assert body["entry_id"] == entry_ids[user]
            assert body["place"] == places[entry_ids[user]]
        rejoin = drop.join(user).get_json()
        assert rejoin == {"entry_id": entry_ids[user], "place": places[entry_ids[user]]}
    verdict = verify_drop.verify(drop.fetch())
    assert verdict.ok, verdict.problems
    assert verdict.entries == 8
    assert verdict.admissions == 9  # eight entrants, one later arrival


def test_a_ticket_replayed_by_another_account_is_refused(make_drop: Callable[..., Drop]) -> None:
    drop = make_drop(rate=0.5)
    drop.drawn_with(["first", "holder"])
    response = drop.claim("holder")
    # Whether it waits or is let in, the answer carries the holder's ticket (as a cookie).
    cookie = response.headers["Set-Cookie"].split(";")[0]
    ticket = cookie.split("=", 1)[1]

    replayed = drop.claim("thief", ticket)

    assert replayed.status_code == 403
    assert replayed.get_json()["error_code"] == "TICKET_NOT_YOURS"


def test_a_forged_place_is_refused(make_drop: Callable[..., Drop]) -> None:
    drop = make_drop(rate=0.5)
    drop.drawn_with(["ahead", "forger"])
    real = instance_services().room.signer
    honest = real.issue(Ticket(drop.campaign_id, "forger", first_attempt=time.time() - 3600))
    signature = honest.rpartition(".")[2]
    # An earlier place, as the forger would like it: signed with a key that is not the
    # service's, or the service's signature moved onto another payload.
    forged = [
        TicketSigner(secret="x" * 32, max_age_seconds=60).issue(
            Ticket(drop.campaign_id, "forger", first_attempt=time.time() - 3600)
        ),
        real.issue(Ticket(drop.campaign_id, "forger", first_attempt=1.0)).rpartition(".")[0]
        + "."
        + signature,
    ]

    for ticket in forged:
        refused = drop.claim("forger", ticket)
        assert refused.status_code == 400
        assert refused.get_json()["error_code"] == "INVALID_TICKET"


@pytest.mark.long
def test_the_transparency_report_after_the_drop(
    make_drop: Callable[..., Drop], pump_events: Pump
) -> None:
    drop = make_drop(codes=2, rate=50)
    fans = ["one", "two", "three"]
    drop.drawn_with(fans)
    assert drop.client.get(f"{drop.url}/transparency").status_code == 409  # not over yet

    answers = [drop.claim_until_served(user)[0].status_code for user in fans]
    pump_events()  # the usage counters learn of the claims
    deadline = time.monotonic() + 10
    while (report := drop.client.get(f"{drop.url}/transparency")).status_code != 200:
        assert time.monotonic() < deadline, report.get_json()
        time.sleep(0.1)

    assert sorted(answers) == [201, 201, 410]
    body = report.get_json()
    assert body["codes_available"] == 2
    assert body["entries"] == 3
    assert body["claimed"] == 2
    assert body["refused"] == {"SOLD_OUT": 1}
    assert body["admitted"] in (2, 3)  # the last one admitted, or told SOLD_OUT before the room
    assert 0 <= body["queue_seconds_p50"] <= body["queue_seconds_p95"]
