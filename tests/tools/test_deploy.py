"""Tests for scripts/deployment: staging for Cloud Functions gen2 and the gcloud commands.

No emulator and no gcloud needed: deploys are only ever dry runs here. uv (in .venv, pinned by
uv.lock) exports the runtime set and builds the environment the staged import runs in; it works
offline from the cache scripts/bootstrap.sh filled.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from uv import find_uv_bin

from scripts.deployment import DeployError, cli, functions, gcloud, staging
from shared.http import entry_points
from shared.http.entry_points import Kind
from tests.support import deploy
from tests.support.deploy import PROJECT

REPO = Path(__file__).resolve().parents[2]

DEFINED = entry_points.declared(REPO / "functions" / "main.py")
SPECS = {spec.service: spec for spec in functions.FUNCTIONS}


def _uv(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [find_uv_bin(), *args],
        cwd=cwd,
        env=deploy.clean_env(UV_PYTHON_DOWNLOADS="never"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _fake_repo(root: Path) -> Path:
    (root / "functions").mkdir(parents=True)
    (root / "functions" / "main.py").write_text("def claim_api(request):\n    return 'ok'\n")
    (root / "shared" / "__pycache__").mkdir(parents=True)
    (root / "shared" / "__init__.py").write_text("")
    (root / "shared" / "logic.py").write_text("X = 1\n")
    (root / "shared" / "__pycache__" / "logic.cpython-311.pyc").write_bytes(b"\0")
    (root / "shared" / "stale.pyc").write_bytes(b"\0")
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copy2(REPO / "uv.lock", root / "uv.lock")
    return root


def _locked_versions() -> dict[str, set[str]]:
    """name -> versions in uv.lock (more than one where the lock forks by Python version)."""
    with (REPO / "uv.lock").open("rb") as lock:
        packages = tomllib.load(lock)["package"]
    versions: dict[str, set[str]] = {}
    for package in packages:
        versions.setdefault(package["name"], set()).add(package["version"])
    return versions


def _pins(requirements: str) -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) for each requirement of a uv-exported file."""
    joined = requirements.replace("\\\n", " ")
    pins = {}
    for line in joined.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = re.match(r"([a-z0-9-]+)==(\S+)", line)
        assert match, f"not a pinned requirement: {line!r}"
        pins[match[1]] = (match[2], line.count("--hash=sha256:"))
    return pins


# --- the lock -----------------------------------------------------------------------------------


def test_lock_agrees_with_pyproject() -> None:
    # After a dependency change in pyproject.toml: `.venv/bin/uv lock`, and commit uv.lock.
    result = _uv("lock", "--check", "--offline", cwd=REPO)
    assert result.returncode == 0, result.stderr


# --- staging ------------------------------------------------------------------------------------


def test_the_table_is_every_entry_point_of_main_with_its_signature() -> None:
    assert set(functions.FUNCTION_NAMES) == {
        "claim_api",
        "admin_api",
        "sweep",
        "import_codes",
        "count_usage",
        "deliver_webhooks",
    }
    for spec in functions.FUNCTIONS:
        assert DEFINED[spec.entry_point] == spec.trigger.signature, spec.name


def test_stage_holds_main_shared_and_requirements(tmp_path: Path) -> None:
    staged = staging.stage(tmp_path)

    assert staged == (tmp_path / "functions").resolve()
    assert (staged / "main.py").read_bytes() == (REPO / "functions" / "main.py").read_bytes()
    assert (staged / "shared" / "__init__.py").is_file()
    assert sorted(p.name for p in staged.iterdir()) == ["main.py", "requirements.txt", "shared"]
    source_modules = {p.relative_to(REPO) for p in (REPO / "shared").rglob("*.py")}
    assert {p.relative_to(staged) for p in (staged / "shared").rglob("*.py")} == source_modules
    assert not list(staged.rglob("__pycache__"))
    assert not list(staged.rglob("*.pyc"))


