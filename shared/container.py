"""The service container: one per function instance, built from one Settings object.

Every service is built on first use (a count_usage instance never builds a claim engine) and
exactly once, under a lock: two claim engines in one instance would mean two candidate pools.
Handlers receive the container from the router; tests build their own from their settings. The
container only wires: what a service does lives in its package.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Generic, TypeVar, overload

from google.cloud import firestore

from shared.assignments.service import AssignmentService
from shared.claims.engine import ClaimEngine
from shared.claims.events import ClaimEvents
from shared.claims.holds import HoldReleaser
from shared.claims.redemption import RedemptionService
from shared.claims.reversal import ReversalService
from shared.claims.service import ClaimService
from shared.claims.typed_codes import TypedCodes
from shared.clock import utcnow
from shared.control.admins import AdminService
from shared.control.deletion import DeletionService
from shared.control.exports import ExportService
from shared.control.live import LiveService
from shared.events.bus import EventBus
from shared.fairness.service import FairnessService
from shared.gcp import firestore as gcp_firestore
from shared.gcp import pubsub as gcp_pubsub
from shared.gcp import storage as gcp_storage
from shared.gcp.app_check import AppCheckVerifier
from shared.gcp.firebase import Revocations
from shared.gcp.storage import StorageClient
from shared.intake.service import IntakeService
from shared.maintenance.sweep import Sweeper
from shared.ratelimit.service import GuessLimiter
from shared.settings import Settings, get_settings
from shared.usage.counters import ShardedCounters
from shared.usage.counting import UsageCounter
from shared.usage.reading import UsageReader
from shared.usage.verification import EventVerifier
from shared.waiting_room.service import WaitingRoomService
from shared.webhooks.routes import WebhookRoutes
from shared.webhooks.service import WebhookService

T = TypeVar("T")


class service(Generic[T]):  # noqa: N801  # a decorator, like property
    """A container's service, built by the method it decorates on first use and exactly once,
    under the container's lock; it keeps the method's name."""

    def __init__(self, build: Callable[[Services], T]) -> None:
        self._build = build
        self._name = build.__name__
        self.__doc__ = build.__doc__

    @overload
    def __get__(self, services: None, owner: type[Services]) -> service[T]: ...
    @overload
    def __get__(self, services: Services, owner: type[Services]) -> T: ...
    def __get__(self, services: Services | None, owner: type[Services]) -> service[T] | T:
        if services is None:
            return self
        return services._once(self._name, lambda: self._build(services))


class Services:
    def __init__(
        self,
        settings: Settings,
        *,
        db: firestore.Client | None = None,
        storage: StorageClient | None = None,
        publisher: Any | None = None,
    ) -> None:
        self.settings = settings
        self._built: dict[str, Any] = {}
        self._lock = threading.RLock()
        if db is not None:
            self._built["db"] = db
        if storage is not None:
            self._built["storage"] = storage
        if publisher is not None:
            self._built["publisher"] = publisher

    def _once(self, name: str, build: Callable[[], T]) -> T:
        built = self._built.get(name)
        if built is None:
            with self._lock:
                built = self._built.get(name)
                if built is None:
                    built = self._built[name] = build()
        result: T = built
        return result

    # --- Google Cloud clients -----------------------------------------------------------------
    @service
    def db(self) -> firestore.Client:
        return gcp_firestore.make_client(self.settings.project_id)

    @service
    def streams_db(self) -> firestore.Client:
        """For long streamed reads read by one thread (gcp_firestore.make_streaming_client)."""
        return gcp_firestore.make_streaming_client(self.settings.project_id)

    @service
    def storage(self) -> StorageClient:
        return gcp_storage.make_client(self.settings.project_id)

    @service
    def publisher(self) -> Any:
        return gcp_pubsub.make_publisher()

    # --- features -----------------------------------------------------------------------------
    @service
    def bus(self) -> EventBus:
        return EventBus(
            db=self.db,
            publisher=self.publisher,
            project_id=self.settings.project_id,
            topic=self.settings.events_topic,
            attributes=self.webhook_routes.attributes,
        )

    @service
    def webhook_routes(self) -> WebhookRoutes:
        return WebhookRoutes(db=self.db, max_age=self.settings.webhook_routes_seconds)

    @service
    def claim_events(self) -> ClaimEvents:
        return ClaimEvents(
            self.bus, window_seconds=self.settings.claim_event_window_seconds, clock=utcnow
        )

    @service
    def engine(self) -> ClaimEngine:
        return ClaimEngine(db=self.db, settings=self.settings, events=self.claim_events)

    @service
    def room(self) -> WaitingRoomService:
        return WaitingRoomService(db=self.db, settings=self.settings)

    @service
    def app_check(self) -> AppCheckVerifier:
        return AppCheckVerifier(self.settings)

    @service
    def claims(self) -> ClaimService:
        return ClaimService(
            db=self.db,
            engine=self.engine,
            events=self.claim_events,
            room=self.room,
            usage=self.usage,
            fairness=self.fairness,
            app_check=self.app_check,
            clock=utcnow,
            deadline_seconds=self.settings.claim_deadline_seconds,
        )

    @service
    def fairness(self) -> FairnessService:
        return FairnessService(
            db=self.db,
            usage=self.usage,
            tick_seconds=self.settings.waiting_room_tick_seconds,
        )

    @service
    def intake(self) -> IntakeService:
        return IntakeService(
            db=self.db,
            storage_client=self.storage,
            settings=self.settings,
            clock=utcnow,
            bus=self.bus,
        )

    @service
    def assignments(self) -> AssignmentService:
        return AssignmentService(
            db=self.db,
            streams=self.streams_db,
            storage_client=self.storage,
            settings=self.settings,
            events=self.bus,
            clock=utcnow,
        )

    @service
    def counters(self) -> ShardedCounters:
        return ShardedCounters(db=self.db, settings=self.settings, clock=utcnow)

    @service
    def verifier(self) -> EventVerifier:
        return EventVerifier(db=self.db)

    @service
    def usage_counter(self) -> UsageCounter:
        """count_usage's: counts verified events, announces stock."""
        return UsageCounter(
            db=self.db,
            counters=self.counters,
            verifier=self.verifier,
            bus=self.bus,
            clock=utcnow,
        )

    @service
    def usage(self) -> UsageReader:
        """Codes left, stats and reports, read back from the counters."""
        return UsageReader(
            counters=self.counters, stock_cache_seconds=self.settings.stock_cache_seconds
        )

    @service
    def admins(self) -> AdminService:
        return AdminService(db=self.db, project_id=self.settings.project_id)

    @service
    def exports(self) -> ExportService:
        return ExportService(
            db=self.db,
            streams=self.streams_db,
            storage_client=self.storage,
            settings=self.settings,
            clock=utcnow,
        )

    @service
    def deletions(self) -> DeletionService:
        return DeletionService(
            db=self.db, storage_client=self.storage, settings=self.settings, clock=utcnow
        )

    @service
    def live(self) -> LiveService:
        return LiveService(db=self.db, usage=self.usage, room=self.room, clock=utcnow)

    @service
    def holds(self) -> HoldReleaser:
        return HoldReleaser(db=self.db, bus=self.bus, clock=utcnow)

    @service
    def redemptions(self) -> RedemptionService:
        return RedemptionService(db=self.db, bus=self.bus, clock=utcnow)

    @service
    def reversals(self) -> ReversalService:
        return ReversalService(db=self.db, bus=self.bus, clock=utcnow, redemptions=self.redemptions)

    @service
    def typed_codes(self) -> TypedCodes:
        return TypedCodes(db=self.db, max_age=self.settings.campaign_cache_seconds)

    @service
    def guess_limiter(self) -> GuessLimiter:
        return GuessLimiter(db=self.db, settings=self.settings)

    @service
    def webhooks(self) -> WebhookService:
        return WebhookService(
            db=self.db,
            settings=self.settings,
            clock=utcnow,
            verify=self.verifier.verified,
            verify_claims=self.verifier.verified_claims,
        )

    @service
    def revocations(self) -> Revocations:
        settings = self.settings
        return Revocations(settings.project_id, max_age=settings.revocation_cache_seconds)

    @service
    def sweeper(self) -> Sweeper:
        return Sweeper(
            db=self.db,
            bus=self.bus,
            usage_counter=self.usage_counter,
            holds=self.holds,
            webhooks=self.webhooks,
            clock=utcnow,
        )

    def close(self) -> None:
        """Stop what runs in the background: the claim engine's campaign listeners (tests)."""
        engine: ClaimEngine | None = self._built.get("engine")
        if engine is not None:
            engine.close()


@lru_cache(maxsize=1)
def instance_services() -> Services:
    """This function instance's container, built from the environment on first use."""
    return Services(get_settings())
