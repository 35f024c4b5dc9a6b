"""Verify a fair drop from its public URLs alone (docs/fair-drops.md): the seed matches the
commitment published before the pre-queue opened, the entry list matches its digest, every
published place follows from seed, digest and entry id, and the admissions followed the places
(each entrant admitted only once the room had reached their place, each later arrival only once
it had reached them all).

It shares no code with the service on purpose: the rule is recomputed here from its
description, with hashlib and hmac.

Exit status: 0 when everything matches, 1 on any mismatch, 2 when the drop cannot be read (not
drawn yet, not a fair drop, not reachable).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

Fetch = Callable[[str], dict[str, Any]]
MAX_PAGES = 100_000  # a bound on a hostile server's pages (100 million entries)


class Unreadable(Exception):
    """The drop's public data could not be read."""


@dataclass
class Verdict:
    checks: dict[str, bool] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    entries: int = 0
    admissions: int = 0

    def check(self, name: str, ok: bool, problem: str) -> None:
        self.checks[name] = self.checks.get(name, True) and ok
        if not ok and len(self.problems) < 20:
            self.problems.append(problem)

    @property
    def ok(self) -> bool:
        return all(self.checks.values())


def _pages(fetch: Fetch, path: str, key: str) -> Iterator[dict[str, Any]]:
    token: str | None = None
    for _ in range(MAX_PAGES):
        query = f"?{urllib.parse.urlencode({'page_token': token})}" if token else ""
        page = fetch(path + query)
        yield from page[key]
        token = page.get("next_page_token")
        if not token:
            return
    raise Unreadable(f"{path}: more than {MAX_PAGES} pages")


def verify(fetch: Fetch) -> Verdict:
    """`fetch(path)` reads a path relative to the campaign's URL ("" is the campaign itself)."""
    fairness = fetch("/fairness")
    if fairness.get("seed") is None or fairness.get("entries_digest") is None:
        raise Unreadable(f"the draw is not published yet (state {fairness.get('state')!r})")
    verdict = Verdict()
    seed = bytes.fromhex(fairness["seed"])
    verdict.check(
        "commitment",
        hashlib.sha256(seed).hexdigest() == fairness["seed_commitment"],
        "SHA-256 of the revealed seed is not the published commitment",
    )
    placed = {e["entry_id"]: e["place"] for e in _pages(fetch, "/fairness/entries", "entries")}
    verdict.entries = len(placed)
    ids = sorted(placed)
    digest = hashlib.sha256("".join(f"{entry_id}\n" for entry_id in ids).encode()).hexdigest()
    verdict.check(
        "digest",
        digest == fairness["entries_digest"] and len(ids) == fairness["entries"],
        "the published entries do not hash to the published digest",
    )
    digest_bytes = bytes.fromhex(fairness["entries_digest"])

    def key(entry_id: str) -> tuple[bytes, str]:
        mac = hmac.new(seed, digest_bytes + entry_id.encode("ascii"), hashlib.sha256).digest()
        return mac, entry_id

    for place, entry_id in enumerate(sorted(ids, key=key), start=1):
        verdict.check(
            "places",
            placed[entry_id] == place,
            f"entry {entry_id}: published place {placed[entry_id]}, recomputed {place}",
        )
    seen: set[str] = set()
    for admission in _pages(fetch, "/fairness/admissions", "admissions"):
        verdict.admissions += 1
        entry_id, place, released = admission["entry_id"], admission["place"], admission["released"]
        if entry_id is None:
            verdict.check(
                "admission order",
                released >= len(ids),
                f"a later arrival was admitted when the room had reached place {released} of "
                f"{len(ids)}",
            )
            continue
        verdict.check(
            "admissions are entries",
            placed.get(entry_id) == place and entry_id not in seen,
            f"admission of {entry_id} at place {place}: not that entry's place, or twice",
        )
        seen.add(entry_id)
        verdict.check(
            "admission order",
            place is not None and place <= released,
            f"entry {entry_id} (place {place}) admitted when the room had reached {released}",
        )
    return verdict


def http_fetch(campaign_url: str, *, timeout: float = 30.0) -> Fetch:
    base = campaign_url.rstrip("/")

    def fetch(path: str) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(base + path, timeout=timeout) as response:  # noqa: S310
                body: dict[str, Any] = json.load(response)
        except (urllib.error.URLError, ValueError) as exc:
            raise Unreadable(f"{base + path}: {exc}") from exc
        return body

    return fetch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/verify_drop",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("campaign_url", help="e.g. http://127.0.0.1:8001/v1/campaigns/demo")
    args = parser.parse_args(argv)
    if urllib.parse.urlsplit(args.campaign_url).scheme not in ("http", "https"):
        sys.stderr.write("verify_drop: CAMPAIGN_URL must be an http(s) URL\n")
        return 2
    try:
        verdict = verify(http_fetch(args.campaign_url))
    except (Unreadable, KeyError, TypeError, ValueError) as exc:
        sys.stderr.write(f"verify_drop: cannot read the drop: {exc}\n")
        return 2
    report = {
        "ok": verdict.ok,
        "entries": verdict.entries,
        "admissions": verdict.admissions,
        "checks": verdict.checks,
        "problems": verdict.problems,
    }
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
