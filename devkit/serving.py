"""An http.server served by a daemon thread of this process, started and stopped as a context
manager: the base of the dev kit's small local servers (stand-ins, the example page)."""

from __future__ import annotations

import threading
from http.server import HTTPServer
from typing import Self


class BackgroundServer:
    """Serves `server` in a daemon thread between start() and stop(); `url` names it with the
    host it was asked for (a page's origin says localhost where the socket says 127.0.0.1)."""

    def __init__(
        self, server: HTTPServer, *, host: str = "127.0.0.1", name: str | None = None
    ) -> None:
        self._server = server
        self.url = f"http://{host}:{server.server_address[1]}"
        self._thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
