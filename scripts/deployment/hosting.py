"""The pages Firebase Hosting serves (firebase.json "hosting"), staged in <build-dir>/hosting.

- `/`: the example landing page (web/example) with web/codedrop.js beside it;
- `/console/`: the console (web/console), when the checkout has it, with its chart library;
- `/vendor/firebasejs/<version>/`: the Firebase JS SDK's browser builds npm installed, where the
  pages' import maps look for them, so production serves the very SDK the browser tests ran;
- `config.json` and `console/config.json`: written by a plan step once claim_api and admin_api
  are deployed (their run.app URIs) and the project's Firebase web app exists (its config), by
  `python3 -m scripts.deployment.hosting` (standard library only, so any python3 runs it).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from scripts.web_assets import FIREBASE_SDK, SDK_BUILD, UPLOT_DIST, UPLOT_FILES, WEB

LOG = logging.getLogger("codedrop.deploy")


class HostingError(Exception):
    """The pages cannot be staged; the message says why."""


def stage_pages(build_dir: Path) -> Path:
    """<build_dir>/hosting, afresh, with what the pages load (config.json comes later)."""
    root = build_dir.resolve() / "hosting"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(WEB / "example", root)
    shutil.copy2(WEB / "codedrop.js", root / "codedrop.js")
    try:
        version = json.loads((FIREBASE_SDK / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError) as exc:
        raise HostingError(
            f"the Firebase JS SDK is not installed ({exc}): run `npm ci --omit=optional`"
        ) from exc
    vendor = root / "vendor" / "firebasejs" / version
    vendor.mkdir(parents=True)
    for build in FIREBASE_SDK.iterdir():
        if SDK_BUILD.match(build.name):
            shutil.copy2(build, vendor / build.name)
    console = WEB / "console"
    if console.is_dir():
        shutil.copytree(console, root / "console")
        for name in UPLOT_FILES:
            source = UPLOT_DIST / name
            if source.is_file():
                (root / "console" / "vendor").mkdir(exist_ok=True)
                shutil.copy2(source, root / "console" / "vendor" / name)
    return root


def write_config(root: Path, *, api_base: str, admin_api_base: str, sdk_config: str) -> None:
    """The pages' config.json files: where their APIs are, and the Firebase web app's config."""
    # firebase-tools prints the config as JSON, perhaps after a line of its own.
    firebase = json.loads(sdk_config[sdk_config.find("{") :])
    if not isinstance(firebase, dict) or not firebase.get("apiKey"):
        raise HostingError(f"not a Firebase web app's config: {sdk_config[:200]!r}")
    keep = ("apiKey", "authDomain", "projectId", "appId")
    web = {key: firebase[key] for key in keep if key in firebase}
    pages = {"apiBase": api_base, "firebase": web, "signInMethod": "anonymous"}
    (root / "config.json").write_text(json.dumps(pages, indent=2) + "\n")
    if (root / "console").is_dir():
        console = {"adminApiBase": admin_api_base, "firebase": web}
        (root / "console" / "config.json").write_text(json.dumps(console, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m scripts.deployment.hosting")
    parser.add_argument("--root", type=Path, required=True, help="the staged hosting folder")
    parser.add_argument("--api-base", required=True, help="claim_api's URI")
    parser.add_argument("--admin-api-base", required=True, help="admin_api's URI")
    parser.add_argument("--sdk-config", required=True, help="`firebase apps:sdkconfig WEB`")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="deploy: %(message)s", stream=sys.stderr)
    try:
        write_config(
            args.root,
            api_base=args.api_base,
            admin_api_base=args.admin_api_base,
            sdk_config=args.sdk_config,
        )
    except (HostingError, ValueError, OSError) as exc:
        LOG.error("the pages' config: %s", exc)
        return 1
    LOG.info("the pages' config.json written in %s", args.root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
