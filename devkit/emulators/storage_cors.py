"""gcp-storage-emulator as the local stack runs it: with the CORS answers a browser upload needs.

The console uploads a CSV straight to the bucket through a resumable upload session that
admin_api opens with the console's origin. Cloud Storage answers the session's requests (and
their preflight) with `Access-Control-Allow-Origin` for the origin the session was opened with;
the emulator implements resumable sessions but answers no OPTIONS request and sends no CORS
header, so a browser could not PUT to it. This launcher adds exactly that, for development only:
a preflight is answered with the methods and headers an upload uses, and every answer to a
request with an Origin echoes it (the emulator does not remember the session's origin). Nothing
else of the emulator changes; production code never runs this file.

Run as a script by the interpreter that has the emulator:
`python devkit/emulators/storage_cors.py start --host=... --port=...` takes the emulator's
own arguments.
"""

from __future__ import annotations

import sys

from gcp_storage_emulator import server
from gcp_storage_emulator.__main__ import main

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


# The emulator's HTTP server builds its handler from this module attribute when it starts.
server.RequestHandler = CorsRequestHandler

if __name__ == "__main__":
    sys.exit(main())
