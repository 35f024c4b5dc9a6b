"""The landing page loads the Firebase JS SDK by its CDN URL, which carries the version; locally
an import map points that URL at the copy npm installed. The versions must agree everywhere,
or the page breaks (locally: 404s; online: two SDK copies)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.stack import ROOT

WEB = ROOT / "web"
CDN = re.compile(r"https://www\.gstatic\.com/firebasejs/([0-9][^/]*)/")


def _locked() -> dict[str, str]:
    lock = json.loads((ROOT / "package-lock.json").read_text())
    packages = lock["packages"]
    return {
        name: packages[f"node_modules/{name}"]["version"] for name in packages[""]["dependencies"]
    }


def test_node_packages_are_pinned_exactly_and_locked() -> None:
    declared = json.loads((ROOT / "package.json").read_text())["dependencies"]
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", v) for v in declared.values()), declared
    assert _locked() == declared


def test_the_page_imports_the_locked_firebase_sdk_and_maps_it_locally() -> None:
    version = _locked()["firebase"]
    files = [WEB / "example" / "index.html", *sorted((WEB / "example").glob("*.js"))]
    versions = {v for file in files for v in CDN.findall(file.read_text())}
    assert versions == {version}
    index = (WEB / "example" / "index.html").read_text()
    found = re.search(r'<script type="importmap">(.*?)</script>', index, re.S)
    assert found is not None
    import_map = json.loads(found[1])
    assert import_map["imports"] == {
        f"https://www.gstatic.com/firebasejs/{version}/": f"/vendor/firebasejs/{version}/"
    }


def test_the_page_has_every_documented_test_id() -> None:
    index = (WEB / "example" / "index.html").read_text()
    ids = set(re.findall(r'data-testid="([^"]+)"', index))
    documented = {"claim-button", "status", "code", "countdown", "waiting", "sold-out", "remaining"}
    assert documented <= ids


def test_codedrop_js_has_no_imports() -> None:
    source = (WEB / "codedrop.js").read_text()
    assert not re.search(r"^\s*import\s", source, re.M)
    assert Path(WEB / "codedrop.d.ts").is_file()
