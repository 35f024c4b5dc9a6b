"""Bot-farm rehearsal: what each bot-defense setting of a campaign does to a farm of accounts.

    .venv/bin/python -m scripts.bench.bot_farm [--codes 5000] [--shoppers 10000]
        [--farm-accounts 1000] [--farm-people 10] [--farm-clicks 2] [--farm-lead 0.25]
        [--max-per-user 1] [--threads 48] [--settings uid,no-anonymous,phone,email]
        [--firestore HOST:PORT] [--json PATH] [-v]

A sale of `--codes` codes. `--shoppers` honest shoppers, each one person with one account whose
ID token carries their own verified phone number and verified email (half signed in by phone,
half by email and password), click once. The farm runs `--farm-accounts` accounts for
`--farm-people` real people: half are anonymous accounts (free to make, no phone, no email), the
other half carry one of the people's phone numbers and the same person's verified email (many
accounts per identity, as a system that keys limits on accounts lets a farm have). Each farm
account clicks `--farm-clicks` times, and bots are fast: their requests are shuffled into the
first `--farm-lead` of the arrivals.

The same sale runs once per setting, each on a campaign of its own:
  uid           the default: the limit counts accounts
  no-anonymous  identity uid, allowed_sign_in_providers without "anonymous"
  phone         identity "phone": the limit counts verified phone numbers
  email         identity "email": the limit counts verified emails

The benchmark drives the claim path in this process (shared/claims/policy.py: the campaign's
rules and the holder key, then ClaimEngine.claim with `--threads` threads); the waiting room and
the claim event are left out (neither changes who gets a code). Reported per setting: the codes
the farm and the honest shoppers hold, read back from Firestore (claims and coupons, checked by
devkit/audit.py), the farm's share of the codes against its share of the real people in
the sale, honest shoppers refused for anything but SOLD_OUT, and the answers per second.
Target: with identity "phone" the farm holds at most farm-people x max-per-user codes and honest
shoppers lose nothing (none refused, every other code theirs). Exit code 1 if an invariant is
violated or the target is missed.
"""

from __future__ import annotations

import argparse
import logging
import random
import secrets
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.cloud import firestore

from devkit.audit import audit_campaign
from scripts.bench import harness
from scripts.bench.harness import fmt
from shared.claims.policy import Shopper
from shared.gcp.firestore import claims_collection

log = logging.getLogger("bench.bot_farm")

HONEST, FARM = "honest", "farm"
CREATED, HELD = "created", "held"
SETTINGS: dict[str, dict[str, Any]] = {
    "uid": {},
    "no-anonymous": {"allowed_sign_in_providers": ["password", "phone", "google.com"]},
    "phone": {"identity": "phone"},
    "email": {"identity": "email"},
}


@dataclass(frozen=True, slots=True)
class Account:
    side: str  # HONEST or FARM
    shopper: Shopper


def signed_in(user_id: str, i: int, *, phone: str, email: str) -> Shopper:
    """Every other one signed in by phone, the others by email and password (email verified)."""
    return Shopper(
        user_id=user_id,
        sign_in_provider="phone" if i % 2 == 0 else "password",
        phone_number=phone,
        email=email,
        email_verified=True,
    )


def honest_shoppers(count: int) -> list[Account]:
    return [
        Account(
            HONEST,
            signed_in(f"shopper-{i}", i, phone=f"+1650{i:07d}", email=f"shopper{i}@mail.example"),
        )
        for i in range(count)
    ]


def farm_accounts(count: int, people: int) -> list[Account]:
    """Half anonymous; the other half spread over the people's phone numbers and emails."""
    anonymous = count // 2
    accounts = [
        Account(FARM, Shopper(user_id=f"bot-anon-{i}", sign_in_provider="anonymous"))
        for i in range(anonymous)
    ]
    for i in range(count - anonymous):
        person = i % people
        shopper = signed_in(
            f"bot-{i}", i, phone=f"+1999000{person:04d}", email=f"farm{person}@bots.example"
        )
        accounts.append(Account(FARM, shopper))
    return accounts


def arrivals(
    honest: list[Account], farm: list[Account], *, clicks: int, lead: float, seed: int
) -> list[Account]:
    """Honest shoppers in random order; the farm's clicks shuffled into the first `lead` of
    the queue."""
    rng = random.Random(seed)
    honest = honest[:]
    rng.shuffle(honest)
    head = round(len(honest) * lead)
    front = honest[:head] + farm * clicks
    rng.shuffle(front)
    return front + honest[head:]


