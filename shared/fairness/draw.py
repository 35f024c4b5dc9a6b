"""The draw of a fair drop, as pure functions: entry ids, the entry list's digest, the places,
and the drawn entries as the waiting room counts them. docs/fair-drops.md states the same rule
for shoppers; scripts/tools/verify_drop.py recomputes it without this module.

- An entry id is the first 32 hex digits of HMAC-SHA256(entry key, identity): one per identity,
  unlinkable to it without the drop's secret, and spread evenly over the id space (so entry
  writes have no hot spot, and the draw can split the list into ranges of ids).
- The digest is the hex SHA-256 of the frozen entry ids in ascending order, each followed by a
  line feed.
- Places: the entries sorted by HMAC-SHA256(key = seed, message = digest's 32 bytes followed by
  the entry id's 32 ASCII characters), ascending (then by entry id); place 1 comes first.
"""

from __future__ import annotations

import bisect
import hashlib
import hmac
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shared.waiting_room.admission import SLOT_SECONDS, RoomShare

ALGORITHM = (
    "codedrop-draw-v1: digest = SHA-256 of the ascending entry ids, each followed by a line "
    "feed; place = 1 + rank of HMAC-SHA256(key=seed, msg=digest bytes || entry id ASCII), "
    "ascending, ties by entry id"
)
ENTRY_ID_HEX = 32
# The draw splits the entry list into this many ranges of ids (their first two hex digits).
SHARDS = 64
_PREFIXES_PER_SHARD = 256 // SHARDS
# Drawn entries are spread over the room's slots this many to a slot, evenly inside each, so
# that the room's threshold (which takes a slot's tickets as spread evenly over it) reaches them
# one by one in place order.
ENTRIES_PER_SLOT = 50


def entry_id_for(entry_key: bytes, identity: str) -> str:
    return hmac.new(entry_key, identity.encode(), hashlib.sha256).hexdigest()[:ENTRY_ID_HEX]


def shard_of(entry_id: str) -> int:
    """The range of ids an entry belongs to: its first two hex digits, SHARDS ranges in order."""
    return int(entry_id[:2], 16) // _PREFIXES_PER_SHARD


def pack(entry_ids: Sequence[str]) -> bytes:
    """Sorted entry ids as 16 bytes each (a shard's document stays far below Firestore's 1 MiB
    up to about 60,000 entries a shard, 3.8 million in all)."""
    return b"".join(bytes.fromhex(entry_id) for entry_id in entry_ids)


def unpack(packed: bytes) -> list[str]:
    return [packed[i : i + 16].hex() for i in range(0, len(packed), 16)]


def entries_digest(sorted_ids: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for entry_id in sorted_ids:
        digest.update(entry_id.encode("ascii") + b"\n")
    return digest.hexdigest()


def place_key(seed: bytes, digest: str, entry_id: str) -> bytes:
    return hmac.new(seed, bytes.fromhex(digest) + entry_id.encode("ascii"), hashlib.sha256).digest()


def order(seed: bytes, digest: str, entry_ids: Iterable[str]) -> list[str]:
    """The entry ids in place order."""
    return sorted(entry_ids, key=lambda entry_id: (place_key(seed, digest, entry_id), entry_id))


@dataclass(frozen=True)
class Draw:
    """A drop's drawn entries, as every instance recomputes them from the stored draw."""

    starts_at: float  # epoch seconds
    drawn_at: float  # when the draw was stored: the room starts passing entries from here
    digest: str
    seed: str  # hex, revealed
    by_place: list[str]  # entry ids, place 1 first
    _places: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._places.update((entry_id, i + 1) for i, entry_id in enumerate(self.by_place))

    @property
    def count(self) -> int:
        return len(self.by_place)

    def place_of(self, entry_id: str) -> int | None:
        return self._places.get(entry_id)

    # --- the drawn entries in the waiting room ------------------------------------------------
    @property
    def _slots(self) -> int:
        return math.ceil(self.count / ENTRIES_PER_SLOT)

    @property
    def _first_slot(self) -> int:
        # The slots just before the start: every drawn entry queues before every later arrival.
        return math.floor(self.starts_at / SLOT_SECONDS) - self._slots - 1

    def first_attempt(self, place: int) -> float:
        """The first attempt the room gives the entry at `place` (1-based)."""
        index, within = divmod(place - 1, ENTRIES_PER_SLOT)
        in_slot = min(ENTRIES_PER_SLOT, self.count - index * ENTRIES_PER_SLOT)
        return (self._first_slot + index + (within + 0.5) / in_slot) * SLOT_SECONDS

    def released(self, threshold: float) -> int:
        """How many places the room's threshold has reached (their first attempt at or before
        it)."""
        return bisect.bisect_right(range(1, self.count + 1), threshold, key=self.first_attempt)

    def share(self, threshold: float, *, tick_seconds: float) -> RoomShare:
        """The drawn entries as one more instance's tickets, the same at every instance; it
        starts the room at the draw, with nothing passed. Once the threshold has passed them all
        they are only a total, so the room's history can be folded behind them."""
        base_tick = math.floor(self.drawn_at / tick_seconds)
        end = self._first_slot + self._slots
        tickets: tuple[int, ...]
        if self.released(threshold) == self.count:
            first_slot, before, tickets = end, self.count, ()
        else:
            full, rest = divmod(self.count, ENTRIES_PER_SLOT)
            first_slot, before = self._first_slot, 0
            tickets = (ENTRIES_PER_SLOT,) * full + ((rest,) if rest else ())
        return RoomShare(
            published_at=self.starts_at,
            first_slot=first_slot,
            before=before,
            tickets=tickets,
            first_tick=base_tick,
            admitted=(),
            base_tick=base_tick,
            base_passed=0.0,
            since=base_tick,
            settled=True,
        )
