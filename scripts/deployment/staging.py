"""The folder Cloud Functions gen2 uploads, and the check that it imports on its own.

gen2 uploads only a function's source folder, with `main.py` at its root, and installs the
`requirements.txt` it finds there. `stage()` assembles `<build-dir>/functions/` from
`functions/main.py`, the `shared/` package and a `requirements.txt` exported from uv.lock: the
runtime set alone (no development group), every package pinned with its hashes, so the build
installs exactly what the tests ran against and pip refuses any other file.

Before any deploy, `check_staged_import()` imports the staged `main.py` in a fresh interpreter of
`<build-dir>/runtime-env`, an environment holding exactly that requirements.txt, with the
environment variables the functions will get: a missing file, a dependency declared only for
development, or a bad setting fails here, not in production.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from uv import find_uv_bin

from scripts.deployment import DeployError
from scripts.deployment.gcloud import MANAGED_ENV

LOG = logging.getLogger("codedrop.deploy")

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUILD_DIR = REPO_ROOT / "build"
STAGE_NAME = "functions"
RUNTIME_ENV_NAME = "runtime-env"
REQUIREMENTS_HEADER = (
    "# codedrop's runtime dependencies as locked in uv.lock, with hashes. Written by\n"
    "# scripts/deploy (`uv export --no-default-groups --no-emit-project`); do not edit.\n"
)
UV_TIMEOUT_S = 600  # a first runtime-env install may download every wheel


def _sources(repo_root: Path) -> dict[str, Path]:
    return {
        "main.py": repo_root / "functions" / "main.py",
        "shared": repo_root / "shared",
        "pyproject.toml": repo_root / "pyproject.toml",
        "uv.lock": repo_root / "uv.lock",
    }


def _check_sources(sources: Mapping[str, Path]) -> None:
    problems = []
    if not sources["main.py"].is_file():
        problems.append(f"{sources['main.py']} (the entry points) is missing")
    if not (sources["shared"] / "__init__.py").is_file():
        problems.append(f"{sources['shared']}/__init__.py (the shared package) is missing")
    if not sources["pyproject.toml"].is_file():
        problems.append(f"{sources['pyproject.toml']} (the declared dependencies) is missing")
    if not sources["uv.lock"].is_file():
        problems.append(f"{sources['uv.lock']} (the locked dependencies) is missing")
    if problems:
        raise DeployError("cannot stage the functions: " + "; ".join(problems))


def _check_target(target: Path, sources: Mapping[str, Path]) -> None:
    """Refuse to delete anything that is not a previous stage."""
    for source in sources.values():
        resolved = source.resolve()
        if target == resolved or target in resolved.parents:
            raise DeployError(f"refusing to stage into {target}: it holds the source {source}")
    if target.exists():
        if not target.is_dir():
            raise DeployError(f"refusing to stage into {target}: it is not a directory")
        if any(target.iterdir()) and not (target / "main.py").is_file():
            raise DeployError(
                f"refusing to stage into {target}: it is not empty and does not look like a "
                "previous stage (no main.py); pick another --build-dir"
            )


def _uv(args: Sequence[str], *, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the uv that .venv holds: the version uv.lock pins and scripts/bootstrap.sh installs."""
    return subprocess.run(
        [find_uv_bin(), *args],
        cwd=cwd,
        # Use the Pythons already here; never download one.
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
        capture_output=True,
        text=True,
        timeout=UV_TIMEOUT_S,
        check=False,
    )


def locked_runtime_requirements(repo_root: Path = REPO_ROOT) -> str:
    """uv.lock's runtime set as a requirements.txt: every package pinned, with its hashes.

    `--locked` refuses a lock that no longer matches pyproject.toml: deploy what was tested.
    """
    result = _uv(
        [
            "export",
            "--locked",
            "--offline",
            "--quiet",
            "--no-default-groups",
            "--no-emit-project",
            "--no-header",
            "--format=requirements-txt",
        ],
        cwd=repo_root,
    )
    if result.returncode != 0:
        raise DeployError(
            "exporting the runtime set from uv.lock failed (after changing the dependencies in "
            "pyproject.toml, run `.venv/bin/uv lock`):\n" + result.stderr.strip()
        )
    return REQUIREMENTS_HEADER + result.stdout


