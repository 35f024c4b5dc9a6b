"""CORS for browser callers: the landing pages and the console, by the origins listed in
CODEDROP_CORS_ORIGINS."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import flask


@dataclass(frozen=True)
class Cors:
    """A listed origin is echoed with credentials (the waiting-room cookie); "*" answers "*"
    without credentials, so no origin, `null` included, is ever echoed unless it was listed."""

    origins: tuple[str, ...]
    # Every header web/codedrop.js sends (App Check's only when the page provides a token), and
    # the console's If-Match (a campaign edit's version).
    allow_headers: str = (
        "Authorization, Content-Type, Idempotency-Key, X-Waiting-Room-Ticket, X-Firebase-AppCheck,"
        " If-Match"
    )
    expose_headers: str = "Retry-After, Content-Disposition"

    def headers_for(self, origin: str | None) -> dict[str, str]:
        if origin is None:
            return {}
        if origin != "*" and origin in self.origins:
            return {
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Expose-Headers": self.expose_headers,
                "Access-Control-Allow-Credentials": "true",
                "Vary": "Origin",
            }
        if "*" in self.origins:
            headers = {
                "Access-Control-Allow-Origin": "*",
                "Access-Control-Expose-Headers": self.expose_headers,
            }
            if len(self.origins) > 1:
                headers["Vary"] = "Origin"  # listed origins get another answer
            return headers
        return {}

    def preflight(self, origin: str | None, methods: Iterable[str]) -> flask.Response:
        response = flask.Response(status=204)
        headers = self.headers_for(origin)
        if headers:
            headers |= {
                "Access-Control-Allow-Methods": ", ".join(sorted(methods)),
                "Access-Control-Allow-Headers": self.allow_headers,
                "Access-Control-Max-Age": "3600",
            }
        response.headers.update(headers)
        return response
