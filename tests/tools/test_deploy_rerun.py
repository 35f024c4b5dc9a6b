"""The deploy plan run against recorded answers: a first run on an empty project that meets
what a new project answers while it settles, a re-run that finds everything there, and a
failure that is not transient.

gcloud, firebase-tools (npx) and curl are tests/tools/fake_gcloud.py on PATH: it keeps a small
world (what exists, with its settings, and the IAM bindings) and answers with the texts real
services give (tests/tools/recorded_answers.json). The plan is the one `scripts/deploy` runs,
built without staging; waits between retries are recorded, not slept.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scripts.deployment import cli, functions, hosting, plan, resources
from scripts.deployment.plan import run_plan

# A whole plan is some 250 calls of the stand-in, a process each: minutes on a busy machine.
# One pytest-xdist worker runs the module, so that the first run (a module fixture) runs once.
pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("deploy-rerun")]

PROJECT = "codedrop-test"
FAKE = Path(__file__).with_name("fake_gcloud.py")
REPO = Path(__file__).resolve().parents[2]


class Deployer:
    """Runs the plan against the fake world; `world` is what the services hold."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path = root / "world.json"
        self.path.write_text(
            json.dumps(
                {"project": PROJECT, "resources": {}, "bindings": [], "calls": [], "faults": []}
            )
        )
        bin_dir = root / "bin"
        bin_dir.mkdir()
        for tool in ("gcloud", "npx", "curl"):
            wrapper = bin_dir / tool
            wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S {FAKE} {tool} "$@"\n')
            wrapper.chmod(0o755)
        # python3 writes the pages' config (scripts.deployment.hosting): this one will do.
        (bin_dir / "python3").symlink_to(sys.executable)
        monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
        monkeypatch.setenv("FAKE_GCLOUD_WORLD", str(self.path))
        monkeypatch.chdir(REPO)  # firebase.json's paths are relative to it, as for the CLI
        self.waits: list[float] = []
        self.build = root / "build"
        hosting.stage_pages(self.build)
        resources.write_bucket_cors(self.build, [f"https://{PROJECT}.web.app"])

    @property
    def world(self) -> dict[str, Any]:
        return json.loads(self.path.read_text())  # type: ignore[no-any-return]

    def inject(self, match: str, answer: str, times: int, name: str = "") -> None:
        world = self.world
        world["faults"].append({"match": match, "answer": answer, "times": times, "name": name})
        self.path.write_text(json.dumps(world))

    def forget_calls(self) -> None:
        world = self.world
        world["calls"] = []
        self.path.write_text(json.dumps(world))

    def restore(self, world: dict[str, Any]) -> None:
        """Start from a project another run deployed."""
        self.path.write_text(json.dumps({**world, "calls": [], "faults": []}))

    def run(self) -> int:
        args = cli.build_parser().parse_args(["--project", PROJECT, "--build-dir", str(self.build)])
        cli._validate(cli.build_parser(), args)
        steps = cli.build_plan(
            args,
            target=cli.target_of(args, project=PROJECT, project_number="123456789012"),
            env=cli._function_env(args, PROJECT),
            specs=list(functions.FUNCTIONS),
            staged=Path("/stage"),
        )
        return run_plan(steps, sleep=self.waits.append)


@pytest.fixture
def deployer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Deployer:
    return Deployer(tmp_path, monkeypatch)


