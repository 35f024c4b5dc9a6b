"""Print a Firebase ID token of a real user of the local stack's Auth emulator, for curl and
tools: `curl -H "Authorization: Bearer $(./scripts/token shopper)" …`.

  shopper              shopper@codedrop.test (created on first use); a claim with it acts as
                       the same shopper every time
  shopper --anonymous  a new anonymous shopper each time, as the example page signs them in
  admin                admin@codedrop.test with the custom claim admin: true (created on first
                       use): admin_api accepts it

The token is valid for an hour. The Auth emulator is the one FIREBASE_AUTH_EMULATOR_HOST names,
else 127.0.0.1 on $CODEDROP_AUTH_PORT (9099). Exit status 1 when no Auth emulator answers there.
"""

from __future__ import annotations

import os
import sys

from devkit import http
from devkit.emulators.auth import AuthEmulatorClient, AuthEmulatorError
from scripts.localstack.config import DEFAULT_PROJECT, HOST, env_int
from scripts.localstack.users import DEMO_USERS
from scripts.tools import command


def _auth_host() -> str:
    return os.environ.get("FIREBASE_AUTH_EMULATOR_HOST") or (
        f"{HOST}:{env_int('CODEDROP_AUTH_PORT', 9099)}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = command.parser("token", __doc__)
    parser.add_argument("role", choices=sorted(DEMO_USERS))
    parser.add_argument(
        "--anonymous", action="store_true", help="shopper only: a new anonymous user"
    )
    parser.add_argument("--auth-host", default=None, help="HOST:PORT of the Auth emulator")
    parser.add_argument(
        "--project", default=DEFAULT_PROJECT, help="the stack's project (default %(default)s)"
    )
    args = parser.parse_args(argv)
    if args.anonymous and args.role != "shopper":
        parser.error("--anonymous is for shoppers")
    host = args.auth_host or _auth_host()
    users = AuthEmulatorClient(host, project=args.project)
    try:
        if args.anonymous:
            signed_in = users.sign_up_anonymous()
        else:
            signed_in = DEMO_USERS[args.role].sign_in(users)
    except http.Unreachable:
        sys.stderr.write(f"token: no Auth emulator answers at {host}; start ./scripts/run\n")
        return 1
    except AuthEmulatorError as exc:
        sys.stderr.write(f"token: {exc}\n")
        return 1
    sys.stdout.write(signed_in.id_token + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
