"""gcp-storage-emulator as the local stack runs it: with the CORS answers a browser upload needs.

The console uploads a CSV straight to the bucket through a resumable upload session that
admin_api opens with the console's origin. Cloud Storage answers the session's requests (and
their preflight) with `Access-Control-Allow-Origin` for the origin the session was opened with;
the emulator implements resumable sessions but answers no OPTIONS request and sends no CORS
header, so a browser could not PUT to it. This launcher adds exactly that, for development only:
a preflight is answered with the methods and headers an upload uses, and every answer to a
request with an Origin echoes it (the emulator does not remember the session's origin).

It also answers a session's status query (`Content-Range: bytes */TOTAL`) as Cloud Storage does
before any byte was persisted: a 308 without `Range`. The emulator answers `Range: bytes=0-0`
there, which says one byte arrived, so a console resuming from it would skip the file's first
byte (and the emulator then refuses the chunk). Nothing else of the emulator changes; production
code never runs this file.

Run as a script by the interpreter that has the emulator:
`python devkit/emulators/storage_cors.py start --host=... --port=...` takes the emulator's
own arguments.
"""

from __future__ import annotations

import sys
from typing import Any

from gcp_storage_emulator import server
from gcp_storage_emulator.__main__ import main
from gcp_storage_emulator.handlers import objects

UPLOAD_METHODS = "GET, POST, PUT"
EXPOSED = "Location, Range, Content-Length, X-GUploader-UploadID"


class CorsRequestHandler(server.RequestHandler):  # type: ignore[misc]
    def end_headers(self) -> None:
        origin = self.headers.get("Origin")
        if origin:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Expose-Headers", EXPOSED)
            self.send_header("Vary", "Origin")
        super().end_headers()

    def do_OPTIONS(self) -> None:  # noqa: N802 (http.server's naming)
        self.send_response(204)
        self.send_header("Access-Control-Allow-Methods", UPLOAD_METHODS)
        requested = self.headers.get("Access-Control-Request-Headers")
        self.send_header("Access-Control-Allow-Headers", requested or "Content-Type, Content-Range")
        self.send_header("Access-Control-Max-Age", "3600")
        self.send_header("Content-Length", "0")
        self.end_headers()


def _resumable_incomplete(
    response: Any, storage: Any, upload_id: str, fallback_end: int = 0
) -> None:
    """The emulator's 308 for a session not complete yet, without its Range before the first
    byte (`fallback_end` is the emulator's own argument, unused as Cloud Storage has none)."""
    response.status = objects.GoogleHTTPStatus.RESUME_INCOMPLETE
    received = storage.get_resumable_byte_count(upload_id)
    if received:
        response["Range"] = f"bytes=0-{received - 1}"


# The emulator's HTTP server builds its handler from this module attribute when it starts, and
# its object handlers call the module's function by name.
server.RequestHandler = CorsRequestHandler
objects._resumable_incomplete = _resumable_incomplete

if __name__ == "__main__":
    sys.exit(main())
