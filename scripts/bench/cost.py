"""What a sale costs at list prices, from what a benchmark measured.

Prices (USD, list, no free tier), as published for Firestore in a multi-region location (nam5)
and Cloud Functions 2nd gen (Cloud Run, tier 1, request-based billing) in November 2026:
Firestore $0.06 per 100,000 document reads and $0.18 per 100,000 writes; functions $0.000024 per
vCPU-second, $0.0000025 per GiB-second and $0.40 per million requests.

Function time is billed per instance while it serves requests. The benchmark knows the CPU its
claimers used, not how long a real instance would be up: it bills that CPU time as vCPU-seconds,
with claim_api's memory (512 MiB, scripts/deployment/functions.py) for as long. That is the
bill of instances kept busy; an instance waiting on Firestore with few requests in flight bills
its waiting too, so a real bill is this or more.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

READ_PER_100K = 0.06
WRITE_PER_100K = 0.18
VCPU_SECOND = 0.000024
GIB_SECOND = 0.0000025
REQUEST_PER_MILLION = 0.40
CLAIM_API_GIB = 0.5
PER_CLAIMS = 10_000


@dataclass(frozen=True)
class Cost:
    """Dollars per PER_CLAIMS claim requests."""

    reads: float
    writes: float
    cpu_and_memory: float
    requests: float

    @property
    def total(self) -> float:
        return self.reads + self.writes + self.cpu_and_memory + self.requests

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total": self.total}


def per_claims(*, claims: int, reads: int, writes: int, cpu_seconds: float) -> Cost:
    """The bill of `claims` claim requests that read and wrote this many documents and used
    this much CPU, scaled to PER_CLAIMS requests."""
    scale = PER_CLAIMS / claims
    return Cost(
        reads=reads * scale * READ_PER_100K / 100_000,
        writes=writes * scale * WRITE_PER_100K / 100_000,
        cpu_and_memory=cpu_seconds * scale * (VCPU_SECOND + CLAIM_API_GIB * GIB_SECOND),
        requests=PER_CLAIMS * REQUEST_PER_MILLION / 1_000_000,
    )
