"""Before a big sale: `./scripts/deploy --prepare-sale CAMPAIGN --project P --sale-starts T`.

What the deploy cannot know in advance, done in the hour before a sale opens:
- Firebase Auth lets about 100 new accounts an hour be made from one IP address (anonymous
  sign-ins too), so shoppers behind one carrier NAT or a shop's Wi-Fi would be refused before
  they reach claim_api. The project's sign-up quota is raised for the sale's window through the
  Identity Toolkit admin API (`quota.signUpQuotaConfig`: up to 1,000 an hour per IP address,
  from a start time, for a duration);
- every Firestore index the sale's queries use is READY (one still building answers
  FAILED_PRECONDITION: the sale's queries would fail);
- claim_api keeps the instances the sale needs warm (a cold start in the sale's first second
  is a shopper waiting seconds);
- the campaign's new key ranges are warmed to the sale's rate (warmup.py, 500/50/5).
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timedelta

from scripts.deployment.functions import FunctionSpec
from scripts.deployment.plan import Step
from scripts.deployment.resources import Target, gcloud_command

# The sign-up quota's ceiling (new accounts an hour per IP address) the API accepts.
MAX_SIGNUPS_PER_IP_HOUR = 1000
# How long a raised quota may last (Identity Toolkit refuses longer windows).
MAX_QUOTA_WINDOW = timedelta(days=7)
IDENTITY_TOOLKIT = "https://identitytoolkit.googleapis.com/admin/v2/projects/{project}/config"


def signup_quota_step(
    target: Target, *, starts: datetime, window: timedelta, per_ip_hour: int
) -> Step:
    start = starts.strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "quota": {
            "signUpQuotaConfig": {
                "quota": str(per_ip_hour),
                "startTime": start,
                "quotaDuration": f"{int(window.total_seconds())}s",
            }
        }
    }
    url = IDENTITY_TOOLKIT.format(project=target.project) + "?updateMask=quota.signUpQuotaConfig"
    command = (
        f"TOKEN=$(gcloud auth print-access-token --project={target.project})"
        ' && curl -sSf -X PATCH -H "Authorization: Bearer $TOKEN"'
        f' -H "x-goog-user-project: {target.project}" -H "Content-Type: application/json"'
        f" -d {shlex.quote(json.dumps(body, separators=(',', ':')))} {shlex.quote(url)}"
        " >/dev/null"
    )
    return Step(
        f"Auth sign-ups: {per_ip_hour} an hour per IP address from {start} for {window}",
        command,
    )


def indexes_ready_step(target: Target) -> Step:
    """Fails while any composite index is not READY (firebase deploy starts builds, which take
    minutes on an empty database and longer on a full one)."""
    states = shlex.join(
        gcloud_command(
            "firestore", "indexes", "composite", "list", "--format=value(state)", target=target
        )
    )
    return Step(
        "every composite index is READY",
        f'STATES=$({states}) && test -n "$STATES" && ! grep -qv \'^READY$\' <<<"$STATES"',
    )


def min_instances_step(target: Target, claim_api: FunctionSpec, wanted: int) -> Step:
    describe = shlex.join(
        gcloud_command(
            "functions",
            "describe",
            claim_api.service,
            f"--region={target.region}",
            "--format=value(serviceConfig.minInstanceCount)",
            target=target,
        )
    )
    return Step(
        f"claim_api keeps at least {wanted} instances warm (else: scripts/deploy --only claim_api "
        f"--sale-min-instances {wanted})",
        f'test "$({describe})" -ge {wanted}',
    )


def warmup_step(target: Target, campaign_id: str, claims_per_second: int) -> Step:
    return Step(
        f"warm {campaign_id}'s new key ranges to {claims_per_second} claims/s (500/50/5)",
        [
            ".venv/bin/python",
            "-m",
            "scripts.deployment.warmup",
            f"--project={target.project}",
            f"--campaign={campaign_id}",
            f"--claims-per-second={claims_per_second}",
        ],
    )


def prepare_sale_steps(
    target: Target,
    *,
    campaign_id: str,
    claim_api: FunctionSpec,
    starts: datetime,
    window: timedelta,
    signups_per_ip_hour: int,
    min_instances: int,
    claims_per_second: int,
) -> list[Step]:
    return [
        signup_quota_step(target, starts=starts, window=window, per_ip_hour=signups_per_ip_hour),
        indexes_ready_step(target),
        min_instances_step(target, claim_api, min_instances),
        warmup_step(target, campaign_id, claims_per_second),
    ]
