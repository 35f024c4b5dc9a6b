"""Object-finalized CloudEvents for the Storage emulator, delivered to import_codes.

gcp-storage-emulator sends no notifications, so locally nothing would ever tell import_codes that
a file was dropped in the imports bucket. This watcher (started by the local stack when
functions/main.py defines import_codes) closes that gap, whatever client wrote the object
(gsutil-like tools, google-cloud-storage, curl to the emulator's JSON API):

- it lists the whole bucket every POLL_INTERVAL seconds (imports/ and the generate/ requests that
  admin_api writes both need their event), and every object generation it has not seen before
  is announced once, as Eventarc would: a CloudEvent in binary content mode (`ce-*` headers,
  `Content-Type: application/json`, the object resource as the body, made by the CloudEvents
  SDK) POSTed to import_codes;
- objects already in the bucket when it starts are taken as a snapshot and never announced: a
  restarted stack does not import old files again. Upload a file again (a new generation) to
  have it imported;
- memory of what was announced is kept in this process, keyed by (name, generation): a new
  upload under the same name is a new generation and a new event; metadata updates are not;
- a delivery that import_codes answers with a non-2xx status, or that cannot reach it, is retried
  with exponential backoff and the same event id (as Eventarc retries; google.api_core's retry
  loop runs the attempts), and given up after MAX_ATTEMPTS with a logged error. Deliveries run
  on a few threads so that one long import does not hold the others back. The poller never
  delivers an object twice (a retry of a failed attempt is the same delivery);
- stopping drops what is still queued or being retried, with a warning naming each object.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import requests
from cloudevents.conversion import to_binary
from cloudevents.http import CloudEvent
from google.api_core.exceptions import GoogleAPIError
from google.api_core.retry import retry_target
from google.auth.credentials import AnonymousCredentials
from google.cloud.storage import Client as StorageClient
from requests.structures import CaseInsensitiveDict

from devkit import http

log = logging.getLogger("storage_notifier")

EVENT_TYPE = "google.cloud.storage.object.v1.finalized"
POLL_INTERVAL = 0.5
WORKERS = 4
MAX_ATTEMPTS = 10
FIRST_BACKOFF = 0.5  # seconds before the 2nd attempt, doubled each time up to MAX_BACKOFF
MAX_BACKOFF = 10.0
# Cloud Functions gives an event function at most 540 s; a delivery waits as long.
REQUEST_TIMEOUT = 540.0
LIST_TIMEOUT = 10.0
# The stack stops (failure() answers) when the bucket cannot be listed for this long.
LIST_FAILURE_AFTER = 60.0
# Resource fields Cloud Storage leaves out of notification payloads.
_NOT_IN_EVENTS = ("acl", "owner")
# int64 fields the JSON API writes as strings.
_STRING_FIELDS = ("generation", "metageneration", "size")


class NotifierError(RuntimeError):
    """The notifier could not start (the bucket cannot be listed)."""


# --- the event --------------------------------------------------------------------------------


def object_resource(properties: Mapping[str, Any]) -> dict[str, Any]:
    """The object resource as the event's data: what the JSON API lists, without ACLs, unset
    fields left out and int64 fields as strings."""
    resource = {
        key: value
        for key, value in properties.items()
        if key not in _NOT_IN_EVENTS and value is not None
    }
    for key in _STRING_FIELDS:
        if key in resource:
            resource[key] = str(resource[key])
    resource.setdefault("kind", "storage#object")
    if "id" not in resource and "generation" in resource:
        resource["id"] = f"{resource['bucket']}/{resource['name']}/{resource['generation']}"
    return resource


@dataclass(frozen=True, slots=True)
class FinalizedEvent:
    """One object-finalized CloudEvent in binary content mode, ready to POST (and to re-POST:
    a retry carries the same id)."""

    bucket: str
    name: str
    generation: str
    headers: Mapping[str, str]
    body: bytes

    @property
    def event_id(self) -> str:
        return self.headers["ce-id"]

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.name}#{self.generation}"


def finalized_event(resource: Mapping[str, Any], *, event_id: str | None = None) -> FinalizedEvent:
    """The event Eventarc sends for `resource` (an object resource, see object_resource)."""
    bucket, name = str(resource["bucket"]), str(resource["name"])
    generation = str(resource["generation"])
    when = resource.get("updated") or resource.get("timeCreated")
    if not when:
        when = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    event = CloudEvent(
        {
            "id": event_id or str(uuid.uuid4().int >> 64),  # numeric, like Cloud Storage's
            "source": f"//storage.googleapis.com/projects/_/buckets/{bucket}",
            "type": EVENT_TYPE,
            "subject": f"objects/{name}",
            "time": str(when),
            "datacontenttype": "application/json",
            "bucket": bucket,  # Eventarc's extension attribute for storage events
        },
        dict(resource),
    )
    headers, body = to_binary(event)
    return FinalizedEvent(
        bucket=bucket,
        name=name,
        generation=generation,
        headers=CaseInsensitiveDict(headers),
        body=body,
    )


# --- delivery ---------------------------------------------------------------------------------


class _NotDelivered(Exception):
    """An attempt that import_codes answered with a non-2xx status, or that reached nobody."""


class _Stopped(Exception):
    """The notifier is stopping: no further attempt."""


@dataclass(frozen=True, slots=True)
class Retries:
    """How one event is delivered: at most `max_attempts` POSTs, each waiting `timeout` s for
    the answer, with exponential backoff between them."""

    max_attempts: int = MAX_ATTEMPTS
    first_backoff: float = FIRST_BACKOFF
    max_backoff: float = MAX_BACKOFF
    timeout: float = REQUEST_TIMEOUT

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be positive")

    def delays(self) -> Iterator[float]:
        """The waits between attempts: first, 2*first, 4*first, … at most max_backoff."""
        for attempt in range(self.max_attempts - 1):
            yield min(self.first_backoff * 2**attempt, self.max_backoff)


RETRIES = Retries()


def deliver(
    url: str,
    event: FinalizedEvent,
    *,
    retries: Retries = RETRIES,
    stop: threading.Event | None = None,
) -> bool:
    """Deliver the event until the target answers 2xx; False once it gave up (or was stopped).

    google.api_core's retry loop runs the attempts; the waits are retries.delays() (no jitter:
    one event goes to one function, there is no herd to spread) and a stop cuts them short."""
    stopping = stop or threading.Event()
    delays = list(retries.delays())
    fields = {"object": event.uri, "event_id": event.event_id, "url": url}
    attempts = 0

    def attempt() -> None:
        nonlocal attempts
        if stopping.is_set():
            raise _Stopped
        attempts += 1
        started = time.monotonic()
        try:
            response = http.request(
                "POST", url, data=event.body, headers=dict(event.headers), timeout=retries.timeout
            )
        except http.Unreachable as exc:  # refused, reset, timed out
            raise _NotDelivered(f"unreachable: {exc}") from exc
        if not 200 <= response.status_code < 300:
            raise _NotDelivered(f"answered {response.status_code}")
        log.info(
            "event delivered",
            extra={
                **fields,
                "status": response.status_code,
                "attempt": attempts,
                "seconds": round(time.monotonic() - started, 3),
            },
        )

    def retryable(exc: Exception) -> bool:
        return isinstance(exc, _NotDelivered) and attempts < retries.max_attempts

    def retrying(exc: Exception) -> None:
        delay = delays[attempts - 1]
        log.warning(
            "event delivery failed; retrying",
            extra={**fields, "attempt": attempts, "last": str(exc), "retry_in": delay},
        )

    def waits() -> Iterator[float]:
        for delay in delays:
            # The wait happens here, where a stop can end it; the retry loop then sleeps 0.
            stopping.wait(delay)
            yield 0.0

    try:
        retry_target(attempt, retryable, waits(), timeout=None, on_error=retrying)
    except _NotDelivered as exc:
        log.error(
            "event not delivered; giving up",
            extra={**fields, "attempts": attempts, "last": str(exc)},
        )
        return False
    except _Stopped:
        log.debug("stopping: event not delivered", extra=fields)
        return False
    return True


# --- the watcher ------------------------------------------------------------------------------


def emulator_client(storage_host: str, *, project: str) -> StorageClient:
    """A client for the Storage emulator at storage_host (`http://host:port`), anonymous."""
    return StorageClient(
        project=project,
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": storage_host},
    )


Key = tuple[str, str]  # (name, generation)


class StorageNotifier:
    """Polls a bucket and delivers an object-finalized event per new object generation.

    start() lists the bucket once (the snapshot of objects never announced) and raises
    NotifierError if it cannot; stop() is bounded by its timeout and never raises.
    """

    name = "storage-notifier"

    def __init__(
        self,
        *,
        client: StorageClient,
        bucket: str,
        target_url: str,
        poll_interval: float = POLL_INTERVAL,
        workers: int = WORKERS,
        retries: Retries = RETRIES,
        list_failure_after: float = LIST_FAILURE_AFTER,
    ) -> None:
        if workers < 1 or poll_interval <= 0:
            raise ValueError("workers and poll_interval must be positive")
        self._client = client
        self.bucket = bucket
        self.target_url = target_url
        self._poll_interval = poll_interval
        self._workers = workers
        self._retries = retries
        self._list_failure_after = list_failure_after

        self._stop = threading.Event()
        self._queue: queue.Queue[FinalizedEvent | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._seen: set[Key] = set()  # the snapshot and everything announced since
        self._in_flight: dict[Key, FinalizedEvent] = {}
        self._failure: str | None = None
        self._listing_failed_since: float | None = None
        self._last_list_warning = 0.0
        # What happened, for tests and diagnostics (keys in the order they happened).
        self.snapshot: frozenset[Key] = frozenset()
        self.announced: list[Key] = []
        self.delivered: list[Key] = []
        self.given_up: list[Key] = []

    def __str__(self) -> str:
        return (
            f"announces new objects of gs://{self.bucket} to {self.target_url} (polls every "
            f"{self._poll_interval:g} s; the {len(self.snapshot)} objects there at start are not "
            "announced)"
        )

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        if self._threads:
            raise RuntimeError("the notifier is already started")
        try:
            listing = self._list()
        except Exception as exc:
            raise NotifierError(f"cannot list gs://{self.bucket}: {exc}") from exc
        self.snapshot = frozenset(listing)
        self._seen.update(listing)
        poller = threading.Thread(target=self._poll_loop, name="storage-notifier", daemon=True)
        self._threads.append(poller)
        for number in range(self._workers):
            self._threads.append(
                threading.Thread(
                    target=self._deliver_loop, name=f"storage-notifier-{number}", daemon=True
                )
            )
        for thread in self._threads:
            thread.start()
        log.info(
            "storage notifier started",
            extra={
                "bucket": self.bucket,
                "target": self.target_url,
                "existing_objects": len(self.snapshot),
            },
        )

    def failure(self) -> str | None:
        with self._lock:
            failure = self._failure
            since = self._listing_failed_since
        if failure is not None:
            return failure
        if since is not None and time.monotonic() - since > self._list_failure_after:
            return f"gs://{self.bucket} could not be listed for {self._list_failure_after:g} s"
        return None

    def stop(self, timeout: float = 1.0) -> None:
        """Stop polling; deliveries still queued or being retried are dropped, with a warning.

        A delivery waiting on import_codes is abandoned after `timeout` (its thread is a
        daemon and ends when the stack stops import_codes)."""
        if not self._threads or self._stop.is_set():
            return
        self._stop.set()
        for _ in range(self._workers):
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            dropped = list(self._in_flight.values())
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                dropped.append(item)
        for event in dropped:
            log.warning(
                "stopping with this object's event queued or still in delivery; if its job "
                "did not finish, upload the file again once the stack runs",
                extra={"object": event.uri, "event_id": event.event_id},
            )
        log.info(
            "storage notifier stopped",
            extra={"delivered": len(self.delivered), "dropped": len(dropped)},
        )

    # --- polling ------------------------------------------------------------------------------
    def _list(self) -> dict[Key, dict[str, Any]]:
        objects: dict[Key, dict[str, Any]] = {}
        for blob in self._client.list_blobs(self.bucket, timeout=LIST_TIMEOUT):
            # The listing's resource exactly as the server sent it (the public properties of
            # Blob would lose fields and formats); only read, never changed.
            properties: dict[str, Any] = dict(blob._properties)
            if blob.generation is None:
                continue
            objects[(str(blob.name), str(blob.generation))] = properties
        return objects

    def poll_once(self) -> list[Key]:
        """List the bucket and queue an event for each new object generation (those it
        returns). The poller thread calls it; tests may too."""
        listing = self._list()
        new: list[Key] = []
        for key, properties in listing.items():
            if key in self._seen:
                continue
            self._seen.add(key)
            event = finalized_event(object_resource(properties))
            new.append(key)
            self.announced.append(key)
            log.info("new object; announcing it", extra={"object": event.uri})
            self._queue.put(event)
        return new

    def _poll_loop(self) -> None:
        try:
            while not self._stop.wait(self._poll_interval):
                try:
                    self.poll_once()
                except (GoogleAPIError, requests.RequestException) as exc:  # an error, or nobody
                    self._listing_failed(exc)
                else:
                    with self._lock:
                        self._listing_failed_since = None
        except BaseException as exc:  # a bug: the stack must hear of it
            log.exception("storage notifier poller crashed")
            with self._lock:
                self._failure = f"the poller crashed: {exc!r}"

    def _listing_failed(self, exc: Exception) -> None:
        now = time.monotonic()
        with self._lock:
            if self._listing_failed_since is None:
                self._listing_failed_since = now
        if now - self._last_list_warning > 10.0:
            self._last_list_warning = now
            log.warning(
                "cannot list the bucket; retrying", extra={"bucket": self.bucket, "error": exc}
            )

    # --- delivering ---------------------------------------------------------------------------
    def _deliver_loop(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            if self._stop.is_set():
                self._queue.put(event)  # stop() reports it
                return
            key = (event.name, event.generation)
            with self._lock:
                self._in_flight[key] = event
            ok = False
            try:
                ok = deliver(self.target_url, event, retries=self._retries, stop=self._stop)
            except Exception:
                log.exception("delivering an event failed", extra={"object": event.uri})
            finally:
                if ok or not self._stop.is_set():
                    with self._lock:
                        self._in_flight.pop(key, None)
                        (self.delivered if ok else self.given_up).append(key)


@contextlib.contextmanager
def running(notifier: StorageNotifier) -> Iterator[StorageNotifier]:
    """Start the notifier for the length of a `with` block."""
    notifier.start()
    try:
        yield notifier
    finally:
        notifier.stop()
