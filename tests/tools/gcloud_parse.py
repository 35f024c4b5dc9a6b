"""Runs many gcloud command lines in one gcloud process: the SDK's CLI is built once, then each
line is executed as `gcloud` would execute it (calliope's CLI.Execute), with no credentials, so
each fails either while parsing its flags (exit 2) or at authentication (exit 1).

Started by tests/tools/test_deploy_plan.py under the SDK's Python: reads one JSON array of argv
lists (without the leading `gcloud`) on stdin, writes one JSON array of {"code", "stderr"}.
A process per line costs gcloud's start-up (about a second of CPU) each time; this costs it once.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
from typing import Any


def _execute(cli: Any, argv: list[str]) -> dict[str, Any]:
    """One command with its stdout and stderr caught at the file descriptors (gcloud's log
    handlers hold the streams they were made with)."""
    with tempfile.TemporaryFile() as caught:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(caught.fileno(), 1)
        os.dup2(caught.fileno(), 2)
        try:
            cli.Execute(argv)
            code: object = 0
        except SystemExit as exc:
            code = exc.code
        except Exception as exc:  # noqa: BLE001 (a line gcloud crashes on is reported, not fatal)
            code = f"raised {exc!r}"
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        caught.seek(0)
        output = caught.read().decode("utf-8", "replace")
    return {"code": code, "stderr": output}


def main() -> None:
    root = os.environ["CODEDROP_GCLOUD_SDK_ROOT"]
    sys.path[:0] = [os.path.join(root, "lib"), os.path.join(root, "lib", "third_party")]
    commands = json.load(sys.stdin)
    cli = importlib.import_module("googlecloudsdk.gcloud_main").CreateCLI([])
    results = [_execute(cli, argv) for argv in commands]
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