def _check_requirements(requirements: str) -> None:
    """Only requirements.txt is uploaded: references to other local files would not resolve."""
    for number, raw in enumerate(requirements.splitlines(), 1):
        line = raw.strip()
        if line.startswith(
            ("-r", "-c", "--requirement", "--constraint", "-e", "--editable", ".", "/", "file:")
        ):
            raise DeployError(
                f"requirements.txt:{number} (exported from uv.lock): {line!r} refers to a local "
                "file, which is not part of the uploaded source; depend on a published package"
            )


def stage(build_dir: Path, *, repo_root: Path = REPO_ROOT) -> Path:
    """Assemble a clean `<build_dir>/functions` with main.py, shared/ and requirements.txt."""
    sources = _sources(repo_root)
    _check_sources(sources)
    requirements = locked_runtime_requirements(repo_root)
    _check_requirements(requirements)
    target = (build_dir / STAGE_NAME).resolve()
    _check_target(target, sources)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copy2(sources["main.py"], target / "main.py")
    shutil.copytree(
        sources["shared"],
        target / "shared",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"),
    )
    (target / "requirements.txt").write_text(requirements, encoding="utf-8")
    LOG.info("staged main.py, shared/ and requirements.txt (from uv.lock) in %s", target)
    return target


def runtime_python(build_dir: Path, requirements: Path) -> Path:
    """The interpreter of `<build_dir>/runtime-env`, which holds exactly `requirements`.

    The environment is created once, then synced on every call: uv installs what is missing
    (hashes checked) and removes anything else. It installs from uv's cache when that holds every
    file, as it does after scripts/bootstrap.sh installed the same versions into .venv, and
    downloads otherwise.
    """
    env_dir = (build_dir / RUNTIME_ENV_NAME).resolve()
    python = env_dir / "bin" / "python"
    if not python.is_file():
        # From the interpreter running this (uv resolves .venv's to its base Python).
        created = _uv(
            ["venv", "--quiet", "--clear", "--python", sys.executable, str(env_dir)],
            cwd=build_dir,
        )
        if created.returncode != 0:
            raise DeployError(f"creating {env_dir} failed:\n" + created.stderr.strip())
    sync = [
        "pip",
        "sync",
        "--quiet",
        "--require-hashes",
        "--python",
        str(python),
        str(requirements),
    ]
    if _uv([*sync, "--offline"], cwd=build_dir).returncode != 0:
        LOG.info("uv's cache lacks part of the runtime set; downloading it into %s", env_dir)
        synced = _uv(sync, cwd=build_dir)
        if synced.returncode != 0:
            raise DeployError(
                f"installing {requirements} into {env_dir} failed:\n" + synced.stderr.strip()
            )
    return python


_PROBE = """
import json, sys
import main, shared
found = [n for n in sys.argv[1:] if callable(getattr(main, n, None))]
print("CODEDROP_PROBE " + json.dumps(
    {"found": found, "main": main.__file__, "shared": shared.__file__}))
"""


def check_staged_import(
    staged: Path,
    entry_points: Sequence[str],
    runtime_env: Mapping[str, str],
    *,
    python: Path,
) -> None:
    """Import the staged main.py in a fresh `python` (only the stage on its path)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV")
        and not key.endswith("_EMULATOR_HOST")
        and key not in MANAGED_ENV
        and not key.startswith("CODEDROP_")
    }
    env.update(runtime_env)
    # The real key is mounted from Secret Manager at run time; the probe only needs a value
    # that passes the settings check.
    env["CODEDROP_TICKET_SECRET"] = secrets.token_urlsafe(32)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # keep __pycache__ out of the upload
    result = subprocess.run(
        [str(python), "-c", _PROBE, *entry_points],
        cwd=staged,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise DeployError(
            f"importing the staged main.py failed (exit {result.returncode}):\n"
            + result.stderr.strip()[-3000:]
        )
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("CODEDROP_PROBE ")]
    if not lines:
        raise DeployError("importing the staged main.py printed no result:\n" + result.stdout)
    probe = json.loads(lines[-1].removeprefix("CODEDROP_PROBE "))
    for module in ("main", "shared"):
        if staged.resolve() not in Path(probe[module]).resolve().parents:
            raise DeployError(f"the staged import used {probe[module]}, not the stage {staged}")
    missing = [name for name in entry_points if name not in probe["found"]]
    if missing:
        raise DeployError("the staged main.py has no callable " + ", ".join(missing))
    LOG.info("staged main.py imports cleanly; entry points: %s", ", ".join(probe["found"]))
