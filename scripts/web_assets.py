"""What the pages in web/ load from node_modules besides their own files: the Firebase JS SDK's
browser builds and the console's chart library. The local stack serves them
(scripts/localstack/pages.py) and the deploy stages them for Firebase Hosting
(scripts/deployment/hosting.py): production serves the very files the browser tests ran. Standard
library only, as the deploy's hosting step is (any python3 runs it)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WEB = REPO / "web"
NODE_MODULES = REPO / "node_modules"
FIREBASE_SDK = NODE_MODULES / "firebase"
# Only the SDK's browser builds (firebase-app.js, firebase-auth.js, …), never its sources.
SDK_BUILD = re.compile(r"^firebase-[a-z-]+\.js$")
# The console's chart library: only the two files the console loads.
UPLOT_DIST = NODE_MODULES / "uplot" / "dist"
UPLOT_FILES = ("uPlot.esm.js", "uPlot.min.css")
