"""The threads client's HTTP/1.1 connection (scripts/load_test/shoppers.py) against a local
server: keep-alive reuse, the answers it must read (Content-Length, chunked, until close), and the
one resend when the server had closed a kept-alive connection."""

from __future__ import annotations

import io
import json
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from scripts.load_test.shoppers import Connection, ProtocolError, ServerClosed, read_response

Answer = Callable[[bytes], bytes | None]  # a request's head -> the raw answer (None: close)


class Server:
    """Accepts connections and answers each request with `answer`; records what it saw."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                self.requests.append(head)
                raw = self.answer(head)
                if raw is None:
                    return
                conn.sendall(raw)

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], Server]]:
    servers: list[Server] = []

    def start(answer: Answer) -> Server:
        servers.append(Server(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def json_answer(status: int, body: object, *headers: str) -> bytes:
    data = json.dumps(body).encode()
    head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(data)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data


def test_requests_share_one_kept_alive_connection_and_answers_are_read_whole(
    serve: Callable[[Answer], Server],
) -> None:
    server = serve(lambda head: json_answer(201, {"code": "A1"}, "Retry-After: 2"))
    conn = Connection("127.0.0.1", server.port)
    for _ in range(3):
        conn.send("POST", "/v1/campaigns/c/claims", {"Authorization": "Bearer t"})
        reply = conn.receive()
        assert (reply.status, reply.body, reply.error) == (201, {"code": "A1"}, None)
        assert reply.headers["retry-after"] == "2"
    conn.close()
    assert server.connections == 1
    first = server.requests[0].decode()
    assert first.startswith("POST /v1/campaigns/c/claims HTTP/1.1\r\n")
    assert "Content-Length: 0\r\n" in first
    assert "Authorization: Bearer t\r\n" in first
    assert f"Host: 127.0.0.1:{server.port}\r\n" in first


def test_a_server_that_says_close_gets_a_new_connection_next_time(
    serve: Callable[[Answer], Server],
) -> None:
    server = serve(lambda head: json_answer(410, {"error_code": "SOLD_OUT"}, "Connection: close"))
    conn = Connection("127.0.0.1", server.port)
    for _ in range(2):
        conn.send("GET", "/", {})
        assert conn.receive().status == 410
    assert server.connections == 2


def test_a_kept_alive_connection_the_server_closed_is_resent_once_on_a_new_one(
    serve: Callable[[Answer], Server],
) -> None:
    answered = 0

    def answer(head: bytes) -> bytes | None:
        nonlocal answered
        answered += 1
        # The second request finds its connection closed by the server (its idle timeout).
        return None if answered == 2 else json_answer(200, {"n": answered})

    server = serve(answer)
    conn = Connection("127.0.0.1", server.port)
    conn.send("GET", "/a", {})
    assert conn.receive().body == {"n": 1}
    conn.send("GET", "/b", {})
    reply = conn.receive()
    assert (reply.status, reply.body) == (200, {"n": 3})
    assert server.connections == 2


def test_no_server_is_an_answer_of_status_0_with_the_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    conn = Connection("127.0.0.1", port)
    conn.send("GET", "/", {})
    reply = conn.receive()
    assert reply.status == 0
    assert reply.error is not None
    assert reply.error.startswith("ConnectionRefusedError")


def test_chunked_and_until_close_bodies_and_bodyless_statuses_are_read() -> None:
    chunked = io.BytesIO(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'4\r\n{"a"\r\n3;x=1\r\n: 1\r\n1\r\n}\r\n0\r\nTrailer: t\r\n\r\n'
    )
    assert read_response(chunked) == (200, {"transfer-encoding": "chunked"}, b'{"a": 1}', False)
    until_close = io.BytesIO(b"HTTP/1.0 500 X\r\n\r\n{}")
    assert read_response(until_close) == (500, {}, b"{}", True)
    no_content = io.BytesIO(b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert read_response(no_content) == (204, {}, b"", False)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"garbage\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_answers_it_cannot_read_are_errors(raw: bytes) -> None:
    with pytest.raises((ProtocolError, ServerClosed)):
        read_response(io.BytesIO(raw))
