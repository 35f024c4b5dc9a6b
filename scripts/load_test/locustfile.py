"""Flash-sale shoppers for locust: each one opens the campaign, claims a code once, and reads it
back; a share of them double-click the claim button.

Headless (./scripts/loadtest runs it this way, after creating the campaign and its codes), from
the repository root (locust puts the working directory on the import path; the shoppers' ID
tokens come from the `emulator` package):

    locust -f scripts/load_test/locustfile.py --headless -u 10000 -r 333 \\
        --host http://127.0.0.1:8001 --campaign CAMPAIGN_ID [--project demo-codedrop] \\
        [--double-click-share 0.1] [--record responses.jsonl]

In locust's web UI (`locust -f scripts/load_test/locustfile.py --host http://127.0.0.1:8001
--campaign ID`; `./scripts/loadtest --prepare-only` creates a campaign and prints this command),
the user count is the number of shoppers and the spawn rate their arrival rate.

Every shopper is one locust user that makes one journey, then idles until the run ends (so the
user count is the number of shoppers, also during a ramp):

1. GET  /v1/campaigns/{id}                  (the landing page opens)
2. POST /v1/campaigns/{id}/claims           with an emulator ID token of its own (user id unique
   per shopper). 503 CONTENDED and 429 WAITING_ROOM are retried after their Retry-After; a
   waiting-room ticket from a 429 body is sent back in X-Waiting-Room-Ticket (and its
   retry_after_ms, when given, is the pause). A connection
   error is retried after a short pause. A double-clicking shopper sends a second POST while the
   first is in flight (same retries).
3. GET  /v1/campaigns/{id}/claims/me        when the claim gave a code.

Each response (shopper, kind, attempt, status, latency, start time, code) is written to the
`--record` JSONL file from locust's request event; one `journey` line per shopper closes its
story with its final answer. When all shoppers of the run finished their journey, the run stops
(headless: locust quits). With --processes, every process appends to the same file (one write
per journey: O_APPEND keeps the lines whole) and tells the master when a journey ends.
"""

from __future__ import annotations

import itertools
import os
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Any, TypeVar, cast

import gevent  # type: ignore[import-untyped]
from locust import FastHttpUser, events, runners, task
from locust.argument_parser import LocustArgumentParser
from locust.contrib.fasthttp import FastResponse, ResponseContextManager
from locust.env import Environment
from locust.event import EventHook
from locust.runners import MasterRunner, WorkerRunner

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
    journey_record,
    json_object,
    retry_after_seconds,
)

# With --processes, the master stops the run when a worker misses 3 heartbeats (3 s) and
# starts it again when the worker is back, with new users. On a machine that the system under
# test saturates, workers do miss them: give them 30 s.
runners.HEARTBEAT_LIVENESS = 30

JOURNEY_MESSAGE = "codedrop_journey_done"
STAT_NAMES = {
    KIND_CAMPAIGN: "/v1/campaigns/[id]",
    KIND_CLAIM: "/v1/campaigns/[id]/claims",
    KIND_DOUBLE: "/v1/campaigns/[id]/claims (double click)",
    KIND_ME: "/v1/campaigns/[id]/claims/me",
    KIND_JOURNEY: "shopper: open, claim, read back",
}
DOCUMENTED_STATUSES = (200, 201, 410, 429, 503)
FLUSH_EVERY = 200  # lines; a journey end flushes too

# Shopper ids: a tag shared by the processes of one run (chosen before --processes forks), the
# process id, and a sequence number. Unique per run, and across runs on one campaign.
RUN_TAG = secrets.token_hex(3)
_sequence = itertools.count(1)


F = TypeVar("F", bound=Callable[..., None])


def listen(hook: EventHook) -> Callable[[F], F]:
    """`@events.X.add_listener`, typed (locust's EventHook is not annotated)."""

    def register(handler: F) -> F:
        cast(Any, hook).add_listener(handler)
        return handler

    return register


def mark(response: ResponseContextManager, failure: str | None = None) -> None:
    """Success or failure of a request in locust's statistics."""
    manual = cast(Any, response)
    if failure is None:
        manual.success()
    else:
        manual.failure(failure)


