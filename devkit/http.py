"""HTTP for the tools, benchmarks and tests: requests, and never a proxy in front of localhost.

    from devkit import http

    status, body = http.call_json("POST", url, body={"n": 1}, token=id_token)
    response = http.request("POST", url, data=raw, headers=headers, timeout=10)
    if http.answers(url): ...

- `call_json(method, url, *, body=None, token=None, timeout=30)`: sends `body` as JSON and
  `token` as a Bearer token; returns `Reply(status, body)` where body is the parsed JSON answer,
  or None when the answer is empty or not JSON.
- `request(method, url, **kwargs)`: `requests.Session.request` for anything else (raw bytes,
  other headers); returns the `requests.Response`. `timeout` is required.
- `answers(url, *, timeout=2)`: readiness probe; any HTTP status means the server is up.

Every HTTP status is returned, never raised. When nothing answers (refused, reset, timed out) a
`requests.RequestException` is raised, exported here as `Unreachable` (it is an OSError).

Loopback URLs (127.0.0.1, localhost, ::1) go through a `requests.Session` with
`trust_env=False`: HTTP(S)_PROXY, .netrc and friends are ignored, so no corporate proxy ever sees
traffic meant for the local stack. Other URLs (upload_codes against a deployed admin_api) go
through a session that honours the environment as requests does by default. Each thread has its
own sessions, since requests does not promise that a Session is thread-safe; connections are
kept alive within a thread.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import requests

Unreachable = requests.RequestException

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

_sessions = threading.local()


class Reply(NamedTuple):
    status: int
    body: Any  # the parsed JSON answer; None when empty or not JSON


def _session(url: str) -> requests.Session:
    """This thread's session for `url`: the proxy-free one for loopback hosts."""
    local = (urlsplit(url).hostname or "") in LOOPBACK_HOSTS
    name = "local" if local else "remote"
    found: requests.Session | None = getattr(_sessions, name, None)
    if found is None:
        found = requests.Session()
        found.trust_env = not local
        setattr(_sessions, name, found)
    return found


def request(method: str, url: str, *, timeout: float, **kwargs: Any) -> requests.Response:
    """One request; every status is returned. Raises Unreachable when nothing answers."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an HTTP URL: {url}")
    return _session(url).request(method, url, timeout=timeout, **kwargs)


def call_json(
    method: str,
    url: str,
    *,
    body: object | None = None,
    token: str | None = None,
    timeout: float = 30.0,
) -> Reply:
    """Send `body` as JSON (if given) with `token` as Bearer token (if given); the status and
    the parsed answer."""
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    response = request(method, url, json=body, headers=headers, timeout=timeout)
    try:
        parsed = response.json() if response.content else None
    except requests.JSONDecodeError:
        parsed = None
    return Reply(response.status_code, parsed)


def answers(url: str, *, timeout: float = 2.0) -> bool:
    """Whether a server answers at `url` with any HTTP status."""
    try:
        request("GET", url, timeout=timeout).close()
    except Unreachable:
        return False
    return True