# --- one sale ------------------------------------------------------------------------------------


def run_sale(
    db: firestore.Client, *, setting: str, queue: list[Account], args: argparse.Namespace
) -> dict[str, Any]:
    from shared.claims import policy
    from shared.claims.engine import ClaimEngine
    from shared.container import instance_services
    from shared.errors import CodedropError
    from shared.settings import get_settings

    campaign_id = harness.create_campaign(
        db,
        campaign_id=f"botfarm-{setting}-{secrets.token_hex(3)}",
        title=f"Bot-farm rehearsal ({setting})",
        codes=(f"FARM-{setting.upper()}-{i:06d}" for i in range(args.codes)),
        max_per_user=args.max_per_user,
        **SETTINGS[setting],
    )
    engine = ClaimEngine(db=db, settings=get_settings())
    app_check = instance_services().app_check  # asked only by campaigns that require it

    def make_call() -> Callable[[Account], str]:
        def call(account: Account) -> str:
            try:
                campaign = engine.campaign(campaign_id)  # the instance's copy, as a claim reads it
                holder = policy.admit(
                    campaign, account.shopper, app_check=app_check, app_check_token=None
                )
                outcome = engine.claim(campaign, user_id=account.shopper.user_id, holder=holder)
            except CodedropError as exc:
                return exc.error_code
            return CREATED if outcome.created else HELD

        return call

    calls = harness.TimedCalls(
        queue, make_call, args.threads, lambda exc: f"EXCEPTION:{type(exc).__name__}"
    )
    with harness.timed() as phase:
        calls.go()
        calls.wait(progress=lambda n: log.info("%s: %d of %d requests", setting, n, len(queue)))
    log.info("%s: %d requests in %.1f s", setting, len(queue), phase.wall_seconds)
    return figures(db, campaign_id, setting, calls.answers, phase, args)


