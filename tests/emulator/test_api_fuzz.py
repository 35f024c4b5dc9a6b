"""A property-based fuzzer of both APIs (Schemathesis), driven by their own OpenAPI documents and
run against the real functions-framework apps on the emulators: whatever it sends, valid or
not, no answer is a 500, every answer's status is documented for its operation, and every
body (errors included) matches the documented schema.

Bounded: FUZZ_EXAMPLES cases per operation and mode, each under FUZZ_DEADLINE; derandomized, so
a run is reproducible and the suite's time stays put.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud.storage import Client as StorageClient
from hypothesis import HealthCheck, given, settings

from devkit.cleanup import delete_tree
from devkit.codes import add_codes
from shared.campaigns import service as campaign_service
from shared.campaigns import store as campaign_store
from shared.campaigns.models import CampaignCreate
from shared.clock import utcnow
from shared.container import instance_services
from shared.gcp.firestore import campaign_ref
from shared.http import admin, claim_api
from tests.support.api import ADMIN, auth
from tests.support.stack import BUCKET

try:
    import schemathesis
    from schemathesis import GenerationMode
    from schemathesis.config import SchemathesisConfig
    from schemathesis.specs.openapi.schemas import OpenApiSchema
except ImportError as exc:  # a missing dependency fails the run, it never skips it
    raise RuntimeError("schemathesis is missing: install the project's dev dependencies") from exc

pytestmark = pytest.mark.emulator

FUZZ_EXAMPLES = 10
FUZZ_DEADLINE = timedelta(seconds=5)
ROUTERS = {"claim_api": claim_api.router, "admin_api": admin.router}
CALLERS = {"claim_api": auth("fuzz-shopper"), "admin_api": ADMIN}
# What the checks enforce (Schemathesis's names). Left out: positive_data_acceptance, since
# many valid-looking inputs are refused for reasons no schema states (a window ending before it
# starts, an unknown campaign), and the stateful checks, since the APIs declare no links.
CHECKS = {
    "not_a_server_error": {"expected-statuses": ["2xx", "4xx", "503"]},
    "status_code_conformance": {},
    "content_type_conformance": {},
    "response_headers_conformance": {},
    "response_schema_conformance": {},
    "negative_data_rejection": {},
    "ignored_auth": {},
    "unsupported_method": {},
}
# (api, method, path, variant): "positive" and "negative" cases (the latter only where there is
# an input to break), and "known": positive cases about a real campaign with codes, so the
# fuzzer gets past "no such campaign" into claims, updates, generation and reports.
OPERATIONS = [
    (api, method, re.sub(r"<([a-z_]+)>", r"{\1}", route.rule), variant)
    for api, router in ROUTERS.items()
    for route in router.routes()
    for method in route.methods
    for variant in ("positive", "negative", "known")
    if variant == "positive"
    or (variant == "known" and "<campaign_id>" in route.rule)
    or (variant == "negative" and ("<" in route.rule or route.body or route.query or route.headers))
]

# Every case run and the statuses answered, for the summary printed at the end of the module.
_ran: dict[str, int] = {}
_statuses: Counter[int] = Counter()


def _config() -> SchemathesisConfig:
    checks: dict[str, Any] = {"enabled": False}
    checks.update({name: {"enabled": True, **options} for name, options in CHECKS.items()})
    # The caller's valid ID token is sent with every case (ignored_auth tries without it).
    generation = {"with-security-parameters": False}
    return SchemathesisConfig.from_dict({"checks": checks, "generation": generation})


@pytest.fixture(scope="module")
def fuzz_schemas(
    claim_client: FlaskClient,
    admin_client: FlaskClient,
    storage_client: StorageClient,
) -> Iterator[dict[str, OpenApiSchema]]:
    apps = {"claim_api": claim_client.application, "admin_api": admin_client.application}
    started = utcnow() - timedelta(seconds=5)
    clock = time.monotonic()
    yield {
        api: schemathesis.openapi.from_wsgi("/openapi.json", app, config=_config())
        for api, app in apps.items()
    }
    # What the fuzzer created: campaigns (any id it liked), their jobs, generation requests.
    db = instance_services().db
    for campaign in campaign_store.list_campaigns(db):
        if campaign.created_at >= started:
            delete_tree(db, campaign_ref(db, campaign.campaign_id))
    for blob in storage_client.list_blobs(BUCKET, prefix="generate/"):
        if blob.time_created and blob.time_created >= started:
            blob.delete()
    print(
        f"\nfuzz: {sum(_ran.values())} cases over {len(_ran)} operation modes in "
        f"{time.monotonic() - clock:.1f} s; statuses {dict(sorted(_statuses.items()))}"
    )


@pytest.fixture(scope="module")
def fuzz_campaign(fuzz_schemas: dict[str, OpenApiSchema], emulators: object) -> str:
    """A live campaign with codes (deleted with the rest of what the fuzzer created)."""
    db = instance_services().db
    campaign_id = f"fuzz-{uuid.uuid4().hex[:8]}"
    now = utcnow()
    data = CampaignCreate(
        campaign_id=campaign_id,
        title="Fuzz sale",
        starts_at=now - timedelta(minutes=1),
        ends_at=now + timedelta(hours=1),
        max_per_user=2,
    )
    campaign_service.create_campaign(db, data=data, now=now)
    add_codes(db, campaign_id=campaign_id, codes=[f"FUZZ-{n:03d}" for n in range(40)], now=now)
    return campaign_id


@pytest.mark.parametrize(("api", "method", "path", "variant"), OPERATIONS)
def test_fuzzed_requests_get_documented_answers_and_never_a_500(
    fuzz_schemas: dict[str, OpenApiSchema],
    fuzz_campaign: str,
    api: str,
    method: str,
    path: str,
    variant: str,
) -> None:
    operation = fuzz_schemas[api][path][method]
    label = f"{api} {method} {path} {variant}"
    _ran.setdefault(label, 0)
    mode = GenerationMode.NEGATIVE if variant == "negative" else GenerationMode.POSITIVE
    known = {"campaign_id": fuzz_campaign} if variant == "known" else None

    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=FUZZ_DEADLINE,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=known))
    def fuzz(case: Any) -> None:
        _ran[label] += 1
        response = case.call_and_validate(headers=CALLERS[api])
        _statuses[response.status_code] += 1

    fuzz()
    assert _ran[label] > 0
