"""Code look-ups and redemptions limited per caller (token uid) and per client address, over
all instances, with no Firestore write on a request's path.

Each instance keeps token buckets holding its share of each limit (buckets.py), the limit
divided by the instances serving look-ups. The instances count themselves from heartbeat
documents: every HEARTBEAT_SECONDS one request of each instance writes its own and reads
everyone's, the others decide from memory, so the writes do not grow with the traffic.

The bound (docs/codes.md): with n instances known to all, a caller gets at most
max(burst, n) + per_minute * T / 60 through in any T seconds, however their requests are
spread. Until the others count a newcomer (its first heartbeats come quickly), a caller may get
up to its share more; an instance that stops is counted for LIVE_SECONDS more, which only makes
the limit stricter.
"""

from __future__ import annotations

import ipaddress
import logging
import time
import uuid
from collections.abc import Callable

from google.api_core.exceptions import GoogleAPIError
from google.cloud import firestore

from shared.cache import WhenDue
from shared.errors import RateLimited
from shared.gcp.firestore import limiter_instances_collection
from shared.ratelimit.buckets import Limit, TokenBuckets, try_acquire_all
from shared.settings import Settings

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 5.0
# A new instance looks again sooner at first: instances starting together (a scale-out) learn
# of each other within a second, and their buckets shrink to their share at once.
FIRST_HEARTBEATS_SECONDS = (0.1, 0.2, 0.4, 0.8, 1.6)
LIVE_SECONDS = 3 * HEARTBEAT_SECONDS
# Heartbeats of instances gone this long are deleted by whichever instance reads them.
FORGET_SECONDS = 600.0
# A burst is this share of the per-minute limit: over a minute a caller gets at most 10% more.
BURST_SHARE = 0.1
# Buckets per limit and instance: bounds the memory a flood of distinct callers can take.
MAX_KEYS = 50_000


def address_key(address: str) -> str:
    """An IPv6 client counts as its /64 (one subscriber's prefix: its addresses cost it
    nothing), an IPv4 client as its address."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class GuessLimiter:
    def __init__(
        self,
        *,
        db: firestore.Client,
        settings: Settings,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._clock = clock
        self._monotonic = monotonic
        self._callers = TokenBuckets(_limit(settings.code_lookups_per_minute), max_keys=MAX_KEYS)
        self._addresses = TokenBuckets(
            _limit(settings.code_lookups_per_minute_per_address), max_keys=MAX_KEYS
        )
        self.instance_id = uuid.uuid4().hex[:12]
        self._instances = 1
        self._heartbeats = 0
        self._heartbeat = WhenDue()

    def check(self, *, caller: str, address: str) -> None:
        """Let one look-up or redemption of `caller` from `address` through, or raise
        RateLimited (429) with the seconds to wait."""
        instances = self.instances()
        wait = try_acquire_all(
            [(self._callers, caller), (self._addresses, address_key(address))],
            instances=instances,
            now=self._monotonic(),
        )
        if wait is not None:
            # Info, not a warning: a guesser's every refusal would flood the warnings.
            log.info(
                "code look-ups limited",
                extra={"caller": caller[:128], "instances": instances, "retry_after": wait},
            )
            raise RateLimited(retry_after=wait)

    def instances(self) -> int:
        """Instances serving look-ups (this one included), from their heartbeats. Only the first
        request waits for an exchange; later ones go on with what the instance knows while one
        of them exchanges."""
        self._heartbeat.run(self._clock(), self._exchange)
        return self._instances

    def _exchange(self, now: float) -> None:
        try:
            self._count_instances(now)
        except GoogleAPIError as exc:
            # The last count stands (or one instance): the limit goes on, looser at worst by
            # the instances this one has not heard of.
            log.warning("limiter heartbeat failed", extra={"error": repr(exc)})
            self._heartbeat.due_at = now + HEARTBEAT_SECONDS

    def _count_instances(self, now: float) -> None:
        beats = limiter_instances_collection(self._db)
        beats.document(self.instance_id).set({"seen_at": now})
        live = {self.instance_id}
        for snapshot in beats.stream():
            seen_at = float((snapshot.to_dict() or {}).get("seen_at", 0))
            if now - seen_at < LIVE_SECONDS:
                live.add(snapshot.id)
            elif now - seen_at > FORGET_SECONDS:
                snapshot.reference.delete()
        self._instances = len(live)
        done = self._heartbeats
        self._heartbeats += 1
        self._heartbeat.due_at = now + (
            FIRST_HEARTBEATS_SECONDS[done]
            if done < len(FIRST_HEARTBEATS_SECONDS)
            else HEARTBEAT_SECONDS
        )


def _limit(per_minute: int) -> Limit:
    return Limit.per_minute(per_minute, burst=max(1.0, per_minute * BURST_SHARE))