def figures(
    db: firestore.Client,
    campaign_id: str,
    setting: str,
    answers: Sequence[harness.Timed[Account, str]],
    phase: harness.Phase,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """What Firestore holds after the sale, by side, and how each side was answered."""
    side_of = {a.item.shopper.user_id: a.item.side for a in answers}
    held = Counter(
        side_of[(s.to_dict() or {})["user_id"]]
        for s in claims_collection(db, campaign_id).select(["user_id"]).stream()
    )
    outcomes = {
        side: dict(Counter(a.result for a in answers if a.item.side == side).most_common())
        for side in (HONEST, FARM)
    }
    report = audit_campaign(db, campaign_id=campaign_id)
    people = args.shoppers + args.farm_people
    codes_held = held[HONEST] + held[FARM]
    honest_refused = sum(
        n for outcome, n in outcomes[HONEST].items() if outcome not in {CREATED, HELD, "SOLD_OUT"}
    )
    return {
        "setting": setting,
        "campaign": SETTINGS[setting],
        "farm_codes": held[FARM],
        "honest_codes": held[HONEST],
        "codes_held": codes_held,
        "farm_share_of_codes": held[FARM] / codes_held if codes_held else 0.0,
        "farm_share_of_people": args.farm_people / people,
        "farm_codes_per_person": held[FARM] / args.farm_people,
        "honest_refused": honest_refused,
        "outcomes": outcomes,
        "requests": len(answers),
        "wall_seconds": phase.wall_seconds,
        "answers_per_second": len(answers) / phase.wall_seconds if phase.wall_seconds else None,
        "invariants": report.violations,
        "unassigned_left": report.unassigned,
    }


# --- output --------------------------------------------------------------------------------------


def _pct(value: float) -> str:
    return f"{value * 100:.1f} %"


def _refused(outcomes: dict[str, int]) -> str:
    refused = {k: v for k, v in outcomes.items() if k not in {CREATED, HELD, "SOLD_OUT"}}
    return ", ".join(f"{v:,} {k}" for k, v in refused.items()) or "0"


def render(results: list[dict[str, Any]]) -> str:
    rows = [
        [
            r["setting"],
            fmt(r["farm_codes"]),
            _pct(r["farm_share_of_codes"]),
            _pct(r["farm_share_of_people"]),
            fmt(r["honest_codes"]),
            fmt(r["honest_refused"]),
            _refused(r["outcomes"][FARM]),
            fmt(r["answers_per_second"], 0),
        ]
        for r in results
    ]
    header = [
        "setting",
        "farm codes",
        "farm share of codes",
        "farm share of people",
        "honest codes",
        "honest refused",
        "farm refused",
        "answers/s",
    ]
    return harness.table(header, rows)


def targets(results: list[dict[str, Any]], args: argparse.Namespace) -> list[tuple[str, bool]]:
    checks = [
        (
            f"{r['setting']}: invariants held",
            not any(r["invariants"].values()),
        )
        for r in results
    ]
    phone = next((r for r in results if r["setting"] == "phone"), None)
    if phone is not None:
        cap = args.farm_people * args.max_per_user
        checks.append(
            (
                f"phone: farm holds at most {cap} codes ({phone['farm_codes']})",
                phone["farm_codes"] <= cap,
            )
        )
        expected = min(args.codes - phone["farm_codes"], args.shoppers * args.max_per_user)
        checks.append(
            (
                f"phone: honest shoppers lose nothing (none refused, {phone['honest_codes']:,} of"
                f" the {expected:,} codes the farm did not take)",
                phone["honest_refused"] == 0 and phone["honest_codes"] == expected,
            )
        )
    return checks


OPTIONS: list[harness.Option] = [
    ("--codes", harness.positive, 5000, "codes in the sale"),
    ("--shoppers", harness.positive, 10000, "honest shoppers, one account and one click each"),
    ("--farm-accounts", harness.positive, 1000, "the farm's accounts"),
    ("--farm-people", harness.positive, 10, "the real people (phones and emails) behind them"),
    ("--farm-clicks", harness.positive, 2, "requests per farm account"),
    ("--farm-lead", float, 0.25, "the farm's clicks land in this first share of the arrivals"),
    ("--max-per-user", harness.positive, 1, "the campaign's max_per_user"),
    ("--threads", harness.positive, 48, "concurrent claims"),
    ("--settings", str, ",".join(SETTINGS), "comma-separated, of " + ", ".join(SETTINGS)),
    ("--seed", int, 14, "shuffles the arrivals"),
    harness.FIRESTORE_OPTION,
]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__, prog="bot_farm", options=OPTIONS)
    args = parser.parse_args(argv)
    args.settings = harness.chosen(parser, "--settings", args.settings, list(SETTINGS))
    if not 0 < args.farm_lead <= 1:
        parser.error("--farm-lead must be in (0, 1]")
    if args.farm_people > args.farm_accounts // 2:
        parser.error("--farm-people must be at most half of --farm-accounts")
    return args


def bench(args: argparse.Namespace, emulators: harness.Emulators) -> int:
    from shared.container import instance_services

    db = instance_services().db
    queue = arrivals(
        honest_shoppers(args.shoppers),
        farm_accounts(args.farm_accounts, args.farm_people),
        clicks=args.farm_clicks,
        lead=args.farm_lead,
        seed=args.seed,
    )
    start_load = harness.shown_load()
    results = [run_sale(db, setting=s, queue=queue, args=args) for s in args.settings]
    print(
        f"\nBot-farm rehearsal: {args.codes:,} codes, max_per_user {args.max_per_user}; "
        f"{args.shoppers:,} honest shoppers (1 account, 1 click each); a farm of "
        f"{args.farm_accounts:,} accounts ({args.farm_accounts // 2:,} anonymous, the rest "
        f"behind {args.farm_people} phone numbers and {args.farm_people} emails) clicking "
        f"{args.farm_clicks}x within the first {args.farm_lead:.0%} of {len(queue):,} requests; "
        f"{args.threads} threads; Firestore emulator {emulators.host_port}; load average "
        f"{start_load} at start, {harness.shown_load()} at the end\n"
    )
    print(render(results))
    checks = targets(results, args)
    print("\ntargets:")
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'MISS'}  {name}")
    harness.write_json(
        args.json,
        {
            "config": {k: v for k, v in vars(args).items() if k not in {"json", "verbose"}},
            "load_average_at_start": start_load,
            "results": results,
            "targets": dict(checks),
        },
    )
    return 0 if all(ok for _, ok in checks) else 1


def main(argv: Sequence[str] | None = None) -> int:
    return harness.run_with_emulators(parse_args(argv), bench)


if __name__ == "__main__":
    sys.exit(main())
