"""The local stack: the emulators, the Pub/Sub resources, every function of functions/main.py and
the watchers beside them, started in that order, supervised, and stopped in reverse."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from devkit.emulators import EmulatorStack
from devkit.emulators.processes import GroupProcess, ProcessFailed, port_taken
from devkit.standins.app_check import DevAppCheckKeys, DevAppCheckServer
from devkit.standins.push_auth import LOCAL_ACCOUNT, LOCAL_AUDIENCE, DevPushKeys, PushRelay
from devkit.standins.scheduler import SweepScheduler
from devkit.standins.storage_notifier import StorageNotifier, emulator_client
from scripts.localstack.config import (
    EMULATOR_PORTS,
    FILTER_SUBSCRIPTION,
    FUNCTIONS,
    HOST,
    PORTS,
    Config,
    Function,
    webhooks_topic,
)
from scripts.localstack.errors import StackError
from scripts.localstack.functions import (
    FunctionProcess,
    defined_functions,
    function_env,
    start_function,
)
from scripts.localstack.message_filter import MessageFilter
from scripts.localstack.output import say
from scripts.localstack.pages import ConsoleConfig, PageConfig, PageServer, PagesUnavailable
from scripts.localstack.resources import create_pubsub_resources, verify_bucket

log = logging.getLogger("local_stack")

FUNCTION_STOP_TIMEOUT = 10.0
SUPERVISE_INTERVAL = 0.5


# --- watchers: the hook for helpers that run beside the functions -----------------------------


@dataclass(frozen=True, slots=True)
class StackInfo:
    """What a watcher may need to know about the running stack."""

    project: str
    bucket: str
    topic: str
    env: Mapping[str, str]  # emulator hosts and the functions' settings
    function_urls: Mapping[str, str]  # by function name, only those running
    log_dir: Path


class Watcher(Protocol):
    """Something that runs beside the functions: started once they all answer, stopped first."""

    name: str

    def start(self) -> None: ...

    def failure(self) -> str | None:
        """Why it no longer works (the stack then stops), or None while it is healthy."""
        ...

    def stop(self) -> None: ...


def storage_notifier(info: StackInfo) -> Watcher | None:
    """The Storage emulator sends no object-finalized notifications: poll the imports bucket and
    deliver those CloudEvents to import_codes (None when import_codes is not running)."""
    url = info.function_urls.get("import_codes")
    if url is None:
        return None
    client = emulator_client(info.env["STORAGE_EMULATOR_HOST"], project=info.project)
    return StorageNotifier(client=client, bucket=info.bucket, target_url=f"{url}/")


def sweep_scheduler(info: StackInfo) -> Watcher | None:
    """Calls the sweep every minute, as the Cloud Scheduler job does in a project."""
    url = info.function_urls.get("sweep")
    return None if url is None else SweepScheduler(url=f"{url}/")


def message_filter(info: StackInfo) -> Watcher | None:
    """deliver_webhooks' subscription filter, which the Pub/Sub emulator ignores."""
    if "deliver_webhooks" not in info.function_urls:
        return None
    return MessageFilter(
        subscription=f"projects/{info.project}/subscriptions/{FILTER_SUBSCRIPTION}",
        topic=f"projects/{info.project}/topics/{webhooks_topic(info.topic)}",
    )


# Factories of the helpers that run beside the functions, in start order.
WATCHERS: list[Callable[[StackInfo], Watcher | None]] = [
    storage_notifier,
    sweep_scheduler,
    message_filter,
]


# --- the stack --------------------------------------------------------------------------------


def check_ports_free(config: Config, keys: Iterable[str]) -> None:
    """Fail before starting anything if a port we need is taken: whatever holds it would answer
    our readiness probes, and a half-started stack is slower to report than a clear message."""
    wanted = set(keys)
    busy = [
        f"{port.what} port {config.ports[port.key]} ({taken.strerror}; set {port.env})"
        for port in PORTS
        if port.key in wanted and (taken := port_taken(HOST, config.ports[port.key]))
    ]
    if busy:
        raise StackError("ports already in use, is another local stack running? " + "; ".join(busy))


