"""Docs that follow the code: the pages scripts/tools/api_docs.py generates (the API, errors,
events, campaign fields, the local stack's table) are current, the data layout in
docs/architecture.md names every collection shared/gcp/firestore.py defines, and the
configuration table in docs/operations.md every setting shared/settings.py reads."""

from __future__ import annotations

from pathlib import Path

from scripts.tools import api_docs
from shared.gcp import firestore as paths

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_generated_pages_are_what_the_code_says() -> None:
    assert api_docs.main(["--check"]) == 0


def test_the_data_layout_names_every_collection_the_code_uses() -> None:
    layout = (DOCS / "architecture.md").read_text(encoding="utf-8")
    block = layout[layout.index("Firestore layout") :].split("```")[1]
    names = {
        value
        for name, value in vars(paths).items()
        if name.isupper() and isinstance(value, str) and name not in {"Client"}
    }
    missing = sorted(name for name in names if f"{name}/" not in block and f"/{name}" not in block)
    assert missing == []


def test_the_configuration_table_names_every_setting() -> None:
    from shared.settings import Settings

    table = (DOCS / "operations.md").read_text(encoding="utf-8")
    names = [
        alias if isinstance(alias := field.validation_alias, str) else name.upper()
        for name, field in Settings.model_fields.items()
    ]
    assert [name for name in names if f"`{name}`" not in table] == []
