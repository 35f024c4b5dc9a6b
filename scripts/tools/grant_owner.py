"""Make the first owner of the console: the user with this email (created if new) gets the
custom claims `admin` and `owner`, recorded in `admins/{uid}` and the audit log. Owners then
invite and remove admins in the console (or `POST /v1/admins`), so this runs once per project.

  ./scripts/grant_owner --project my-project you@shop.example

Production: run with credentials allowed to manage Firebase Auth users and write Firestore
(`gcloud auth application-default login` as a project owner). Locally: the stack's emulators,
`FIREBASE_AUTH_EMULATOR_HOST=127.0.0.1:9099 FIRESTORE_EMULATOR_HOST=127.0.0.1:8080
./scripts/grant_owner --project demo-codedrop you@shop.example` (the user signs in with email and
password only once a password is set; the demo admin of `./scripts/run --demo` is an owner
already). The new claims arrive with the user's next ID token (sign out and in again).
"""

from __future__ import annotations

import os
import sys

from google.cloud import firestore
from pydantic import TypeAdapter, ValidationError

from scripts.tools import command
from shared.clock import utcnow
from shared.control.admins import AdminService, Email, bootstrap_owner


def main(argv: list[str] | None = None) -> int:
    parser = command.parser("grant_owner", __doc__)
    parser.add_argument("email", help="the owner's email (their Google or email sign-in)")
    parser.add_argument(
        "--project",
        default=os.environ.get("GOOGLE_CLOUD_PROJECT"),
        help="the Firebase / Google Cloud project (default: $GOOGLE_CLOUD_PROJECT)",
    )
    args = parser.parse_args(argv)
    if not args.project:
        parser.error("--project is required (or set GOOGLE_CLOUD_PROJECT)")
    if os.environ.get("FIREBASE_AUTH_EMULATOR_HOST") and not args.project.startswith("demo-"):
        parser.error("FIREBASE_AUTH_EMULATOR_HOST is set: only a demo- project can be used")
    try:
        email = TypeAdapter(Email).validate_python(args.email)
    except ValidationError:
        parser.error(f"{args.email!r} is not an email address")
    service = AdminService(db=firestore.Client(project=args.project), project_id=args.project)
    view = bootstrap_owner(service, email=email, at=utcnow())
    sys.stdout.write(f"{view.email} is an owner of {args.project}: uid {view.uid}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