class LocalStack:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.emulators = EmulatorStack(
            host=HOST,
            firestore_port=config.ports["firestore"],
            pubsub_port=config.ports["pubsub"],
            storage_port=config.ports["storage"],
            auth=True,
            auth_port=config.ports["auth"],
            project=config.project,
            bucket=config.bucket,
            log_dir=config.log_dir,
            timeout=config.timeout,
        )
        self.env: dict[str, str] = {}
        self.run_dir: Path | None = None  # the functions' runtime folders, removed at stop
        self.functions: list[FunctionProcess] = []
        self.watchers: list[Watcher] = []
        self.resources: list[str] = []
        self.pages: PageServer | None = None
        self.app_check: DevAppCheckServer | None = None
        self.push_relay: PushRelay | None = None
        self.timings: dict[str, float] = {}

    def start(self) -> None:
        config = self.config
        started = time.monotonic()
        functions = defined_functions()
        web = ["web"] if config.demo else []
        ports = [*EMULATOR_PORTS, "app-check", *(f.port_key for f in functions), *web]
        check_ports_free(config, ports)

        self.emulators.start()
        self.timings["emulators"] = time.monotonic() - started
        # Firebase has no App Check emulator: a fresh development key set signs the tokens the
        # page fetches, and the functions verify them against its JWKS (demo- projects only).
        self.app_check = DevAppCheckServer(
            DevAppCheckKeys(), project=config.project, port=config.ports["app-check"]
        ).start()
        # The Pub/Sub emulator signs no push: its subscriptions push through a relay that signs
        # as a real subscription does, and the functions check it (devkit/standins/push_auth.py).
        self.push_relay = PushRelay(
            DevPushKeys(), targets={f.name: f"{config.url(f.name)}/" for f in functions}
        ).start()
        # FIREBASE_AUTH_EMULATOR_HOST among them: firebase-admin accepts the Auth emulator's
        # unsigned ID tokens (shared/settings.py allows that for demo- projects only).
        self.env = {
            **self.emulators.env(),
            "GOOGLE_CLOUD_PROJECT": config.project,
            "CODEDROP_CORS_ORIGINS": config.cors_origins,
            "CODEDROP_IMPORTS_BUCKET": config.bucket,
            "CODEDROP_EVENTS_TOPIC": config.topic,
            "CODEDROP_APP_CHECK_JWKS_URL": self.app_check.jwks_url,
            "CODEDROP_PUSH_JWKS_URL": self.push_relay.jwks_url,
            "CODEDROP_PUSH_AUDIENCE": LOCAL_AUDIENCE,
            "CODEDROP_PUSH_SERVICE_ACCOUNT": LOCAL_ACCOUNT,
            # upload_codes and the load test sign as admins the Auth emulator does not hold
            # (emulator-format tokens): the revocation check, which reads the account, is off
            # here and runs in tests/emulator/test_revocation.py against the Auth emulator.
            "CODEDROP_CHECK_REVOKED": "false",
        }
        # The client libraries here (resources, --demo) read the same variables.
        os.environ.update(self.env)
        log.info("emulators ready", extra={"seconds": round(self.timings["emulators"], 2)})

        mark = time.monotonic()
        names = {f.name for f in functions}
        relay = self.push_relay
        count_usage_url = relay.push_endpoint("count_usage") if "count_usage" in names else None
        webhooks_url = (
            relay.push_endpoint("deliver_webhooks") if "deliver_webhooks" in names else None
        )
        self.resources = create_pubsub_resources(
            config, count_usage_url=count_usage_url, deliver_webhooks_url=webhooks_url
        )
        verify_bucket(config)
        self.timings["resources"] = time.monotonic() - mark

        mark = time.monotonic()
        self._start_functions([f.tuned() for f in functions])
        self.timings["functions"] = time.monotonic() - mark

        self._start_watchers()
        self.timings["total"] = time.monotonic() - started

    def _start_functions(self, functions: list[Function]) -> None:
        env = function_env(self.env)
        self.run_dir = Path(tempfile.mkdtemp(prefix="codedrop-run-"))
        for function in functions:
            self.functions.append(
                start_function(
                    function,
                    port=self.config.ports[function.port_key],
                    env=env,
                    log_dir=self.config.log_dir,
                    run_dir=self.run_dir,
                )
            )
        deadline = time.monotonic() + self.config.timeout
        for running in self.functions:
            running.wait_answering(max(deadline - time.monotonic(), 0.0))
            log.info("function ready", extra={"function": running.name, "url": running.url})

    def _start_watchers(self) -> None:
        info = StackInfo(
            project=self.config.project,
            bucket=self.config.bucket,
            topic=self.config.topic,
            env=dict(self.env),
            function_urls={r.name: r.url for r in self.functions},
            log_dir=self.config.log_dir,
        )
        for factory in WATCHERS:
            watcher = factory(info)
            if watcher is None:
                continue
            try:
                watcher.start()
            except Exception as exc:
                raise StackError(f"watcher {watcher.name} did not start: {exc}") from exc
            self.watchers.append(watcher)
            log.info("watcher started", extra={"watcher": watcher.name})

    def serve_pages(self, campaign_id: str) -> str:
        """Serve the example landing page (web/example) on the web port, its App Check tokens
        from the development key set, and the console (web/console) at /console/ on admin_api;
        the landing page's URL on the campaign."""
        config = self.config
        page_config = PageConfig(
            api_base=config.url("claim_api"),
            project=config.project,
            auth_emulator_url=f"http://{config.auth_host}",
            campaign_id=campaign_id,
            app_check_token_url=self.app_check_token_url,
        )
        console = ConsoleConfig(
            admin_api_base=config.url("admin_api"),
            project=config.project,
            auth_emulator_url=f"http://{config.auth_host}",
        )
        try:
            self.pages = PageServer(
                host=HOST, port=config.ports["web"], config=page_config, console=console
            )
        except (PagesUnavailable, OSError) as exc:
            raise StackError(f"cannot serve the landing page: {exc}") from exc
        self.pages.start()
        log.info("landing page served", extra={"url": self.pages.url})
        return f"{self.pages.url}/?campaign={campaign_id}"

    @property
    def app_check_token_url(self) -> str | None:
        """Where a local page gets App Check tokens (once started)."""
        return None if self.app_check is None else f"{self.app_check.url}/token"

    def _children(self) -> Iterator[GroupProcess]:
        yield from self.emulators.emulators()
        yield from self.functions

    def supervise(self) -> None:
        """Block until a child dies or a watcher fails (raises StackError); signals interrupt."""
        while True:
            for child in self._children():
                code = child.process.poll()
                if code is not None:
                    raise StackError(
                        f"{child.label} exited unexpectedly with code {code}; last lines of "
                        f"{child.log_path}:\n{child.tail()}"
                    )
            for watcher in self.watchers:
                reason = watcher.failure()
                if reason is not None:
                    raise StackError(f"watcher {watcher.name} failed: {reason}")
            time.sleep(SUPERVISE_INTERVAL)

    def stop(self) -> None:
        """The page, watchers, then functions (all signalled at once), then emulators; never
        raises."""
        if self.pages is not None:
            self.pages.stop()
        for watcher in reversed(self.watchers):
            try:
                watcher.stop()
            except Exception:
                log.exception("stopping a watcher failed", extra={"watcher": watcher.name})
        for running in self.functions:
            running.terminate()
        for running in self.functions:
            try:
                running.stop(FUNCTION_STOP_TIMEOUT)
            except ProcessFailed:
                log.exception("stopping a function failed", extra={"function": running.name})
            else:
                log.info(
                    "function stopped",
                    extra={"function": running.name, "exit_code": running.process.returncode},
                )
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        try:
            self.emulators.stop(keep_logs=True)
        except Exception:
            log.exception("stopping the emulators failed")
        if self.app_check is not None:
            self.app_check.stop()
        if self.push_relay is not None:
            self.push_relay.stop()

    def describe(self) -> None:
        config = self.config
        env = self.env
        say("codedrop local stack (project " + config.project + ")")
        say(f"  Firestore emulator  {env['FIRESTORE_EMULATOR_HOST']}")
        say(f"  Pub/Sub emulator    {env['PUBSUB_EMULATOR_HOST']}  ({', '.join(self.resources)})")
        say(f"  Storage emulator    {env['STORAGE_EMULATOR_HOST']}  (bucket {config.bucket})")
        say(f"  Auth emulator       {env['FIREBASE_AUTH_EMULATOR_HOST']}")
        if self.app_check is not None:
            say(f"  App Check (dev)     {self.app_check.url}  (tokens /token, keys /jwks.json)")
        for running in self.functions:
            say(f"  {running.name:<19} {running.url}")
        for watcher in self.watchers:
            say(f"  {watcher.name:<19} {watcher}")
        missing = [f.name for f in FUNCTIONS if f.name not in {r.name for r in self.functions}]
        if missing:
            say(f"  not in functions/main.py yet: {', '.join(missing)}")
        say(f"  logs                {config.log_dir}")
        say("environment for clients and tools in another shell:")
        for name, value in env.items():
            say(f"  export {name}={value}")
        t = self.timings
        auth = self.emulators.ready_seconds.get("auth", 0.0)
        say(
            f"started in {t['total']:.1f} s (emulators {t['emulators']:.1f} s, the Auth emulator "
            f"ready after {auth:.1f} s of them; topics {t['resources']:.1f} s, functions "
            f"{t['functions']:.1f} s)"
        )
