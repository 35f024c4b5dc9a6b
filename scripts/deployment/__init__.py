"""Stage and deploy codedrop's Cloud Functions (gen2) with gcloud: `python -m scripts.deployment`.

- `functions`: the one table of what gets deployed, and which of its entry points main.py defines.
- `staging`: `<build-dir>/functions/` (main.py, shared/ and requirements.txt, the runtime set
  exported from uv.lock with hashes) and the check that it imports alone, in an environment that
  holds exactly that set.
- `gcloud`: the gcloud command of each function (trigger, sizing, environment, secrets).
- `resources`: everything besides the functions (APIs, Firestore through firebase-tools, service
  accounts, bucket, topics, secrets, IAM, subscriptions, the schedule, Hosting).
- `hosting`: the pages Firebase Hosting serves, staged in `<build-dir>/hosting`, and their config.
- `monitoring`: the log-based metrics, dashboard and alert policies of deploy/monitoring/.
- `plan`: a deploy is a list of steps, each one command: printed with --dry-run, else run in
  order; creates look first, "not yet" answers are retried with backoff (re-runnable).
- `sale` and `warmup`: `--prepare-sale`, what to do in the hour before a big sale.
- `cli`: the options, and the order of the above. docs/deploy.md walks through it.

Usage (normally through the `scripts/deploy` wrapper):

    scripts/deploy --dry-run                  # print the gcloud commands, deploy nothing
    scripts/deploy --project my-project       # deploy every function written so far
    scripts/deploy --project my-project --only claim_api
    scripts/deploy --project my-project --prepare-sale CAMPAIGN --sale-starts 2026-12-01T10:00:00Z
"""


class DeployError(Exception):
    """A deploy that cannot go ahead; the message says why."""
