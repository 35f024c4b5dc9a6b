"""The Chromium that browser tests and browser benchmarks drive through Playwright."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Debian's real binary: /usr/bin/chromium is a wrapper script that adds flags and noise.
CHROMIUM_PATHS = ("/usr/lib/chromium/chromium", "/usr/lib/chromium-browser/chromium-browser")
CHROMIUM_HINT = (
    "Install Chromium: `sudo apt-get install chromium` on Debian (./scripts/test installs it "
    "when it runs as root), or set CODEDROP_CHROMIUM to a Chromium or Chrome binary."
)


def find_chromium() -> Path | None:
    override = os.environ.get("CODEDROP_CHROMIUM")
    if override:
        return Path(override) if Path(override).is_file() else None
    for candidate in CHROMIUM_PATHS:
        if Path(candidate).is_file():
            return Path(candidate)
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    return Path(found) if found else None
