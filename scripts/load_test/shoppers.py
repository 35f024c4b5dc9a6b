"""Flash-sale shoppers: a plain HTTP client, N threads over keep-alive connections.

    .venv/bin/python -m scripts.load_test.shoppers --host http://127.0.0.1:8001 \\
        --campaign ID --shoppers 10000 [--threads 64] [--ramp-seconds 0] \\
        [--project demo-codedrop] [--double-click-share 0.1] [--record responses.jsonl]

./scripts/loadtest runs it (`--prepare-only` prints this command for a campaign it creates).
Each shopper opens the campaign, claims with an ID token of its own (retrying 503 and 429 after
Retry-After, sending back the waiting-room ticket) and reads the code back; a
--double-click-share of the shoppers send a second claim while the first is in flight. The
records are one JSONL line per response and one `journey` line per shopper (its final answer),
which the audit and the report read.

Every shopper's ID token is made before the clock starts. All shoppers are due at once (or
evenly over --ramp-seconds); each thread takes the shopper due first, so a shopper waiting out a
Retry-After holds no thread, and no more than --threads are in flight, as with a fixed pool of
callers. Each thread keeps two keep-alive HTTP/1.1 connections (plain sockets, see Connection):
the second carries a double click's second request, sent before the first one's answer is read.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import os
import random
import secrets
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from devkit.emulators.tokens import emulator_id_token
from scripts.load_test.records import (
    CODE,
    CONNECTION_RETRY_PAUSE,
    ERROR,
    KIND_CAMPAIGN,
    KIND_CLAIM,
    KIND_DOUBLE,
    KIND_JOURNEY,
    KIND_ME,
    MAX_RETRY_AFTER,
    RETRIED_STATUSES,
    SOLD_OUT,
    TICKET_HEADER,
    UNANSWERED,
    Recorder,
    json_object,
    retry_after_seconds,
)

# gunicorn closes a keep-alive connection idle for 2 s (its `keepalive`): one idle longer than
# this is replaced before use rather than found closed.
IDLE_REOPEN_SECONDS = 1.5
FLUSH_EVERY = 500  # lines; the load test follows progress in the file
TIMEOUT = 60.0
# An answer's status and header lines are short; anything longer is not one of ours.
MAX_LINE = 65536
MAX_HEADERS = 100


# --- one keep-alive connection ----------------------------------------------------------------


@dataclass
class Reply:
    status: int  # 0: no answer (connection error)
    headers: dict[str, str]
    body: dict[str, Any]
    sent_at: float  # epoch seconds
    ms: float
    error: str | None = None


class Connection:
    """One HTTP/1.1 keep-alive connection: a request is sent, then its answer read, so that two
    connections can each have a request in flight.

    The requests and answers are read and written here on the socket rather than through
    http.client, whose header parsing (the email package) took 40% of this client's CPU; the
    client's CPU shares the two cores with the stack it measures. Answers carry Content-Length
    or are chunked (gunicorn's); one with neither ends when the server closes."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._sock: socket.socket | None = None
        self._reader: BinaryIO | None = None
        self._last_used = 0.0
        self._request: tuple[str, str, dict[str, str]] = ("GET", "/", {})
        self._reused = False
        self._sent_at = 0.0
        self._clock = 0.0
        self._error: str | None = None
        self._closed_by_server = False

    def send(self, method: str, path: str, headers: dict[str, str]) -> None:
        self._request = (method, path, headers)
        if self._sock is not None and time.monotonic() - self._last_used > IDLE_REOPEN_SECONDS:
            self._drop()
        self._reused = self._sock is not None
        self._sent_at, self._clock = time.time(), time.perf_counter()
        self._error = None
        self._closed_by_server = False
        try:
            if self._sock is None:
                self._sock = socket.create_connection((self.host, self.port), timeout=TIMEOUT)
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._reader = self._sock.makefile("rb")
            self._sock.sendall(self._encode(method, path, headers))
        except OSError as exc:
            self._fail(exc)

    def _encode(self, method: str, path: str, headers: dict[str, str]) -> bytes:
        # What http.client sent: Host, Accept-Encoding: identity, an empty POST's length.
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        lines.append("Accept-Encoding: identity")
        if method == "POST":
            lines.append("Content-Length: 0")
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def receive(self) -> Reply:
        reply = self._receive()
        if reply.status == 0 and self._reused and self._closed_by_server:
            # The server closed this kept-alive connection before reading the request: send
            # it again once on a new connection, as browsers do.
            self._drop()
            self.send(*self._request)
            reply = self._receive()
        return reply

    def _receive(self) -> Reply:
        if self._error is None and self._reader is not None:
            try:
                status, headers, data, will_close = read_response(self._reader)
            except (OSError, ProtocolError) as exc:
                self._fail(exc)
            else:
                if will_close:
                    self._drop()
                self._last_used = time.monotonic()
                return Reply(status, headers, json_object(data), self._sent_at, self._ms())
        return Reply(0, {}, {}, self._sent_at, self._ms(), self._error or "not sent")

    def _fail(self, exc: BaseException) -> None:
        self._drop()
        self._error = f"{type(exc).__name__}: {exc}"[:200]
        self._closed_by_server = isinstance(exc, ServerClosed | ConnectionResetError)

    def _ms(self) -> float:
        return (time.perf_counter() - self._clock) * 1000

    def _drop(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def close(self) -> None:
        self._drop()


class ProtocolError(Exception):
    """An answer this client cannot read."""


class ServerClosed(ConnectionResetError):
    """The server closed the connection before answering (on a kept-alive one: it had timed
    out, and the request was never read)."""


def read_response(reader: BinaryIO) -> tuple[int, dict[str, str], bytes, bool]:
    """Status, headers (lower-case names), body, and whether the server closes after it."""
    line = reader.readline(MAX_LINE + 1)
    if not line:
        raise ServerClosed("Remote end closed connection without response")
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise ProtocolError(f"bad status line {line[:80]!r}")
    version, status = parts[0], int(parts[1])
    headers: dict[str, str] = {}
    while True:
        line = reader.readline(MAX_LINE + 1)
        if line in (b"\r\n", b"\n"):
            break
        if not line or len(line) > MAX_LINE or len(headers) >= MAX_HEADERS:
            raise ProtocolError("headers cut short or too long")
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    will_close = version == b"HTTP/1.0" or headers.get("connection", "").lower() == "close"
    if status in (204, 304) or 100 <= status < 200:
        return status, headers, b"", will_close
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return status, headers, _chunked(reader), will_close
    length = headers.get("content-length")
    if length is None:
        return status, headers, reader.read(), True  # the body ends with the connection
    if not length.isdigit():
        raise ProtocolError(f"bad Content-Length {length[:40]!r}")
    body = reader.read(int(length))
    if len(body) < int(length):
        raise ProtocolError("body cut short")
    return status, headers, body, will_close


def _chunked(reader: BinaryIO) -> bytes:
    body = bytearray()
    while True:
        size_line = reader.readline(MAX_LINE + 1)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size {size_line[:40]!r}") from None
        if size == 0:
            while reader.readline(MAX_LINE + 1) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return bytes(body)
        chunk = reader.read(size + 2)  # and its CRLF
        if len(chunk) < size + 2:
            raise ProtocolError("chunk cut short")
        body += chunk[:size]


def _retry_after(reply: Reply) -> float:
    if reply.status == 0:
        return CONNECTION_RETRY_PAUSE
    if reply.status == 429 and isinstance(reply.body.get("retry_after_ms"), int | float):
        seconds = float(reply.body["retry_after_ms"]) / 1000
        return min(max(seconds, 0.0), MAX_RETRY_AFTER)
    return retry_after_seconds(reply.headers.get("retry-after"))


# --- the shopper ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scenario:
    campaign: str
    claim_attempts: int
    give_up_after: float

    @property
    def base(self) -> str:
        return f"/v1/campaigns/{self.campaign}"


@dataclass
class Click:
    """One click of the claim button: its requests, retries included, and how it ended."""

    kind: str
    outcome: str = UNANSWERED
    status: int = 0
    code: str | None = None
    attempts: int = 0
    due: float = 0.0  # monotonic
    first_sent: float | None = None
    answered_at: float | None = None
    ticket: str | None = None
    done: bool = False

    def judge(self, reply: Reply, scenario: Scenario, deadline: float) -> None:
        self.status = reply.status
        if reply.status in (200, 201):
            code = reply.body.get("code")
            self.code = code if isinstance(code, str) else None
            self.outcome = CODE if self.code is not None else ERROR
        elif reply.status == 410:
            self.outcome = SOLD_OUT
        elif reply.status in RETRIED_STATUSES or reply.status == 0:
            if reply.status == 429 and isinstance(reply.body.get("ticket"), str):
                self.ticket = reply.body["ticket"]
            pause = _retry_after(reply)
            self.due = time.monotonic() + pause
            if self.attempts < scenario.claim_attempts and self.due <= deadline:
                return
            self.outcome = UNANSWERED
            self.done = True
            return
        else:
            self.outcome = ERROR
        self.answered_at = time.time()
        self.done = True


@dataclass
class Journey:
    """One shopper's visit, run step by step by whichever thread takes it when it is due."""

    shopper: str
    auth: dict[str, str]
    clicks: list[Click]
    due: float  # monotonic
    started: float = 0.0
    clock: float = 0.0
    deadline: float = 0.0

    def step(self, conns: Sequence[Connection], scenario: Scenario, out: Recorder) -> float | None:
        """Send what is due; the monotonic time of the next step, or None when finished."""
        if not self.started:
            self.started, self.clock = time.time(), time.perf_counter()
            self.deadline = time.monotonic() + scenario.give_up_after
            conns[0].send("GET", scenario.base, {})
            self._record(out, KIND_CAMPAIGN, conns[0].receive())
        now = time.monotonic()
        due = [(i, c) for i, c in enumerate(self.clicks) if not c.done and c.due <= now]
        for i, click in due:
            headers = dict(self.auth)
            if click.ticket:
                headers[TICKET_HEADER] = click.ticket
            click.attempts += 1
            conns[i].send("POST", f"{scenario.base}/claims", headers)
            if click.first_sent is None:
                click.first_sent = time.time()
        for i, click in due:
            reply = conns[i].receive()
            self._record(out, click.kind, reply, attempt=click.attempts)
            click.judge(reply, scenario, self.deadline)
        waiting = [c.due for c in self.clicks if not c.done]
        if waiting:
            return min(waiting)
        self._finish(conns[0], scenario, out)
        return None

    def _record(self, out: Recorder, kind: str, reply: Reply, attempt: int = 1) -> None:
        record: dict[str, Any] = {
            "t": round(reply.sent_at, 6),
            "shopper": self.shopper,
            "kind": kind,
            "ms": round(reply.ms, 2),
            "attempt": attempt,
            "status": reply.status,
        }
        if kind == KIND_ME:
            claims = reply.body.get("claims")
            if isinstance(claims, list):
                record["codes"] = [c.get("code") for c in claims if isinstance(c, dict)]
        elif isinstance(reply.body.get("code"), str):
            record["code"] = reply.body["code"]
        if isinstance(reply.body.get("error_code"), str):
            record["error"] = reply.body["error_code"]
        if reply.error is not None:
            record["error"] = reply.error
        out.add(record)

    def _finish(self, conn: Connection, scenario: Scenario, out: Recorder) -> None:
        """The journey record: what the page ends up showing (a code if either click got one,
        else the first click's answer, the second's if the first got none) and the clicks."""
        first = self.clicks[0]
        double = self.clicks[1] if len(self.clicks) > 1 else None
        final = first
        if double is not None and (
            (double.code is not None and first.code is None) or first.outcome == UNANSWERED
        ):
            final = double
        record: dict[str, Any] = {
            "shopper": self.shopper,
            "kind": KIND_JOURNEY,
            "outcome": final.outcome,
            "status": final.status,
            "code": final.code,
            "attempts": first.attempts,
            "first_claim_at": first.first_sent,
            "answered_at": final.answered_at,
            "double_click": double is not None,
        }
        if double is not None:
            record["double_outcome"] = double.outcome
            record["double_code"] = double.code
        if final.code is not None:
            conn.send("GET", f"{scenario.base}/claims/me", self.auth)
            reply = conn.receive()
            self._record(out, KIND_ME, reply)
            claims = reply.body.get("claims") if reply.status == 200 else None
            if isinstance(claims, list):
                record["read_back"] = [str(c.get("code")) for c in claims if isinstance(c, dict)]
        ms = round((time.perf_counter() - self.clock) * 1000, 2)  # read back included
        out.add({"t": round(self.started, 6), "ms": ms, **record})


# --- the threads ------------------------------------------------------------------------------


class Schedule:
    """The journeys by the time their next step is due; a thread takes the earliest due one."""

    def __init__(self, journeys: Sequence[Journey]) -> None:
        self._order = itertools.count()
        self._heap = [(j.due, next(self._order), j) for j in journeys]
        heapq.heapify(self._heap)
        self._busy = 0
        self.finished = 0
        self._ready = threading.Condition()

    def take(self) -> Journey | None:
        with self._ready:
            while True:
                if not self._heap:
                    if self._busy == 0:
                        return None
                    self._ready.wait()
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait <= 0:
                    self._busy += 1
                    return heapq.heappop(self._heap)[2]
                self._ready.wait(wait)

    def give_back(self, journey: Journey, due: float | None) -> None:
        with self._ready:
            self._busy -= 1
            if due is None:
                self.finished += 1
            else:
                journey.due = due
                heapq.heappush(self._heap, (due, next(self._order), journey))
            if not self._heap and not self._busy:
                self._ready.notify_all()  # nothing left: every thread ends
            else:
                self._ready.notify()


def _worker(schedule: Schedule, host: str, port: int, scenario: Scenario, out: Recorder) -> None:
    conns = [Connection(host, port), Connection(host, port)]
    try:
        while (journey := schedule.take()) is not None:
            due: float | None = None
            try:
                due = journey.step(conns, scenario, out)
            finally:
                schedule.give_back(journey, due)
    finally:
        for conn in conns:
            conn.close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.load_test.shoppers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", required=True, help="claim_api base URL")
    parser.add_argument("--campaign", required=True)
    parser.add_argument("--shoppers", type=int, required=True)
    parser.add_argument("--threads", type=int, default=64, help="default %(default)s")
    parser.add_argument(
        "--ramp-seconds", type=float, default=0.0, help="0 (default): everyone at once"
    )
    parser.add_argument("--project", default="demo-codedrop")
    parser.add_argument("--double-click-share", type=float, default=0.1)
    parser.add_argument("--claim-attempts", type=int, default=40)
    parser.add_argument("--give-up-after", type=float, default=120.0)
    parser.add_argument("--record", default="", help="JSONL file the responses are appended to")
    parser.add_argument("--shopper-prefix", default=f"shopper-{secrets.token_hex(3)}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.shoppers < 1 or args.threads < 1:
        sys.stderr.write("--shoppers and --threads must be positive\n")
        return 2
    url = urlsplit(args.host)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    scenario = Scenario(args.campaign, max(1, args.claim_attempts), args.give_up_after)
    # The ID tokens before the clock starts: making one is not part of a shopper's wait.
    journeys: list[Journey] = []
    for number in range(1, args.shoppers + 1):
        shopper = f"{args.shopper_prefix}-{os.getpid()}-{number:06d}"
        token = emulator_id_token(shopper, project=args.project)
        clicks = [Click(KIND_CLAIM)]
        if random.random() < args.double_click_share:
            clicks.append(Click(KIND_DOUBLE))
        journeys.append(Journey(shopper, {"Authorization": f"Bearer {token}"}, clicks, 0.0))
    start = time.monotonic()
    for number, journey in enumerate(journeys):
        journey.due = start + args.ramp_seconds * number / args.shoppers
    out = Recorder(flush_every=FLUSH_EVERY)
    out.open(args.record)
    schedule = Schedule(journeys)
    threads = [
        threading.Thread(
            target=_worker, args=(schedule, host, port, scenario, out), name=f"shopper-{n}"
        )
        for n in range(args.threads)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.close()
    seconds = time.monotonic() - start
    sys.stdout.write(
        f"{schedule.finished:,} shoppers in {seconds:.1f} s over {args.threads} threads\n"
    )
    return 0 if schedule.finished == args.shoppers else 1


if __name__ == "__main__":
    sys.exit(main())
