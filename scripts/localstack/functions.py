"""The functions of functions/main.py, each served by functions-framework in a process group of
its own (gunicorn's master and workers), as the local stack and the tool tests run them."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from devkit import http
from devkit.emulators.processes import GroupProcess, ProcessFailed, spawn
from scripts.localstack.config import FUNCTIONS, HOST, MAIN_PY, REPO, Function
from scripts.localstack.errors import StackError
from shared.http.entry_points import entry_points

log = logging.getLogger("local_stack")


def defined_functions(main_py: Path = MAIN_PY) -> list[Function]:
    """The known entry points that main_py declares, each with its kind (read with ast, not
    imported)."""
    try:
        declared = entry_points(main_py)
    except (OSError, SyntaxError) as exc:
        raise StackError(f"cannot read the entry points of {main_py}: {exc}") from exc
    known = {f.name for f in FUNCTIONS}
    for name in declared.keys() - known:
        log.warning(
            "entry point has no port in the local stack; not started", extra={"function": name}
        )
    return [replace(f, kind=declared[f.name]) for f in FUNCTIONS if f.name in declared]


@dataclass(eq=False, kw_only=True)
class FunctionProcess(GroupProcess):
    """A functions-framework server started by start_function()."""

    function: Function
    port: int

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def wait_answering(self, timeout: float) -> float:
        """Until it answers HTTP; StackError, with its log's tail, if it exits or times out."""
        try:
            return self.wait_ready(lambda: http.answers(self.url), where=self.url, timeout=timeout)
        except ProcessFailed as exc:
            raise StackError(str(exc)) from exc


def function_env(base: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with `base` on top, as the functions get it."""
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {
        **os.environ,
        **base,
        "PYTHONPATH": pythonpath,
        "PYTHONUNBUFFERED": "1",
        "GUNICORN_LOG_LEVEL": os.environ.get("GUNICORN_LOG_LEVEL", "info"),
    }


def start_function(
    function: Function,
    *,
    port: int,
    env: Mapping[str, str],
    log_dir: Path,
    run_dir: Path,
    source: Path = MAIN_PY,
) -> FunctionProcess:
    """Start serving `function` of `source` on `port` (not waiting for it); its output goes to
    log_dir/NAME.log and its runtime files to run_dir/NAME/."""
    if function.kind is None:
        raise StackError(f"{function.name} is not declared in {MAIN_PY}")
    executable = Path(sys.executable).parent / "functions-framework"
    if not executable.is_file():
        raise StackError(
            f"{executable} is missing; install the requirements "
            "(`pip install -r requirements-dev.txt`, or run ./scripts/run which does it)"
        )
    command = [
        str(executable),
        "--target",
        function.name,
        "--source",
        str(source),
        "--port",
        str(port),
        "--host",
        HOST,
        "--signature-type",
        str(function.kind),
    ]
    log_path = log_dir / f"{function.name}.log"
    runtime_dir = run_dir / function.name
    runtime_dir.mkdir(mode=0o700, parents=True)
    log.info(
        "starting function",
        extra={
            "function": function.name,
            "port": port,
            "workers": function.workers,
            "threads": function.threads,
            "log": log_path,
        },
    )
    process = spawn(
        command,
        log_path=log_path,
        cwd=REPO,
        env={
            **env,
            "WORKERS": str(function.workers),
            "THREADS": str(function.threads),
            # gunicorn >= 25 opens a control socket at $XDG_RUNTIME_DIR/gunicorn.ctl, else at
            # ~/.gunicorn/gunicorn.ctl: one path for every server of the user, which the
            # servers would take from each other. One folder per server keeps them apart.
            "XDG_RUNTIME_DIR": str(runtime_dir),
        },
    )
    return FunctionProcess(
        name=function.name, process=process, log_path=log_path, function=function, port=port
    )