# --- options ----------------------------------------------------------------------------------


@listen(events.init_command_line_parser)
def _options(parser: LocustArgumentParser) -> None:
    # On the parser itself: locust's argument groups do not know include_in_web_ui.
    group = parser
    group.add_argument(
        "--campaign",
        default=os.environ.get("CODEDROP_LOADTEST_CAMPAIGN", ""),
        include_in_web_ui=True,
        help="campaign id the shoppers claim from (env CODEDROP_LOADTEST_CAMPAIGN)",
    )
    group.add_argument(
        "--project",
        default=os.environ.get("GOOGLE_CLOUD_PROJECT") or "demo-codedrop",
        include_in_web_ui=True,
        help="project id the emulator ID tokens are issued for (default demo-codedrop)",
    )
    group.add_argument(
        "--double-click-share",
        type=float,
        default=0.1,
        include_in_web_ui=True,
        help="share of shoppers who send a second claim while the first is in flight",
    )
    group.add_argument(
        "--record",
        default="",
        include_in_web_ui=False,
        help="append every response to this JSONL file (default: do not record)",
    )
    group.add_argument(
        "--claim-attempts",
        type=int,
        default=40,
        include_in_web_ui=True,
        help="claim requests a shopper sends at most (503/429 retries included)",
    )
    group.add_argument(
        "--give-up-after",
        type=float,
        default=120.0,
        include_in_web_ui=True,
        help="seconds after which a shopper stops retrying (no answer)",
    )
    group.add_argument(
        "--shopper-prefix",
        default=f"shopper-{RUN_TAG}",
        include_in_web_ui=False,
        help="user ids are PREFIX-PID-N",
    )


@dataclass(frozen=True, slots=True)
class Scenario:
    campaign: str
    project: str
    double_click_share: float
    claim_attempts: int
    give_up_after: float
    shopper_prefix: str

    @classmethod
    def of(cls, environment: Environment) -> Scenario:
        options = environment.parsed_options
        if options is None:
            raise RuntimeError("locust ran without parsed options")
        campaign = str(options.campaign or "").strip()
        if not campaign:
            raise RuntimeError(
                "no campaign: pass --campaign ID (./scripts/loadtest --prepare-only creates one)"
            )
        share = float(options.double_click_share)
        if not 0.0 <= share <= 1.0:
            raise RuntimeError("--double-click-share must be between 0 and 1")
        return cls(
            campaign=campaign,
            project=str(options.project),
            double_click_share=share,
            claim_attempts=max(1, int(options.claim_attempts)),
            give_up_after=float(options.give_up_after),
            shopper_prefix=str(options.shopper_prefix),
        )


# --- recording --------------------------------------------------------------------------------


recorder = Recorder(flush_every=FLUSH_EVERY)


def _body(response: Any) -> dict[str, Any]:
    """The JSON object body of a response, or {} (a connection error has no body)."""
    try:
        text = response.text if response is not None else None
    except (OSError, HTTPException, LookupError):  # the body broke off, or an unknown charset
        return {}
    return json_object(text)


@listen(events.request)
def _record_response(
    request_type: str,
    name: str,
    response_time: float,
    response: Any = None,
    context: dict[str, Any] | None = None,
    exception: BaseException | None = None,
    start_time: float | None = None,
    **_: Any,
) -> None:
    if not context or "shopper" not in context:
        return
    kind = context.get("kind", "")
    record: dict[str, Any] = {
        "t": round(start_time if start_time is not None else time.time(), 6),
        "shopper": context["shopper"],
        "kind": kind,
        "ms": round(response_time, 2),
    }
    if kind == KIND_JOURNEY:
        record.update({k: v for k, v in context.items() if k not in ("shopper", "kind")})
        recorder.add(record)
        return
    status = int(getattr(response, "status_code", 0) or 0)
    record["attempt"] = context.get("attempt", 1)
    record["status"] = status
    body = _body(response) if status else {}
    if kind == KIND_ME:
        claims = body.get("claims")
        if isinstance(claims, list):
            record["codes"] = [c.get("code") for c in claims if isinstance(c, dict)]
    elif isinstance(body.get("code"), str):
        record["code"] = body["code"]
    if isinstance(body.get("error_code"), str):
        record["error"] = body["error_code"]
    if status == 0 and exception is not None:
        record["error"] = str(exception)[:200]
    recorder.add(record)


