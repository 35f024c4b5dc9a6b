"""Fair-drop benchmark: the draw of N entries on the Firestore emulator, made by 10 and 100
simulated instances, and the admission of the drawn entries through the waiting room's
controllers on a virtual clock. Prints JSON.

    .venv/bin/python -m scripts.bench.fair_drop [--entries 100000] [--instances 10,100]
        [--rate 5000] [--later 0.1] [--seed 7] [--admission-only] [--json PATH]

The draw: N entry documents are written as joins would write them, the start is moved into the
past, then `instances` FairnessService objects (each an instance: its own caches) call draw()
in a thread each until every one holds the places, as claims arriving at the start would.
Reported: the time until the draw is stored (digest and revealed seed), until every instance
has recomputed the places (here all instances share this process's CPU), the documents read
and written by all instances, the entries read and the ranges made (64 and N when no range is
made twice).

The admission: the drawn places (and `--later` x N later arrivals over the first 10 s) poll
the service's AdmissionController, one per instance, sharing heartbeats as the waiting-room
benchmark does (scripts/bench/waiting_room.py), with the drawn entries counted as the service
counts them (shared/fairness/draw.py). Every poll goes to a random instance. Reported:
  out_of_drawn_order   entrants admitted before the room had reached their place, plus later
                       arrivals admitted before it had reached every place: must be 0;
  late_by_over_a_tick  entrants admitted more than one tick after an entrant with a later
                       place (the waiting-room benchmark's order measure, applied to places);
  drain_seconds, polls.
"""

from __future__ import annotations

import heapq
import json
import logging
import math
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from google.cloud import firestore

from scripts.bench import harness
from scripts.bench.waiting_room import TICK, Config, FairPolicy
from shared.campaigns import service as campaign_service
from shared.campaigns import store as campaign_store
from shared.campaigns.models import CampaignCreate
from shared.clock import utcnow
from shared.container import Services
from shared.fairness import store
from shared.fairness.draw import (
    ENTRIES_PER_SLOT,
    Draw,
    entries_digest,
    entry_id_for,
    order,
    shard_of,
)
from shared.fairness.service import FREEZE_SECONDS, FairnessService
from shared.gcp.firestore import campaign_ref, entries_collection, fairness_collection
from shared.settings import get_settings
from shared.waiting_room.admission import AdmissionController, RoomShare
from shared.waiting_room.service import DRAWN_PEER

log = logging.getLogger("fair_drop")

CAMPAIGN = "fair-drop-bench"
WRITERS = 8
POLL_SECONDS = 0.2


def _instances(text: str) -> list[int]:
    return [harness.positive(part) for part in text.split(",") if part.strip()]


OPTIONS: list[harness.Option] = [
    ("--entries", harness.positive, 100_000, "entries in the pre-queue"),
    ("--instances", _instances, "10,100", "simulated instances, one run each"),
    ("--rate", float, 5000.0, "the room's admissions per second (the admission simulation)"),
    ("--later", float, 0.1, "later arrivals, as a fraction of the entries"),
    ("--seed", int, 7, "random seed"),
    ("--admission-only", None, None, "skip the draw on the emulator"),
]


