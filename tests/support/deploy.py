"""`python -m scripts.deployment --dry-run` as the deploy tests run it, and the environment its
import check runs in, made once.

Every dry run stages the functions and imports the staged main.py in `<build-dir>/runtime-env`
under PYTHONDONTWRITEBYTECODE, so a fresh environment compiles the whole runtime set (google-cloud,
grpc, pydantic, …) on every run: seconds of CPU each. `runtime_env()` makes the environment once
and writes its bytecode once; each test's build dir links to it (the deploy resolves the link), so
every run stages afresh, syncs the environment and imports the stage as before, reading the
bytecode instead of compiling.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from scripts.deployment import staging

REPO = Path(__file__).resolve().parents[2]
# The tests that share the environment and the plan run on one pytest-xdist worker, so that both
# are made once.
XDIST_GROUP = "deploy-dry-runs"
# The project of the plan the tests share (tests/tools/conftest.py `printed_plan`).
PROJECT = "codedrop-test"
NUMBER = "123456789012"
CORS_ORIGINS = "https://shop.example,https://www.shop.example"
# The deployer's shell for that plan, naming emulators and a demo project: neither may reach
# the deployed functions.
DEPLOYER_SHELL = {
    "FIREBASE_AUTH_EMULATOR_HOST": "127.0.0.1:9099",
    "FIRESTORE_EMULATOR_HOST": "127.0.0.1:8080",
    "GOOGLE_CLOUD_PROJECT": "demo-codedrop",
}


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the suite's emulators, and `extra`."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "PYTHONPATH" and not key.endswith("_EMULATOR_HOST")
    }
    env.update(extra)
    return env


def run_deploy(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scripts.deployment", *args],
        cwd=REPO,
        env=env if env is not None else clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def dry_run(*args: str, env: dict[str, str] | None = None) -> str:
    """What `python -m scripts.deployment --dry-run ARGS` prints; it must succeed."""
    result = run_deploy("--dry-run", *args, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def runtime_env(root: Path) -> Path:
    """A `runtime-env` holding the locked runtime set, with its bytecode written: made as the
    deploy makes it, then main.py imported once with bytecode writes allowed. The import runs in
    this stage of its own, which no test reads."""
    staged = staging.stage(root)
    python = staging.runtime_python(root, staged / "requirements.txt")
    env = clean_env(GOOGLE_CLOUD_PROJECT="demo-deploy-test")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    warmed = subprocess.run(
        [str(python), "-c", "import main"],
        cwd=staged,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert warmed.returncode == 0, warmed.stderr
    return root / staging.RUNTIME_ENV_NAME


def build_dir(root: Path, environment: Path) -> Path:
    """An empty --build-dir whose runtime-env is `environment`."""
    root.mkdir(parents=True, exist_ok=True)
    (root / staging.RUNTIME_ENV_NAME).symlink_to(environment, target_is_directory=True)
    return root


@dataclass(frozen=True)
class Printed:
    """What a dry run printed, and its --build-dir."""

    build: Path
    stdout: str


def full_plan(build: Path) -> Printed:
    """The whole plan for PROJECT, printed from DEPLOYER_SHELL."""
    stdout = dry_run(
        *("--build-dir", str(build)),
        *("--project", PROJECT, "--project-number", NUMBER, "--cors-origins", CORS_ORIGINS),
        env=clean_env(**DEPLOYER_SHELL),
    )
    return Printed(build, stdout)
