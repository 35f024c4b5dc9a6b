"""A webhook receiver in this process, on 127.0.0.1: it records every request it gets (when,
headers, body), answers as it is told (a status, after a delay), counts requests in flight, and
can go down (its port closed, open connections cut) and come back on the same port. For the
webhook tests and the webhook benchmark."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

from devkit.emulators import free_port


@dataclass(frozen=True)
class Received:
    at: float  # time.monotonic() when the request was read
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes

    @property
    def event_id(self) -> str:
        event_id: str = json.loads(self.body)["event_id"]
        return event_id


# (the request, how many requests for its event came before it) -> (status, delay in seconds)
Answer = Callable[[Received, int], tuple[int, float]]


def always_ok(request: Received, earlier: int) -> tuple[int, float]:
    return 200, 0.0


class Receiver:
    def __init__(self, *, answer: Answer = always_ok, port: int | None = None) -> None:
        self.answer = answer
        self.port = port or free_port()
        self.received: list[Received] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.connections = 0  # TCP connections accepted
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    # --- what arrived ---------------------------------------------------------------------------
    def event_ids(self) -> list[str]:
        with self._lock:
            return [r.event_id for r in self.received]

    def unique_event_ids(self) -> set[str]:
        """What a receiver that deduplicates on event_id keeps."""
        return set(self.event_ids())

    def starts(self) -> list[float]:
        with self._lock:
            return sorted(r.at for r in self.received)

    def max_in_window(self, window: float) -> int:
        """The most requests that arrived within any `window` seconds."""
        starts = self.starts()
        most, first = 0, 0
        for last, at in enumerate(starts):
            while at - starts[first] >= window:
                first += 1
            most = max(most, last - first + 1)
        return most

    # --- up and down ----------------------------------------------------------------------------
    def start(self) -> Self:
        server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the port and cut every open connection: the endpoint is down."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- serving --------------------------------------------------------------------------------
    def _arrived(self, request: Received) -> int:
        with self._lock:
            self.received.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            earlier = self._seen.get(request.event_id, 0)
            self._seen[request.event_id] = earlier + 1
            return earlier

    def _answered(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints do

            def setup(self) -> None:
                super().setup()
                with receiver._lock:
                    receiver._connections.add(self.connection)
                    receiver.connections += 1

            def finish(self) -> None:
                with receiver._lock:
                    receiver._connections.discard(self.connection)
                with contextlib.suppress(OSError):
                    super().finish()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = Received(
                    at=time.monotonic(),
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                earlier = receiver._arrived(request)
                try:
                    status, delay = receiver.answer(request, earlier)
                    time.sleep(delay)
                finally:
                    # Counted out before answering: once the answer is sent the sender may
                    # start its next request at once.
                    receiver._answered()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    self.close_connection = True  # the sender gave up waiting

            def log_message(self, format: str, *args: object) -> None:
                pass  # the test reads `received`, not a log

        return Handler