# --- the draw on the emulator -----------------------------------------------------------------
def write_entries(db: firestore.Client, entry_key: bytes, count: int) -> float:
    """The entries of `count` shoppers, written as joins write them; seconds taken."""
    ids = [entry_id_for(entry_key, f"uid:shopper-{i:07d}") for i in range(count)]
    started = time.perf_counter()
    now = utcnow()

    def write(part: Sequence[str]) -> None:
        for start in range(0, len(part), 500):
            batch = db.batch()
            for entry_id in part[start : start + 500]:
                ref = entries_collection(db, CAMPAIGN, shard_of(entry_id)).document(entry_id)
                batch.create(ref, {"joined_at": now})
            batch.commit()

    threads = [threading.Thread(target=write, args=(ids[i::WRITERS],)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def forget_draw(db: firestore.Client) -> None:
    for snapshot in fairness_collection(db, CAMPAIGN).stream():
        if snapshot.id != "secret":
            snapshot.reference.delete()


def run_draw(services: Services, instances: int, emulator_pid: int | None) -> dict[str, Any]:
    forget_draw(services.db)
    campaign = campaign_store.get_campaign(services.db, campaign_id=CAMPAIGN)
    fleet = [
        FairnessService(db=services.db, usage=services.usage, tick_seconds=TICK)
        for _ in range(instances)
    ]
    loaded_at: list[float] = []
    began = time.perf_counter()

    def instance(fairness: FairnessService) -> None:
        # Requests keep arriving at every instance (shoppers retry within a second); one at a
        # time works on the draw, the others are answered at once.
        while fairness.draw(campaign) is None:
            time.sleep(POLL_SECONDS)
        loaded_at.append(time.perf_counter() - began)

    with harness.timed(emulator_pid) as phase:
        threads = [threading.Thread(target=instance, args=(f,)) for f in fleet]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    totals = {
        key: sum(f.metrics.snapshot()[key] for f in fleet) for key in fleet[0].metrics.snapshot()
    }
    one = fleet[0].draw(campaign)
    assert one is not None
    started = time.process_time()
    order(bytes.fromhex(one.seed), one.digest, sorted(one.by_place))
    return {
        "instances": instances,
        "entries": one.count,
        # The first instance to hold the places stored the draw just before.
        "draw_stored_seconds": round(min(loaded_at), 2),
        "all_instances_drawn_seconds": round(max(loaded_at), 2),
        "places_cpu_seconds_one_instance": round(time.process_time() - started, 3),
        "documents_read": totals["documents_read"],
        "documents_written": totals["documents_written"],
        "entries_read": totals["entries_read"],
        "ranges_made": totals["shards_made"],
        "wall_seconds": round(phase.wall_seconds, 2),
        "emulator_cpu_seconds": phase.emulator_cpu_seconds,
    }


# --- admission on a virtual clock -------------------------------------------------------------
class DrawnPolicy(FairPolicy):
    """The waiting-room benchmark's fair policy, with the drawn entries counted at every
    instance as the service counts them (WaitingRoomService._exchange)."""

    def __init__(self, cfg: Config, draw: Draw) -> None:
        super().__init__(cfg)
        self.draw = draw

    def _hand_over(
        self, controller: AdmissionController, seen: dict[str, RoomShare], began: float
    ) -> None:
        live = set(seen)
        seen[DRAWN_PEER] = self.draw.share(controller.threshold(began), tick_seconds=TICK)
        controller.update_peers(seen, live=live, now=began)

    def released(self, instance: int, now: float) -> int:
        return self.draw.released(self.controllers[instance].threshold(now))


@dataclass
class Shopper:
    place: int | None  # None: a later arrival
    first_attempt: float
    admitted_at: float = math.inf


def simulate_admission(
    count: int, instances: int, rate: float, later: float, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    ids = sorted(f"{rng.getrandbits(128):032x}" for _ in range(count))
    digest = entries_digest(ids)
    seed_bytes = rng.randbytes(32)
    draw = Draw(
        starts_at=0.0,
        drawn_at=FREEZE_SECONDS,
        digest=digest,
        seed=seed_bytes.hex(),
        by_place=order(seed_bytes, digest, ids),
    )
    cfg = Config(
        shoppers=count,
        arrival_seconds=10.0,
        arrivals="uniform",
        rate=rate,
        instances=instances,
        exchange_seconds=0.05,
        seed=seed,
        horizon_seconds=math.inf,
    )
    policy = DrawnPolicy(cfg, draw)
    start = draw.drawn_at
    shoppers = [Shopper(place=p, first_attempt=draw.first_attempt(p)) for p in range(1, count + 1)]
    shoppers += [
        Shopper(place=None, first_attempt=start + rng.uniform(0.0, 10.0))
        for _ in range(int(count * later))
    ]
    # Entrants poll within the first second after the draw; later arrivals when they come.
    polls: list[tuple[float, int, bool]] = []
    for index, shopper in enumerate(shoppers):
        at = start + rng.random() if shopper.place is not None else shopper.first_attempt
        polls.append((at, index, shopper.place is None))
    heapq.heapify(polls)
    out_of_order = done = served = 0
    cpu = time.process_time()
    while polls:
        now, index, first = heapq.heappop(polls)
        served += 1
        shopper = shoppers[index]
        instance = rng.randrange(instances)
        if first:
            ok = policy.first(instance, now)
        else:
            ok = policy.poll(instance, shopper.first_attempt, now)
        if ok:
            shopper.admitted_at = now
            done += 1
            released = policy.released(instance, now)
            if shopper.place is not None:
                out_of_order += shopper.place > released
            else:
                out_of_order += released < count
            continue
        delay = policy.retry(instance, shopper.first_attempt, now, rng.random())
        heapq.heappush(polls, (now + (delay if delay is not None else TICK), index, False))
    late = worst = 0.0
    earliest_later = math.inf
    for shopper in sorted(shoppers[:count], key=lambda s: -(s.place or 0)):
        lag = shopper.admitted_at - earliest_later
        if lag > TICK:
            late += 1
            worst = max(worst, lag)
        earliest_later = min(earliest_later, shopper.admitted_at)
    last = max(s.admitted_at for s in shoppers)
    return {
        "instances": instances,
        "entries": count,
        "later_arrivals": len(shoppers) - count,
        "rate": rate,
        "out_of_drawn_order": out_of_order,
        "late_by_over_a_tick": int(late),
        "worst_lag_seconds": round(worst, 2),
        "drain_seconds": round(last - start, 1),
        "polls": served,
        "simulation_cpu_seconds": round(time.process_time() - cpu, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = harness.parser(__doc__, prog="fair_drop", options=OPTIONS).parse_args(argv)
    harness.setup_logging(harness.level(args.verbose), role="fair_drop")
    logging.getLogger("shared").setLevel(logging.WARNING)
    harness.stop_on_sigterm()
    figures: dict[str, Any] = {"entries_per_slot": ENTRIES_PER_SLOT}
    if not args.admission_only:
        draws = run_draws(args)
        if draws is None:
            return 130
        figures.update(draws)
    figures["admission"] = []
    for instances in args.instances:
        result = simulate_admission(args.entries, instances, args.rate, args.later, args.seed)
        log.info("admission: %s", result)
        figures["admission"].append(result)
    harness.write_json(args.json, figures)
    print(json.dumps(figures, indent=2))
    return 0 if all(r["out_of_drawn_order"] == 0 for r in figures["admission"]) else 1


def run_draws(args: Any) -> dict[str, Any] | None:
    """The entries written, then the draw at each instance count (None: interrupted)."""
    figures: dict[str, Any] = {}
    try:
        with harness.Emulators() as emulators:
            # The draw publishes no event: no Pub/Sub emulator, a publisher that is never called.
            services = Services(get_settings(), publisher=object())
            now = utcnow()
            campaign_service.create_campaign(
                services.db,
                data=CampaignCreate(
                    campaign_id=CAMPAIGN,
                    title="Fair drop bench",
                    starts_at=now + timedelta(hours=2),
                    ends_at=now + timedelta(days=1),
                    pre_queue_seconds=3600,
                    waiting_room_enabled=True,
                ),
                now=now,
            )
            secret = store.read_secret(services.db, CAMPAIGN)
            assert secret is not None
            seconds = write_entries(services.db, secret.entry_key, args.entries)
            log.info("%d entries written in %.1f s", args.entries, seconds)
            figures["entries_written_seconds"] = round(seconds, 1)
            campaign_ref(services.db, CAMPAIGN).update(
                {"starts_at": utcnow() - timedelta(seconds=FREEZE_SECONDS + 1)}
            )
            figures["draw"] = []
            for instances in args.instances:
                result = run_draw(services, instances, emulators.firestore_pid)
                log.info("draw: %s", result)
                figures["draw"].append(result)
    except KeyboardInterrupt:
        log.warning("interrupted")
        return None
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
