"""Warm the key ranges a sale will write, before its first shopper (Firestore's 500/50/5 rule).

A campaign's claims (`campaigns/{id}/claims`) and count_usage's markers
(`campaigns/{id}/processed_events`) are new key ranges when the sale opens, and each is written
once per claim. Firestore serves a new range from few servers until it has split it by load, and
its guidance is to start new traffic at no more than 500 operations a second and raise it by at
most 50% every 5 minutes. This ramp does that with throw-away documents spread over the same key
ranges (random hex ids, as the claims' hashed holder keys and the events' ids are), each deleted
right after it is written, until the sale's expected rate: the sale starts on ranges already
split for it. 500 writes/s to 3,000 takes six steps, 30 minutes.

The documents are empty (no field, so no index entry: only their keys matter) and never live
longer than one batch: run it before the sale (`./scripts/deploy --prepare-sale`), not during an
export of the campaign.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from google.cloud import firestore

LOG = logging.getLogger("codedrop.deploy")

START_RATE = 500  # writes per second
GROWTH = 1.5  # at most +50% ...
STEP_SECONDS = 300  # ... every 5 minutes
BATCH = 250  # documents per commit: their sets in one, then their deletes in another
# What a claim writes in the ranges that are new at the sale: its claim and its event's marker.
COLLECTIONS = ("claims", "processed_events")


def schedule(target_rate: int, *, start: int = START_RATE) -> list[int]:
    """The rate of each 5-minute step, from `start` up to (and including) `target_rate`."""
    steps = [min(start, target_rate)]
    while steps[-1] < target_rate:
        steps.append(min(target_rate, int(steps[-1] * GROWTH)))
    return steps


@dataclass
class WarmupReport:
    written: int = 0  # documents written (each was deleted too)
    steps: int = 0


def warm(
    db: firestore.Client,
    campaign_id: str,
    claims_per_second: int,
    *,
    step_seconds: float = STEP_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WarmupReport:
    """Ramp each of the campaign's new ranges up to the writes a sale of `claims_per_second`
    makes there (one per claim)."""
    report = WarmupReport()
    ranges = [db.collection("campaigns", campaign_id, name) for name in COLLECTIONS]
    for rate in schedule(claims_per_second):
        LOG.info("warm-up: %d writes/s on each range for %.0f s", rate, step_seconds)
        report.steps += 1
        step_ends = clock() + step_seconds
        while clock() < step_ends:
            second_ends = clock() + 1
            # A document is two writes: its set, then its delete.
            report.written += _pairs(db, ranges, max(1, rate // 2) * len(ranges))
            left = second_ends - clock()
            if left > 0:
                sleep(left)
    return report


def _pairs(
    db: firestore.Client, ranges: Sequence[firestore.CollectionReference], count: int
) -> int:
    done = 0
    while done < count:
        refs = [
            ranges[n % len(ranges)].document(f"{secrets.token_hex(16)}-warmup")
            for n in range(min(BATCH, count - done))
        ]
        batch = db.batch()
        for ref in refs:
            batch.set(ref, {})
        batch.commit()
        batch = db.batch()
        for ref in refs:
            batch.delete(ref)
        batch.commit()
        done += len(refs)
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.deployment.warmup", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--project", required=True)
    parser.add_argument("--campaign", required=True)
    parser.add_argument(
        "--claims-per-second", type=int, required=True, help="the sale's expected peak"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="deploy: %(message)s", stream=sys.stderr)
    db = firestore.Client(project=args.project)
    report = warm(db, args.campaign, args.claims_per_second)
    LOG.info("warm-up done: %d documents in %d steps", report.written, report.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
