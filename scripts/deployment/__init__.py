"""Stage and deploy codedrop's Cloud Functions (gen2) with gcloud: `python -m scripts.deployment`.

- `functions`: the one table of what gets deployed, and which of its entry points main.py defines.
- `staging`: `<build-dir>/functions/` (main.py, shared/ and requirements.txt, the runtime set
  exported from uv.lock with hashes) and the check that it imports alone, in an environment that
  holds exactly that set.
- `gcloud`: the gcloud command of each function (trigger, sizing, environment, secrets).
- `plan`: a deploy is a list of steps, each one command: printed with --dry-run, else run in order.
- `cli`: the options, and the order of the above.

Usage (normally through the `scripts/deploy` wrapper):

    scripts/deploy --dry-run                  # print the gcloud commands, deploy nothing
    scripts/deploy --project my-project       # deploy every function written so far
    scripts/deploy --project my-project --only claim_api
"""


class DeployError(Exception):
    """A deploy that cannot go ahead; the message says why."""
