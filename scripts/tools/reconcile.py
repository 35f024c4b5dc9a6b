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

from pydantic import ValidationError

from shared.campaigns import store as campaign_store
from shared.clock import utcnow
from shared.container import instance_services
from shared.errors import CampaignNotFound
from shared.logs import configure_logging
from shared.usage.reconciliation import reconcile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/reconcile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("campaign_id")
    parser.add_argument("--dry-run", action="store_true", help="report differences only")
    args = parser.parse_args(argv)
    configure_logging(logging.WARNING)
    try:
        services = instance_services()
    except ValidationError as exc:
        sys.stderr.write(
            f"reconcile: {exc}\nset GOOGLE_CLOUD_PROJECT (and FIRESTORE_EMULATOR_HOST for a "
            "local stack, see ./scripts/run)\n"
        )
        return 2
    try:
        campaign_store.get_campaign(services.db, campaign_id=args.campaign_id)
    except CampaignNotFound as exc:
        sys.stderr.write(f"reconcile: {exc}\n")
        return 2
    report = reconcile(
        services.db,
        counters=services.counters,
        campaign_id=args.campaign_id,
        now=utcnow(),
        repair=not args.dry_run,
    )
    sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    differs = report.claimed.difference or report.imported.difference or report.hours_differing
    return 1 if differs and args.dry_run else 0


if __name__ == "__main__":
    sys.exit(main())
