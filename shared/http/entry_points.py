"""What kind each Cloud Function is, read from where it is declared: the functions-framework
decorator on its entry point in functions/main.py. The edge guard (functions/main.py), the local
stack and the deploy all ask this module, so a new function cannot be served as one kind and
deployed or guarded as another.

main.py is read as source (ast), not imported: the deploy and the local stack read it without
its dependencies or settings, and the edge guard reads it before its functions are defined."""

from __future__ import annotations

import ast
import enum
from pathlib import Path


class Kind(enum.StrEnum):
    """A functions-framework signature type (the value of its --signature-type)."""

    HTTP = "http"
    CLOUD_EVENT = "cloudevent"

    @property
    def decorator(self) -> str:
        """The functions-framework decorator that declares it."""
        return "cloud_event" if self is Kind.CLOUD_EVENT else "http"


_DECORATORS = {kind.decorator: kind for kind in Kind}


def _decorator_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def declared(main_py: Path) -> dict[str, Kind | None]:
    """Every name bound at the top level of main_py, with its kind when it is a function under
    exactly one functions-framework decorator (None for anything else)."""
    tree = ast.parse(main_py.read_text(encoding="utf-8"), filename=str(main_py))
    names: dict[str, Kind | None] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            kinds = {
                _DECORATORS[name]
                for d in node.decorator_list
                if (name := _decorator_name(d)) in _DECORATORS
            }
            names[node.name] = kinds.pop() if len(kinds) == 1 else None
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = None
        elif isinstance(node, ast.ImportFrom | ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = None
    return names


def entry_points(main_py: Path) -> dict[str, Kind]:
    """The functions main_py declares, each with its kind."""
    return {name: kind for name, kind in declared(main_py).items() if kind is not None}
