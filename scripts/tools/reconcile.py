"""Recount a campaign's claimed and imported codes from its coupon documents, compare them with
the sharded usage counters, and repair any difference (`--dry-run` only reports).

Calls admin_api's `POST /v1/campaigns/{id}/reconcile`, as the other tools do: locally (a
project starting with demo-, the default) the running stack's admin_api with an emulator-format
admin token; for a real project pass `--admin-url` and an admin ID token
(`--id-token` or $CODEDROP_ADMIN_ID_TOKEN). Exit status: 0 when the counters agreed or were
repaired, 1 when they differ and --dry-run was given, 2 on usage errors, an unknown campaign or
an admin_api that does not answer.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

import requests

from devkit import http
from devkit.emulators.tokens import emulator_id_token
from scripts.tools import command
from scripts.tools.upload_codes import DEFAULT_PROJECT, TOKEN_ENV, local_url


def main(argv: Sequence[str] | None = None) -> int:
    parser = command.parser("reconcile", __doc__)
    parser.add_argument("campaign_id", metavar="CAMPAIGN_ID")
    parser.add_argument("--dry-run", action="store_true", help="report differences only")
    parser.add_argument(
        "--admin-url",
        default=local_url("CODEDROP_ADMIN_API_PORT", 8002),
        help="admin_api base URL (default http://127.0.0.1:$CODEDROP_ADMIN_API_PORT or :8002)",
    )
    parser.add_argument("--project", default=DEFAULT_PROJECT, help="default %(default)s")
    parser.add_argument("--id-token", help=f"admin ID token (default ${TOKEN_ENV})")
    args = parser.parse_args(argv)
    token = args.id_token or os.environ.get(TOKEN_ENV)
    if token is None and args.project.startswith("demo-"):
        token = emulator_id_token("reconcile", project=args.project, admin=True)
    if token is None:
        parser.error(f"an admin ID token is needed for {args.project}: --id-token or ${TOKEN_ENV}")
    url = f"{args.admin_url.rstrip('/')}/v1/campaigns/{args.campaign_id}/reconcile"
    try:
        reply = http.call_json("POST", url, body={"repair": not args.dry_run}, token=token)
    except requests.RequestException as exc:
        sys.stderr.write(f"reconcile: admin_api at {args.admin_url} does not answer ({exc})\n")
        return 2
    if reply.status != 200 or not isinstance(reply.body, dict):
        error = reply.body if isinstance(reply.body, dict) else {}
        message = error.get("error_message", f"HTTP {reply.status}")
        sys.stderr.write(f"reconcile: {error.get('error_code', 'ERROR')}: {message}\n")
        return 2
    report = reply.body
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    checks = ("claimed", "imported", "redeemed", "held")
    differs = any(report[check]["difference"] for check in checks) or report["hours_differing"]
    return 1 if differs and args.dry_run else 0


if __name__ == "__main__":
    sys.exit(main())