# --- finishing: the run ends when every shopper finished its journey --------------------------


class Finish:
    """Counts finished journeys where the whole run is visible (the local runner or the master)
    and stops the run when the target user count is reached."""

    def __init__(self) -> None:
        self.done = 0
        self.stopping = False

    def reset(self) -> None:
        self.done = 0
        self.stopping = False

    def add(self, environment: Environment, count: int) -> None:
        self.done += count
        runner = environment.runner
        if runner is None or self.stopping:
            return
        target = runner.target_user_count
        if target and self.done >= target:
            self.stopping = True
            # Not from inside a user's greenlet: quitting kills the users.
            gevent.spawn_later(0.2, _end_run, environment)


finish = Finish()


def _end_run(environment: Environment) -> None:
    runner = environment.runner
    if runner is None:
        return
    recorder.flush()
    options = environment.parsed_options
    if options is not None and options.headless:
        runner.quit()
    else:
        runner.stop()  # the web UI keeps showing the finished run


def _journey_done(environment: Environment) -> None:
    recorder.flush()
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.send_message(JOURNEY_MESSAGE, {"count": 1})
    else:
        finish.add(environment, 1)


@listen(events.init)
def _on_init(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    if options is not None and not isinstance(environment.runner, MasterRunner):
        recorder.open(str(options.record or ""))
    runner = environment.runner
    if isinstance(runner, MasterRunner):

        def on_journey(environment: Environment, msg: Any, **_: Any) -> None:
            finish.add(environment, int((msg.data or {}).get("count", 1)))

        runner.register_message(JOURNEY_MESSAGE, on_journey)


@listen(events.test_start)
def _on_test_start(environment: Environment, **_: Any) -> None:
    finish.reset()


@listen(events.test_stop)
def _on_test_stop(environment: Environment, **_: Any) -> None:
    recorder.flush()


@listen(events.quitting)
def _on_quitting(environment: Environment, **_: Any) -> None:
    recorder.close()


# --- the shopper ------------------------------------------------------------------------------


@dataclass
class Answer:
    """What one click (a claim request and its retries) ended with."""

    outcome: str = UNANSWERED
    status: int = 0
    code: str | None = None
    attempts: int = 0
    first_sent: float | None = None
    answered_at: float | None = None  # when the final answer arrived (epoch seconds)
    statuses: list[int] = field(default_factory=list)


def _retry_after(response: FastResponse) -> float:
    headers: Any = response.headers
    raw = headers.get("Retry-After") if headers else None
    return retry_after_seconds(str(raw) if raw is not None else None)


class Shopper(FastHttpUser):
    """One shopper, one journey; then the user sits idle until the run ends.

    Idle rather than stopped: while locust ramps up it tops the number of running users up to
    its target, so a user that stopped would be replaced by a new shopper and the arrivals
    would no longer be N over T seconds. An idle user waits between tasks, where stopping the
    run ends it at once.
    """

    finished = False
    # Connection errors are retried by the journey itself (and recorded), not by the client.
    max_retries = 0
    network_timeout = 60.0
    connection_timeout = 60.0
    concurrency = 2  # a double click has two requests in flight

    def on_start(self) -> None:
        self.scenario = Scenario.of(self.environment)
        self.shopper_id = f"{self.scenario.shopper_prefix}-{os.getpid()}-{next(_sequence):06d}"
        token = emulator_id_token(self.shopper_id, project=self.scenario.project)
        self.auth = {"Authorization": f"Bearer {token}"}
        self.base = f"/v1/campaigns/{self.scenario.campaign}"

    def _context(self, kind: str, attempt: int = 1) -> dict[str, Any]:
        return {"shopper": self.shopper_id, "kind": kind, "attempt": attempt}

    def wait_time(self) -> float:
        return 3600.0 if self.finished else 0.0

    @task
    def journey(self) -> None:
        if self.finished:
            return
        started = time.time()
        clock = time.perf_counter()
        self._open_campaign()
        second: Any = None  # the double click's greenlet
        if random.random() < self.scenario.double_click_share:
            second = gevent.spawn_later(random.uniform(0.0, 0.03), self._claim, KIND_DOUBLE)
        answer = self._claim(KIND_CLAIM)
        double: Answer | None = second.get() if second is not None else None
        got_code = answer.code is not None or (double is not None and double.code is not None)
        read_back = self._read_back() if got_code else None
        context = journey_record(self.shopper_id, answer, double, read_back)
        self.environment.events.request.fire(
            request_type="JOURNEY",
            name=STAT_NAMES[KIND_JOURNEY],
            response_time=(time.perf_counter() - clock) * 1000,
            response_length=0,
            response=None,
            context=context,
            exception=None
            if context["outcome"] in (CODE, SOLD_OUT)
            else RuntimeError(f"no answer: {context['outcome']} {context['status']}"),
            start_time=started,
            url=self.base,
        )
        self.finished = True
        _journey_done(self.environment)

    def _open_campaign(self) -> None:
        with self.client.get(
            self.base,
            name=STAT_NAMES[KIND_CAMPAIGN],
            context=self._context(KIND_CAMPAIGN),
            catch_response=True,
        ) as response:
            if response.status_code == 200:
                mark(response)
            else:
                mark(response, f"campaign answered {response.status_code}")

    def _claim(self, kind: str) -> Answer:
        answer = Answer()
        ticket: str | None = None
        deadline = time.monotonic() + self.scenario.give_up_after
        for attempt in range(1, self.scenario.claim_attempts + 1):
            headers = dict(self.auth)
            if ticket:
                headers[TICKET_HEADER] = ticket
            if answer.first_sent is None:
                answer.first_sent = time.time()
            with self.client.post(
                f"{self.base}/claims",
                data="",
                headers=headers,
                name=STAT_NAMES[kind],
                context=self._context(kind, attempt),
                catch_response=True,
            ) as response:
                status = int(response.status_code or 0)
                answer.attempts = attempt
                answer.statuses.append(status)
                answer.status = status
                pause = self._judge(response, status)
                body = _body(response) if status in (200, 201, 429) else {}
            if status in (200, 201):
                code = body.get("code")
                answer.outcome = CODE if isinstance(code, str) else ERROR
                answer.code = code if isinstance(code, str) else None
                answer.answered_at = time.time()
                return answer
            if status == 410:
                answer.outcome = SOLD_OUT
                answer.answered_at = time.time()
                return answer
            if pause is None:  # an answer that retrying will not change
                answer.outcome = ERROR
                answer.answered_at = time.time()
                return answer
            if status == 429:
                if isinstance(body.get("ticket"), str):
                    ticket = body["ticket"]
                if isinstance(body.get("retry_after_ms"), int | float):
                    pause = min(max(body["retry_after_ms"] / 1000, 0.0), MAX_RETRY_AFTER)
            if time.monotonic() + pause > deadline:
                break
            gevent.sleep(pause)
        answer.outcome = UNANSWERED
        return answer

    @staticmethod
    def _judge(response: ResponseContextManager, status: int) -> float | None:
        """Mark the request for locust's statistics; the pause before a retry (None: final)."""
        if status in DOCUMENTED_STATUSES:
            mark(response)  # SOLD_OUT and "retry later" are answers the API promises
        elif status == 0:
            mark(response, f"no answer: {response.request_meta.get('exception')}")
        else:
            mark(response, f"claim answered {status}")
        if status in RETRIED_STATUSES:
            return _retry_after(response)
        if status == 0:
            return CONNECTION_RETRY_PAUSE
        return None

    def _read_back(self) -> list[str] | None:
        with self.client.get(
            f"{self.base}/claims/me",
            headers=self.auth,
            name=STAT_NAMES[KIND_ME],
            context=self._context(KIND_ME),
            catch_response=True,
        ) as response:
            if response.status_code != 200:
                mark(response, f"claims/me answered {response.status_code}")
                return None
            mark(response)
            claims = _body(response).get("claims")
        if not isinstance(claims, list):
            return None
        return [str(c.get("code")) for c in claims if isinstance(c, dict)]
