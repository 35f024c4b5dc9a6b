#!/usr/bin/env python3
"""Recount a campaign's claimed and imported codes from its coupon documents, compare them with
the sharded usage counters, and repair any difference (`--dry-run` only reports).

Talks to Firestore directly (the emulator when FIRESTORE_EMULATOR_HOST is set, else the project's
default credentials); the same check is `POST /v1/campaigns/{id}/reconcile` on admin_api.
Exit status: 0 when the counters agreed or were repaired, 1 when they differ and --dry-run was
given, 2 on usage errors or an unknown campaign.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from shared import campaign_store  # noqa: E402
from shared.clock import utcnow  # noqa: E402
from shared.errors import CampaignNotFound  # noqa: E402
from shared.firestore_db import get_db  # noqa: E402
from shared.reconciliation import reconcile  # noqa: E402
from shared.runtime import get_counters  # noqa: E402
from shared.structured_logging import configure_logging  # noqa: E402

log = logging.getLogger("reconcile")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("campaign_id")
    parser.add_argument("--dry-run", action="store_true", help="report differences only")
    args = parser.parse_args(argv)
    configure_logging(logging.WARNING)
    db = get_db()
    try:
        campaign_store.get_campaign(db, campaign_id=args.campaign_id)
    except CampaignNotFound as exc:
        sys.stderr.write(f"reconcile: {exc}\n")
        return 2
    report = reconcile(
        db,
        counters=get_counters(),
        campaign_id=args.campaign_id,
        now=utcnow(),
        repair=not args.dry_run,
    )
    sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    differs = report.claimed.difference or report.imported.difference or report.hours_differing
    return 1 if differs and args.dry_run else 0


if __name__ == "__main__":
    sys.exit(main())