def test_staged_requirements_are_the_locked_runtime_set(tmp_path: Path) -> None:
    staged = staging.stage(tmp_path)
    pins = _pins((staged / "requirements.txt").read_text(encoding="utf-8"))

    # Exactly the lock's versions, every one with its hashes, so the build's pip checks them all.
    locked = _locked_versions()
    assert [
        name for name, (version, _) in pins.items() if version not in locked.get(name, set())
    ] == []
    assert [name for name, (_, hashes) in pins.items() if not hashes] == []
    # The whole tree, not only what pyproject.toml names.
    with (REPO / "pyproject.toml").open("rb") as pyproject:
        declared = tomllib.load(pyproject)["project"]["dependencies"]
    direct = {re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0] for requirement in declared}
    assert direct | {"grpcio", "protobuf", "werkzeug"} <= set(pins)
    # No development group and not the project itself.
    assert not {"pytest", "ruff", "mypy", "matplotlib", "uv", "gcp-storage-emulator"} & set(pins)
    assert "codedrop" not in pins


def test_stage_leaves_out_bytecode(tmp_path: Path) -> None:
    repo = _fake_repo(tmp_path / "repo")
    staged = staging.stage(tmp_path / "build", repo_root=repo)

    assert (staged / "shared" / "logic.py").is_file()
    assert not list(staged.rglob("__pycache__"))
    assert not list(staged.rglob("*.pyc"))


def test_stage_starts_clean_each_time(tmp_path: Path) -> None:
    repo = _fake_repo(tmp_path / "repo")
    staged = staging.stage(tmp_path / "build", repo_root=repo)
    (staged / "shared" / "removed_module.py").write_text("")
    (staged / "leftover.txt").write_text("")

    staged = staging.stage(tmp_path / "build", repo_root=repo)

    assert not (staged / "shared" / "removed_module.py").exists()
    assert not (staged / "leftover.txt").exists()


@pytest.mark.parametrize(
    ("missing", "named"),
    [
        ("functions/main.py", "main.py"),
        ("shared/__init__.py", "shared/__init__.py"),
        ("pyproject.toml", "pyproject.toml"),
        ("uv.lock", "uv.lock"),
    ],
)
def test_stage_fails_clearly_when_a_source_is_missing(
    tmp_path: Path, missing: str, named: str
) -> None:
    repo = _fake_repo(tmp_path / "repo")
    (repo / missing).unlink()

    with pytest.raises(DeployError, match="missing") as raised:
        staging.stage(tmp_path / "build", repo_root=repo)
    assert named in str(raised.value)
    assert not (tmp_path / "build").exists()


def test_stage_refuses_a_lock_that_pyproject_no_longer_matches(tmp_path: Path) -> None:
    repo = _fake_repo(tmp_path / "repo")
    pyproject = repo / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('"itsdangerous>=2.2.0",', '"itsdangerous>=2.2.0", "six",')
    )

    with pytest.raises(DeployError, match="uv lock"):
        staging.stage(tmp_path / "build", repo_root=repo)
    assert not (tmp_path / "build").exists()


def test_stage_refuses_requirements_that_point_at_local_files(tmp_path: Path) -> None:
    repo = _fake_repo(tmp_path / "repo")
    # A path dependency: uv exports it as a local folder, which the upload would not hold.
    (repo / "helper").mkdir()
    (repo / "helper" / "pyproject.toml").write_text('[project]\nname = "helper"\nversion = "1"\n')
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "fake"\nversion = "0"\nrequires-python = ">=3.11"\n'
        'dependencies = ["helper"]\n\n'
        '[tool.uv]\npackage = false\n\n[tool.uv.sources]\nhelper = { path = "helper" }\n'
    )
    locked = _uv("lock", "--offline", cwd=repo)
    assert locked.returncode == 0, locked.stderr

    with pytest.raises(DeployError, match=r"requirements.txt:\d+ .*'./helper'"):
        staging.stage(tmp_path / "build", repo_root=repo)
    assert not (tmp_path / "build").exists()


def test_stage_never_deletes_the_sources_or_foreign_folders(tmp_path: Path) -> None:
    repo = _fake_repo(tmp_path / "repo")
    # --build-dir=<repo root> would make the stage <repo>/functions, the source folder itself.
    with pytest.raises(DeployError, match="refusing"):
        staging.stage(repo, repo_root=repo)
    assert (repo / "functions" / "main.py").is_file()

    other = tmp_path / "elsewhere"
    (other / "functions").mkdir(parents=True)
    (other / "functions" / "precious.txt").write_text("keep me")
    with pytest.raises(DeployError, match="does not look like a previous stage"):
        staging.stage(other, repo_root=repo)
    assert (other / "functions" / "precious.txt").read_text() == "keep me"