@dataclass(frozen=True)
class FirstRun:
    status: int
    waits: list[float]
    world: dict[str, Any]
    build: Path


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> FirstRun:
    """An empty project's first run, meeting what a new project answers while it settles."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        deployer = Deployer(tmp_path_factory.mktemp("first"), monkeypatch)
        deployer.inject(r"firebase deploy --only firestore", "index_contention", times=1)
        deployer.inject(
            r"^gcloud functions deploy import-codes ", "eventarc_agent_not_ready", times=2
        )
        deployer.inject(
            r"^gcloud projects add-iam-policy-binding .*roles/datastore.user",
            "concurrent_policy_changes",
            times=1,
        )
        status = deployer.run()
        return FirstRun(status, deployer.waits, deployer.world, deployer.build)


def _settled(world: dict[str, Any]) -> dict[str, Any]:
    world = copy.deepcopy(world)
    del world["calls"], world["faults"]
    world["bindings"].sort()
    return world


def test_a_first_run_on_an_empty_project_waits_out_what_a_new_project_answers(
    first_run: FirstRun,
) -> None:
    assert first_run.status == 0

    # Firestore's contention, the IAM race, then Eventarc twice (backing off).
    assert first_run.waits == [*plan.BACKOFF[:1], *plan.BACKOFF[:1], *plan.BACKOFF[:2]]
    world = first_run.world
    resources = world["resources"]
    for key in (
        "firestore/databases:(default)",
        f"firebase:{PROJECT}",
        "firestore:rules+indexes",
        f"storage/buckets:gs://{PROJECT}-codedrop-imports",
        "pubsub/topics:coupon-events",
        "pubsub/topics:coupon-events-dead-letter",
        "iam/service-accounts:codedrop-build",
        "scheduler/jobs:codedrop-sweep",
        *(f"functions:{spec.service}" for spec in functions.FUNCTIONS),
    ):
        assert key in resources, key
    # The Cloud Storage agent was asked for before it was bound (else: "does not exist").
    agent = f"serviceAccount:{resources['storage-agent']}"
    assert ["projects", PROJECT, agent, "roles/pubsub.publisher"] in world["bindings"]
    # Pushes go to the run.app URI the function answers on, signed for its deterministic
    # run.app URL (what the function was deployed checking); the scheduler's audience is the URI.
    uri = "https://count-usage-x7k2m4qv3a-ew.a.run.app"
    subscription = resources["pubsub/subscriptions:coupon-events-count-usage"]
    assert f"--push-endpoint={uri}" in subscription
    audience = "https://count-usage-123456789012.europe-west1.run.app"
    assert f"--push-auth-token-audience={audience}" in subscription
    sweep = "https://sweep-x7k2m4qv3a-ew.a.run.app"
    assert f"--oidc-token-audience={sweep}" in resources["scheduler/jobs:codedrop-sweep"]
    builder = f"--build-service-account=projects/{PROJECT}/serviceAccounts/codedrop-build@"
    assert all(
        any(flag.startswith(builder) for flag in resources[f"functions:{spec.service}"])
        for spec in functions.FUNCTIONS
    )
    assert [
        "projects",
        PROJECT,
        f"serviceAccount:codedrop-build@{PROJECT}.iam.gserviceaccount.com",
        "roles/cloudbuild.builds.builder",
    ] in world["bindings"]
    # The pages are on Hosting, told where their APIs are and how to sign shoppers in.
    pages = json.loads((first_run.build / "hosting" / "config.json").read_text())
    assert pages["apiBase"] == "https://claim-api-x7k2m4qv3a-ew.a.run.app"
    assert pages["firebase"]["apiKey"] == "AIza-fake"
    assert {"index.html", "codedrop.js", "config.json"} <= set(resources["hosting"])
    # Operations as code: every log-based metric, one dashboard, one policy per alert file.
    metrics = json.loads((REPO / "deploy/monitoring/log-metrics.json").read_text())["metrics"]
    assert {f"logging/metrics:{m['name']}" for m in metrics} <= set(resources)
    assert [d["displayName"] for d in resources["monitoring/dashboards"].values()] == ["codedrop"]
    assert len(resources["monitoring/policies"]) == len(
        list((REPO / "deploy/monitoring").glob("alert-*.json"))
    )
    # Each secret got one first value.
    assert [v for k, v in resources.items() if k.endswith(":versions")] == [1, 1, 1]


def test_a_second_run_finds_everything_there_and_changes_nothing(
    deployer: Deployer, first_run: FirstRun
) -> None:
    deployer.restore(first_run.world)
    before = _settled(deployer.world)

    assert deployer.run() == 0

    assert _settled(deployer.world) == before
    calls = deployer.world["calls"]
    assert not [c for c in calls if " create " in c or " versions add " in c], calls
    assert not [c for c in calls if "addfirebase" in c or "apps:create" in c]
    assert deployer.waits == []


def test_a_create_that_finds_its_resource_after_all_goes_on(
    deployer: Deployer, first_run: FirstRun
) -> None:
    """A describe that lagged (or another deployer just created it): the create answers what
    the service answers for an existing resource, and the plan takes that as "there"."""
    deployer.restore(first_run.world)
    before = _settled(deployer.world)
    for probe in (
        r"^gcloud storage buckets describe ",
        r"^gcloud pubsub topics describe ",
        r"^gcloud iam service-accounts describe ",
        r"^gcloud secrets describe ",
        r"^gcloud firestore databases describe",
        r"^gcloud scheduler jobs describe ",
        r"^gcloud pubsub subscriptions describe ",
    ):
        deployer.inject(probe, "not_found", times=20)

    assert deployer.run() == 0

    assert _settled(deployer.world) == before
    assert deployer.waits == []


def test_an_error_that_is_not_transient_stops_the_plan_at_once(deployer: Deployer) -> None:
    deployer.inject(r"^gcloud storage buckets create ", "permission_denied", times=1)

    assert deployer.run() == 1

    assert deployer.waits == []
    calls = deployer.world["calls"]
    assert calls[-1].startswith("gcloud storage buckets create ")
    assert not [c for c in calls if " functions deploy " in c]


def test_a_service_that_never_settles_fails_after_the_last_wait(deployer: Deployer) -> None:
    deployer.inject(r"^gcloud functions deploy import-codes ", "eventarc_agent_not_ready", times=99)

    assert deployer.run() == 1

    assert deployer.waits == list(plan.BACKOFF)
    # The plan stops there: no push subscription (made after the functions) is created.
    assert not [c for c in deployer.world["calls"] if "--push-endpoint" in c]


def _sale_checks(deployer: Deployer, *extra: str) -> int:
    """--prepare-sale's steps but the warm-up (tests/emulator/test_warmup.py runs that)."""
    parser = cli.build_parser()
    sale = ["--prepare-sale", "launch", "--sale-starts", "2026-12-01T10:00:00Z", *extra]
    args = parser.parse_args(["--project", PROJECT, *sale])
    cli._validate(parser, args)
    target = cli.target_of(args, project=PROJECT, project_number="123456789012")
    *checks, warmup = cli.sale_plan(args, target=target)
    assert "scripts.deployment.warmup" in warmup.line
    return run_plan(checks, sleep=deployer.waits.append)


def test_preparing_a_sale_raises_the_sign_up_quota_and_checks_the_project(
    deployer: Deployer, first_run: FirstRun
) -> None:
    deployer.restore(first_run.world)

    assert _sale_checks(deployer) == 0

    quota = deployer.world["resources"]["auth:config"]
    assert quota["url"].endswith(f"/projects/{PROJECT}/config?updateMask=quota.signUpQuotaConfig")
    assert quota["body"]["quota"]["signUpQuotaConfig"] == {
        "quota": "1000",
        "startTime": "2026-12-01T09:00:00Z",
        "quotaDuration": "10800s",
    }


def test_preparing_a_sale_fails_when_claim_api_keeps_too_few_instances_warm(
    deployer: Deployer, first_run: FirstRun
) -> None:
    deployer.restore(first_run.world)

    assert _sale_checks(deployer, "--sale-min-instances", "20") == 1
