"""One validated settings object, read from the environment once; bad values fail at start-up."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

log = logging.getLogger(__name__)

# An origin as browsers send it: scheme, host and optional port; no path, never "null".
_ORIGIN = re.compile(r"^https?://[a-z0-9.-]+(:[0-9]{1,5})?$")


class Settings(BaseSettings):
    # hide_input_in_errors: a refused start-up must not print the environment it was given (a
    # model check's error would quote every input, secrets included).
    model_config = SettingsConfigDict(
        env_prefix="",
        extra="ignore",
        frozen=True,
        populate_by_name=True,
        hide_input_in_errors=True,
    )

    # Required: a function deployed without it must not start against some default project.
    project_id: str = Field(
        validation_alias="GOOGLE_CLOUD_PROJECT",
        pattern=r"^[a-z][a-z0-9-]{3,61}[a-z0-9]$",
    )
    firestore_emulator_host: str | None = Field(
        default=None, validation_alias="FIRESTORE_EMULATOR_HOST"
    )
    auth_emulator_host: str | None = Field(
        default=None, validation_alias="FIREBASE_AUTH_EMULATOR_HOST"
    )

    # A development App Check key set (an http(s) JWKS URL, e.g. the local stack's): accepted
    # only in demo- projects, as the Auth emulator's unsigned tokens are (see _production_safety).
    app_check_jwks_url: str | None = Field(
        default=None, validation_alias="CODEDROP_APP_CHECK_JWKS_URL", pattern=r"^https?://"
    )
    # Replay protection: every App Check token is consumed when verified (one call to the App
    # Check service per claim; pages must send limited-use tokens). See docs/architecture.md,
    # "Protecting a sale from bots".
    app_check_consume_tokens: bool = Field(
        default=False, validation_alias="CODEDROP_APP_CHECK_CONSUME_TOKENS"
    )

    # Pub/Sub pushes (count_usage, deliver_webhooks) carry an OIDC token: checked against this
    # audience and service account (shared/gcp/push_auth.py); both are required outside demo-
    # projects for the pushed functions to start. The JWKS URL is a development key set the local
    # stack signs its pushes with (demo- projects only, like the App Check one).
    push_audience: str | None = Field(
        default=None, validation_alias="CODEDROP_PUSH_AUDIENCE", min_length=1, max_length=500
    )
    push_service_account: str | None = Field(
        default=None,
        validation_alias="CODEDROP_PUSH_SERVICE_ACCOUNT",
        pattern=r"^[a-z0-9-]+@[a-z0-9.-]+$",
    )
    push_jwks_url: str | None = Field(
        default=None, validation_alias="CODEDROP_PUSH_JWKS_URL", pattern=r"^https?://"
    )

    # Admin and redeemer routes refuse tokens of disabled, deleted or signed-out accounts
    # (shared/gcp/firebase.Revocations): a revoked token acts for at most twice this long. Off
    # only in demo- projects (tests whose tokens name no account).
    check_revoked: bool = Field(default=True, validation_alias="CODEDROP_CHECK_REVOKED")
    revocation_cache_seconds: float = Field(
        default=15.0, ge=0, le=300, validation_alias="CODEDROP_REVOCATION_CACHE_SECONDS"
    )

    cors_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), validation_alias="CODEDROP_CORS_ORIGINS"
    )
    imports_bucket: str = Field(
        default="codedrop-imports", validation_alias="CODEDROP_IMPORTS_BUCKET"
    )
    events_topic: str = Field(default="coupon-events", validation_alias="CODEDROP_EVENTS_TOPIC")

    # Claim engine tuning (docs/architecture.md, "The claim engine").
    pool_refill_size: int = Field(
        default=500, ge=1, le=1000, validation_alias="CODEDROP_POOL_REFILL_SIZE"
    )
    claim_attempts: int = Field(
        default=24, ge=1, le=200, validation_alias="CODEDROP_CLAIM_ATTEMPTS"
    )
    claim_deadline_seconds: float = Field(
        default=8.0, gt=0, le=60, validation_alias="CODEDROP_CLAIM_DEADLINE_SECONDS"
    )
    # How long an instance's first claim of a campaign waits for others to share its event's
    # message (shared/events/batch.py).
    claim_event_window_seconds: float = Field(
        default=0.005, ge=0, le=0.1, validation_alias="CODEDROP_CLAIM_EVENT_WINDOW_SECONDS"
    )
    campaign_cache_seconds: float = Field(
        default=0.5, ge=0, le=30, validation_alias="CODEDROP_CAMPAIGN_CACHE_SECONDS"
    )
    # How long a campaign listener's silence is trusted before a read checks it (0: no listener;
    # see shared/campaigns/live.py).
    campaign_listen_seconds: float = Field(
        default=5.0, ge=0, le=300, validation_alias="CODEDROP_CAMPAIGN_LISTEN_SECONDS"
    )
    # The codes left (from the counters) a waiting room and the public status work from.
    stock_cache_seconds: float = Field(
        default=1.0, ge=0, le=30, validation_alias="CODEDROP_STOCK_CACHE_SECONDS"
    )
    contended_retry_after_seconds: int = Field(
        default=1, ge=1, le=60, validation_alias="CODEDROP_CONTENDED_RETRY_AFTER"
    )

    # Code intake: atomic batches of up to 500 writes (codes + the campaign's counters).
    import_batch_size: int = Field(
        default=450, ge=1, le=498, validation_alias="CODEDROP_IMPORT_BATCH_SIZE"
    )
    import_parallel_commits: int = Field(
        default=4, ge=1, le=32, validation_alias="CODEDROP_IMPORT_PARALLEL_COMMITS"
    )
    # Production Firestore wants new write traffic ramped up (500/50/5: start at 500 writes/s,
    # +50% every 5 minutes). The emulator has no such need; unset means "on unless emulated".
    import_ramp: bool | None = Field(default=None, validation_alias="CODEDROP_IMPORT_RAMP")

    # Bulk assignment (shared/assignments): recipients per atomic batch (two writes each, plus
    # the batch's event in the outbox: at most 500 writes), batches in flight, and the most
    # unassigned candidates one query may return (it is read as batches need codes).
    assignment_batch_size: int = Field(
        default=249, ge=1, le=249, validation_alias="CODEDROP_ASSIGNMENT_BATCH_SIZE"
    )
    # 8: a batch also waits for its candidates and its event's publication, which more batches in
    # flight hide (100k on the emulator: 3,388/s with 4, 4,442/s with 8; plain batches of the
    # same writes ran 5,067/s and 5,108/s, the database already busy with 4).
    assignment_parallel_commits: int = Field(
        default=8, ge=1, le=32, validation_alias="CODEDROP_ASSIGNMENT_PARALLEL_COMMITS"
    )
    assignment_query_limit: int = Field(
        default=1_000_000, ge=1, le=10_000_000, validation_alias="CODEDROP_ASSIGNMENT_QUERY_LIMIT"
    )

    # Usage counters (shared/usage).
    counter_initial_shards: int = Field(
        default=1, ge=1, le=1000, validation_alias="CODEDROP_COUNTER_INITIAL_SHARDS"
    )
    counter_max_shards: int = Field(
        default=64, ge=1, le=1000, validation_alias="CODEDROP_COUNTER_MAX_SHARDS"
    )
    counter_max_attempts: int = Field(
        default=8, ge=1, le=50, validation_alias="CODEDROP_COUNTER_MAX_ATTEMPTS"
    )
    # A commit slower than this counts as contention even when it succeeds.
    counter_contention_seconds: float = Field(
        default=1.0, gt=0, le=60, validation_alias="CODEDROP_COUNTER_CONTENTION_SECONDS"
    )

    # Waiting room (shared/waiting_room). The secret signs tickets: required outside demo-
    # projects, so production never runs on a default anyone could read here.
    ticket_secret: SecretStr | None = Field(default=None, validation_alias="CODEDROP_TICKET_SECRET")
    # A ticket's signature lives this long; every poll re-signs it (sliding), so a shopper who
    # keeps polling keeps their place for up to ticket_max_wait_seconds after their first try.
    ticket_max_age_seconds: int = Field(
        default=3600, ge=60, le=86_400, validation_alias="CODEDROP_TICKET_MAX_AGE_SECONDS"
    )
    ticket_max_wait_seconds: int = Field(
        default=86_400, ge=60, le=7 * 86_400, validation_alias="CODEDROP_TICKET_MAX_WAIT_SECONDS"
    )
    waiting_room_tick_seconds: float = Field(
        default=1.0, gt=0, le=30, validation_alias="CODEDROP_WAITING_ROOM_TICK_SECONDS"
    )
    # Arrivals in a sale's first seconds are ordered at random, not by who polled first
    # (shared/waiting_room/admission.start_place); 0 switches it off.
    waiting_room_start_window_seconds: float = Field(
        default=2.0, ge=0, le=25, validation_alias="CODEDROP_WAITING_ROOM_START_WINDOW_SECONDS"
    )
    waiting_room_kp: float = Field(
        default=0.5, ge=0, le=5, validation_alias="CODEDROP_WAITING_ROOM_KP"
    )

    # Holds (campaigns with hold_seconds): expired holds are found by a coarse bucket of their
    # expiry time, so the sweep's query never indexes an increasing timestamp (see
    # shared/coupons/store.py). A hold is released at most a bucket plus a sweep period late.
    hold_bucket_seconds: int = Field(
        default=60, ge=1, le=3600, validation_alias="CODEDROP_HOLD_BUCKET_SECONDS"
    )

    # Guessing (shared/ratelimit): code look-ups and redemptions a caller (token uid) and a
    # client address may make a minute, over all instances together.
    code_lookups_per_minute: int = Field(
        default=60, ge=1, le=1_000_000, validation_alias="CODEDROP_CODE_LOOKUPS_PER_MINUTE"
    )
    code_lookups_per_minute_per_address: int = Field(
        default=600,
        ge=1,
        le=1_000_000,
        validation_alias="CODEDROP_CODE_LOOKUPS_PER_MINUTE_PER_ADDRESS",
    )

    # Shopify's orders/create webhook is signed with the app's secret (base64 HMAC-SHA256 of the
    # raw body). Outside demo- projects the route refuses every delivery until it is set.
    shopify_webhook_secret: SecretStr | None = Field(
        default=None, validation_alias="CODEDROP_SHOPIFY_WEBHOOK_SECRET"
    )
    # Or a file holding it: the deploy mounts the secret's latest version there, and it is read
    # on use (see SecretFiles), so a secret added or rotated after the deploy reaches warm
    # instances without a restart.
    shopify_webhook_secret_file: Path | None = Field(
        default=None, validation_alias="CODEDROP_SHOPIFY_WEBHOOK_SECRET_FILE"
    )

    # The shop whose orders may redeem codes: one app's secret signs the webhooks of every shop
    # that installed it, so the route also checks X-Shopify-Shop-Domain. Outside demo- projects
    # the route refuses every delivery until it is set.
    shopify_shop_domain: str | None = Field(
        default=None,
        validation_alias="CODEDROP_SHOPIFY_SHOP_DOMAIN",
        pattern=r"^[a-z0-9][a-z0-9-]{0,99}\.myshopify\.com$",
    )

    @property
    def shopify_webhook_key(self) -> bytes | None:
        if self.shopify_webhook_secret_file is not None:
            return SECRET_FILES.read(self.shopify_webhook_secret_file, min_length=16)
        if self.shopify_webhook_secret is not None:
            return self.shopify_webhook_secret.get_secret_value().encode()
        if self.is_local:
            return f"demo-only-shopify-secret-{self.project_id}".encode()
        return None

    # Webhooks (shared/webhooks). The key seals each webhook's signing secret in Firestore; it is
    # needed only once a webhook exists, so functions that never touch webhooks start without it.
    webhook_key: SecretStr | None = Field(default=None, validation_alias="CODEDROP_WEBHOOK_KEY")
    webhook_timeout_seconds: float = Field(
        default=5.0, gt=0, le=30, validation_alias="CODEDROP_WEBHOOK_TIMEOUT_SECONDS"
    )
    webhook_retry_base_seconds: float = Field(
        default=10.0, gt=0, le=3600, validation_alias="CODEDROP_WEBHOOK_RETRY_BASE_SECONDS"
    )
    webhook_drain_seconds: float = Field(
        default=20.0, gt=0, le=300, validation_alias="CODEDROP_WEBHOOK_DRAIN_SECONDS"
    )
    webhook_linger_seconds: float = Field(
        default=1.0, ge=0, le=30, validation_alias="CODEDROP_WEBHOOK_LINGER_SECONDS"
    )
    # How long a publisher trusts its read of a campaign's webhooks (shared/webhooks/routes.py);
    # a new webhook's 201 waits twice this.
    webhook_routes_seconds: float = Field(
        default=1.0, ge=0, le=10, validation_alias="CODEDROP_WEBHOOK_ROUTES_SECONDS"
    )

    @property
    def ticket_signing_key(self) -> str:
        if self.ticket_secret is not None:
            return self.ticket_secret.get_secret_value()
        return f"demo-only-ticket-key-{self.project_id}"  # demo- projects only (validated)

    @property
    def webhook_sealing_key(self) -> str:
        if self.webhook_key is not None:
            return self.webhook_key.get_secret_value()
        if not self.is_local:
            raise ValueError("CODEDROP_WEBHOOK_KEY is required outside demo- projects")
        return f"demo-only-webhook-key-{self.project_id}"

    @property
    def import_ramp_enabled(self) -> bool:
        if self.import_ramp is not None:
            return self.import_ramp
        return self.firestore_emulator_host is None

    @model_validator(mode="before")
    @classmethod
    def _split_origins(cls, data: object) -> object:
        if isinstance(data, dict):
            for key in ("CODEDROP_CORS_ORIGINS", "cors_origins"):
                raw = data.get(key)
                if isinstance(raw, str):
                    data[key] = tuple(o.strip() for o in raw.split(",") if o.strip())
        return data

    @model_validator(mode="after")
    def _valid_origins(self) -> Settings:
        # "*" means any origin, answered with "*" and without credentials (never echoed).
        for origin in self.cors_origins:
            if origin != "*" and not _ORIGIN.match(origin):
                raise ValueError(
                    f"CODEDROP_CORS_ORIGINS: {origin[:80]!r} is not an origin like "
                    "https://shop.example (lowercase, no path; 'null' is never allowed), nor '*'"
                )
        return self

    @model_validator(mode="after")
    def _production_safety(self) -> Settings:
        # Emulator-format ID tokens are unsigned: accepting them in a real project would let
        # anyone claim as anyone. The demo- prefix guarantees no real resource exists.
        if self.auth_emulator_host and not self.project_id.startswith("demo-"):
            raise ValueError(
                "FIREBASE_AUTH_EMULATOR_HOST is set but GOOGLE_CLOUD_PROJECT "
                f"{self.project_id!r} does not start with 'demo-': refusing to accept "
                "unsigned emulator tokens outside a demo project"
            )
        # Tokens signed by a development key set prove nothing about the app that sent them.
        if self.app_check_jwks_url and not self.project_id.startswith("demo-"):
            raise ValueError(
                "CODEDROP_APP_CHECK_JWKS_URL is set but GOOGLE_CLOUD_PROJECT "
                f"{self.project_id!r} does not start with 'demo-': refusing development App "
                "Check keys outside a demo project"
            )
        if not self.check_revoked and not self.project_id.startswith("demo-"):
            raise ValueError("CODEDROP_CHECK_REVOKED may be off only in demo- projects")
        if self.push_jwks_url and not self.project_id.startswith("demo-"):
            raise ValueError(
                "CODEDROP_PUSH_JWKS_URL is set but GOOGLE_CLOUD_PROJECT "
                f"{self.project_id!r} does not start with 'demo-': refusing development push "
                "keys outside a demo project"
            )
        if (self.push_audience is None) != (self.push_service_account is None):
            raise ValueError(
                "CODEDROP_PUSH_AUDIENCE and CODEDROP_PUSH_SERVICE_ACCOUNT go together: a push is "
                "checked against both"
            )
        if self.app_check_jwks_url and self.app_check_consume_tokens:
            raise ValueError(
                "CODEDROP_APP_CHECK_CONSUME_TOKENS needs the App Check service, which cannot "
                "consume tokens signed by a development key set (CODEDROP_APP_CHECK_JWKS_URL)"
            )
        if self.ticket_secret is None and not self.project_id.startswith("demo-"):
            raise ValueError("CODEDROP_TICKET_SECRET is required outside demo- projects")
        if self.ticket_secret is not None and len(self.ticket_secret.get_secret_value()) < 32:
            raise ValueError("CODEDROP_TICKET_SECRET must be at least 32 characters")
        shopify = self.shopify_webhook_secret
        if shopify is not None and len(shopify.get_secret_value()) < 16:
            raise ValueError("CODEDROP_SHOPIFY_WEBHOOK_SECRET must be at least 16 characters")
        if self.webhook_key is not None and len(self.webhook_key.get_secret_value()) < 32:
            raise ValueError("CODEDROP_WEBHOOK_KEY must be at least 32 characters")
        return self

    @property
    def is_local(self) -> bool:
        return self.project_id.startswith("demo-")


class SecretFiles:
    """Secrets mounted as files, read on use and kept `max_age` seconds: a new version is seen
    that long after it is added, and a busy instance reads the file once per `max_age` (two
    threads may both read it at the turn: harmless)."""

    def __init__(self, max_age: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._max_age = max_age
        self._clock = clock
        self._read: dict[Path, tuple[float, bytes | None]] = {}

    def read(self, path: Path, *, min_length: int) -> bytes | None:
        """The file's value, or None (refuse what it would verify) when it is missing, empty
        or shorter than `min_length`."""
        now = self._clock()
        cached = self._read.get(path)
        if cached is not None and now - cached[0] < self._max_age:
            return cached[1]
        try:
            value: bytes | None = path.read_bytes().strip()
        except OSError as exc:
            log.error("secret file unreadable", extra={"path": str(path), "error": repr(exc)})
            value = None
        if value is not None and len(value) < min_length:
            log.error("secret file too short", extra={"path": str(path), "min": min_length})
            value = None
        self._read[path] = (now, value)
        return value


SECRET_FILES = SecretFiles()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