# The tests that run the import check share the session's runtime-env (tests/tools/conftest.py).
@pytest.mark.xdist_group(deploy.XDIST_GROUP)
def test_staged_main_imports_alone_in_a_fresh_interpreter(build_dir: Path) -> None:
    """What gen2 does: only the staged folder, main.py at its root, no repo on the path, and
    only the locked runtime set installed."""
    staged = staging.stage(build_dir)
    python = staging.runtime_python(build_dir, staged / "requirements.txt")
    probe = (
        "import json, sys\n"
        "from importlib import metadata\n"
        "import main, shared\n"
        "print(json.dumps({\n"
        "    'callable': [n for n in sys.argv[1:] if callable(getattr(main, n, None))],\n"
        "    'main': main.__file__, 'shared': shared.__file__, 'path': sys.path,\n"
        "    'installed': {d.metadata['Name'].lower().replace('_', '-'): d.version\n"
        "                  for d in metadata.distributions()}}))\n"
    )
    result = subprocess.run(
        [str(python), "-c", probe, *[spec.entry_point for spec in functions.FUNCTIONS]],
        cwd=staged,
        # No emulator is running and none is named: import must not need one.
        env=deploy.clean_env(GOOGLE_CLOUD_PROJECT="demo-deploy-test", PYTHONDONTWRITEBYTECODE="1"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    sys.stderr.write(f"\nstaged entry points callable: {found['callable']}\n")
    assert found["callable"] == [spec.entry_point for spec in functions.FUNCTIONS]
    assert Path(found["main"]).resolve().parent == staged
    assert Path(found["shared"]).resolve().parent == staged / "shared"
    assert str(REPO) not in found["path"]
    assert str(REPO / "functions") not in found["path"]
    pins = _pins((staged / "requirements.txt").read_text(encoding="utf-8"))
    assert found["installed"] == {name: version for name, (version, _) in pins.items()}


def test_the_import_check_sees_a_dependency_left_out_of_the_runtime_set(tmp_path: Path) -> None:
    # pytest is in .venv (the test group), never in the deployed set.
    repo = _fake_repo(tmp_path / "repo")
    (repo / "functions" / "main.py").write_text("import pytest\n\ndef claim_api(request): ...\n")
    staged = staging.stage(tmp_path / "build", repo_root=repo)
    python = staging.runtime_python(tmp_path / "build", staged / "requirements.txt")

    with pytest.raises(DeployError, match="No module named 'pytest'"):
        staging.check_staged_import(
            staged, ["claim_api"], {"GOOGLE_CLOUD_PROJECT": "demo-deploy-test"}, python=python
        )


# --- the gcloud commands ------------------------------------------------------------------------


def _deploys(printed: str) -> list[list[str]]:
    """A printed plan's function deploys (tests/tools/test_deploy_plan.py checks the rest)."""
    return [
        shlex.split(line)
        for line in printed.splitlines()
        if line.startswith("gcloud functions deploy ")
    ]


def _flag(command: list[str], name: str) -> list[str]:
    return [arg.split("=", 1)[1] for arg in command if arg.startswith(f"{name}=")]


def _env_of(command: list[str]) -> dict[str, str]:
    (value,) = _flag(command, "--set-env-vars")
    delimiter = ","
    if value.startswith("^"):
        delimiter, value = value[1:].split("^", 1)
    return dict(item.split("=", 1) for item in value.split(delimiter))


@pytest.mark.xdist_group(deploy.XDIST_GROUP)
def test_dry_run_prints_one_gcloud_command_per_function(printed_plan: deploy.Printed) -> None:
    # Emulator switches in the deployer's shell (deploy.DEPLOYER_SHELL) must not reach the
    # deployed functions.
    assert {"FIREBASE_AUTH_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST"} <= set(deploy.DEPLOYER_SHELL)
    commands = _deploys(printed_plan.stdout)
    staged = (printed_plan.build / "functions").resolve()

    assert [c[3] for c in commands] == [spec.service for spec in functions.FUNCTIONS]
    for command in commands:
        spec = SPECS[command[3]]
        assert command[:3] == ["gcloud", "functions", "deploy"]
        assert "--gen2" in command
        assert _flag(command, "--source") == [str(staged)]
        assert _flag(command, "--entry-point") == [spec.entry_point]
        assert _flag(command, "--project") == [PROJECT]
        assert _flag(command, "--region") == ["europe-west1"]
        assert _flag(command, "--runtime")[0] in ("python311", "python312")
        env_vars = _env_of(command)
        assert env_vars["GOOGLE_CLOUD_PROJECT"] == PROJECT
        assert not [key for key in env_vars if key.endswith("_EMULATOR_HOST")]
        assert not any("EMULATOR" in arg for arg in command)

    by_name = {c[3]: c for c in commands}
    claim = by_name["claim-api"]
    assert "--trigger-http" in claim
    assert "--allow-unauthenticated" in claim
    assert "--concurrency=80" in claim
    assert "--cpu=1" in claim
    assert "--min-instances=1" in claim
    # A marketer's browser holds only a Firebase ID token: IAM lets it through, the routes
    # check the admin claim (tests/unit/test_route_access.py).
    admin = by_name["admin-api"]
    assert "--trigger-http" in admin
    assert "--allow-unauthenticated" in admin
    assert "--no-allow-unauthenticated" in by_name["sweep"]
    assert _flag(by_name["import-codes"], "--trigger-event-filters") == [
        "type=google.cloud.storage.object.v1.finalized",
        f"bucket={PROJECT}-codedrop-imports",  # bucket names are global: one per project
    ]
    # count_usage is pushed by the plan's own subscription (retry and dead-letter policies).
    assert "--no-allow-unauthenticated" in by_name["count-usage"]
    assert not _flag(by_name["count-usage"], "--trigger-topic")


@pytest.mark.xdist_group(deploy.XDIST_GROUP)
def test_dry_run_without_project_uses_a_placeholder(build_dir: Path) -> None:
    commands = _deploys(deploy.dry_run("--build-dir", str(build_dir)))
    assert commands
    for command in commands:
        assert _flag(command, "--project") == [cli.PLACEHOLDER_PROJECT]


@pytest.mark.xdist_group(deploy.XDIST_GROUP)
def test_only_deploys_one_function_and_nothing_else(build_dir: Path) -> None:
    printed = deploy.dry_run(
        "--build-dir", str(build_dir), "--project", "codedrop-prod", "--only", "sweep"
    )
    (what, line) = printed.splitlines()
    assert what == "# function sweep"
    assert shlex.split(line)[:4] == ["gcloud", "functions", "deploy", "sweep"]


def test_a_function_missing_from_main_fails_the_deploy() -> None:
    defined = {"claim_api": Kind.HTTP, "admin_api": Kind.HTTP}
    with pytest.raises(DeployError, match="count_usage"):
        functions.select_functions(defined)
    with pytest.raises(DeployError, match="count_usage"):
        functions.select_functions(defined, "count_usage")
    assert [s.name for s in functions.select_functions(defined, "claim_api")] == ["claim_api"]


def test_entry_point_with_the_wrong_decorator_is_refused(tmp_path: Path) -> None:
    main_py = tmp_path / "main.py"
    main_py.write_text(
        "import functions_framework\n"
        "from shared.handlers import count_usage\n"
        "@functions_framework.http\n"
        "def claim_api(request): ...\n"
        "@functions_framework.http\n"
        "def import_codes(request): ...\n"
    )
    defined = entry_points.declared(main_py)
    assert defined == {
        "functions_framework": None,
        "count_usage": None,
        "claim_api": "http",
        "import_codes": "http",
    }
    with pytest.raises(DeployError, match="cloud_event"):
        functions.select_functions(defined, "import_codes")


@pytest.mark.parametrize("spec", functions.FUNCTIONS, ids=lambda spec: spec.name)
def test_every_function_in_the_table_gets_its_trigger(spec: functions.FunctionSpec) -> None:
    env = gcloud.runtime_env(
        project="codedrop-prod", imports_bucket="my-imports", events_topic="my-events"
    )
    command = gcloud.build_command(
        spec,
        project="codedrop-prod",
        project_number="123456789012",
        region="europe-west1",
        runtime="python311",
        source=Path("/stage"),
        env=env,
        imports_bucket="my-imports",
    )
    invoker = "codedrop-invoker@codedrop-prod.iam.gserviceaccount.com"
    triggers = {
        "claim-api": ["--trigger-http", "--allow-unauthenticated"],
        "admin-api": ["--trigger-http", "--allow-unauthenticated"],
        "sweep": ["--trigger-http", "--no-allow-unauthenticated"],
        "import-codes": [
            "--trigger-event-filters=type=google.cloud.storage.object.v1.finalized",
            "--trigger-event-filters=bucket=my-imports",
            f"--trigger-service-account={invoker}",
            "--retry",
        ],
        # Retried by its push subscription's policy (resources.py), not by Eventarc.
        "count-usage": ["--trigger-http", "--no-allow-unauthenticated"],
        "deliver-webhooks": ["--trigger-http", "--no-allow-unauthenticated"],
    }
    trigger_args = [a for a in command if a.startswith(("--trigger", "--allow", "--no-allow"))]
    trigger_args += [a for a in command if a == "--retry"]
    assert trigger_args == triggers[command[3]]
    env_vars = _env_of(command)
    assert env_vars["CODEDROP_IMPORTS_BUCKET"] == "my-imports"
    assert env_vars["CODEDROP_EVENTS_TOPIC"] == "my-events"
    assert env_vars["THREADS"] == _flag(command, "--concurrency")[0]
    assert {"--gen2", "--source=/stage"} <= set(command)


@pytest.mark.xdist_group(deploy.XDIST_GROUP)
def test_cors_origins_with_commas_use_gcloud_alternate_delimiter(
    printed_plan: deploy.Printed,
) -> None:
    origins = deploy.CORS_ORIGINS
    assert "," in origins
    commands = _deploys(printed_plan.stdout)
    assert commands
    for command in commands:
        (value,) = _flag(command, "--set-env-vars")
        assert value.startswith("^")
        # The project's Firebase Hosting origins, where the deploy puts the pages, come after.
        hosting = f"https://{PROJECT}.web.app,https://{PROJECT}.firebaseapp.com"
        assert _env_of(command)["CODEDROP_CORS_ORIGINS"] == f"{origins},{hosting}"


def test_defaults_match_the_service_settings() -> None:
    from shared.settings import Settings

    fields = Settings.model_fields
    assert fields["events_topic"].default == functions.DEFAULT_EVENTS_TOPIC
    # The bucket is the project's own, and each function is told it.
    parser = cli.build_parser()
    args = parser.parse_args(["--project", "codedrop-prod"])
    cli._validate(parser, args)
    env = cli._function_env(args, "codedrop-prod")
    assert env["CODEDROP_IMPORTS_BUCKET"] == "codedrop-prod-codedrop-imports"


# --- refusals -----------------------------------------------------------------------------------
# In this process: the command line refuses before it stages or runs anything, and
# `python -m scripts.deployment` is run by the dry runs above.


@dataclass(frozen=True)
class Exit:
    returncode: int | str | None
    stderr: str


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> Exit:
    """`python -m scripts.deployment ARGS`: its exit status and what it wrote to stderr."""
    capsys.readouterr()
    try:
        returncode: int | str | None = cli.main(list(args))
    except SystemExit as exited:
        returncode = exited.code
    return Exit(returncode, capsys.readouterr().err)


def test_demo_project_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _main(capsys, "--project", "demo-x", "--build-dir", str(tmp_path))
    assert result.returncode == 2
    assert "demo-" in result.stderr
    assert not (tmp_path / "functions").exists()


def test_project_is_required_without_dry_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _main(capsys, "--build-dir", str(tmp_path))
    assert result.returncode == 2
    assert "--project is required" in result.stderr


@pytest.mark.parametrize(
    "variable",
    ["FIREBASE_AUTH_EMULATOR_HOST=127.0.0.1:9099", "PORT=8080", "GOOGLE_CLOUD_PROJECT=other"],
)
def test_env_refuses_emulator_reserved_and_managed_variables(
    tmp_path: Path, variable: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _main(capsys, "--dry-run", "--build-dir", str(tmp_path), "--env", variable)
    assert result.returncode == 2
    assert variable.split("=")[0] in result.stderr


def test_runtime_env_never_carries_an_emulator_switch() -> None:
    with pytest.raises(DeployError, match="emulator"):
        gcloud.runtime_env(
            project="codedrop-prod",
            imports_bucket="b",
            events_topic="t",
            extra={"STORAGE_EMULATOR_HOST": "http://127.0.0.1:9199"},
        )
