"""Production Firestore's index rules, checked where the emulator forgives them.

The emulator serves every query without an index; production answers FAILED_PRECONDITION ("The
query requires an index"). Production also limits a collection to about 500 writes/s while an
indexed field's values increase in write order. This module reads `firestore.indexes.json`, says
whether a query shape is served by a composite index or by the automatic single-field indexes
(which `fieldOverrides` can switch off), and records, from the RPCs a Firestore client sends,
every query shape and every field written, so the test suite can hold the code to both rules.
"""

from __future__ import annotations

import json
import pickle
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.cloud.firestore_v1.services.firestore.client import FirestoreClient
from google.cloud.firestore_v1.types import query as query_pb

Operator = query_pb.StructuredQuery.FieldFilter.Operator
EQUALITY = {Operator.EQUAL, Operator.IN, Operator.ARRAY_CONTAINS, Operator.ARRAY_CONTAINS_ANY}
NAME = "__name__"


@dataclass(frozen=True)
class QueryShape:
    """What decides which index serves a query: never the values compared."""

    collection: str
    collection_group: bool
    equalities: frozenset[str]
    inequalities: frozenset[str]
    orders: tuple[tuple[str, str], ...]  # (field, "ASCENDING" | "DESCENDING"), __name__ left out

    def describe(self) -> str:
        scope = "collection group" if self.collection_group else "collection"
        parts = [f"{scope} {self.collection}"]
        parts += [f"{f} ==" for f in sorted(self.equalities)]
        parts += [f"{f} <>" for f in sorted(self.inequalities)]
        parts += [f"order by {f} {d}" for f, d in self.orders]
        return ", ".join(parts)


@dataclass(frozen=True)
class CompositeIndex:
    collection: str
    scope: str  # COLLECTION | COLLECTION_GROUP
    fields: tuple[tuple[str, str], ...]  # (field, ASCENDING | DESCENDING | CONTAINS)


@dataclass(frozen=True)
class IndexConfig:
    composites: tuple[CompositeIndex, ...]
    # (collection group, field) whose automatic single-field indexes are switched off
    exempt: frozenset[tuple[str, str]]
    # (collection group, field) -> the single-field indexes its override lists instead of the
    # automatic ones, as (scope, ASCENDING | DESCENDING | CONTAINS). Automatic single-field
    # indexes are collection-scoped: a collection-group query needs an override to enable one.
    overrides: dict[tuple[str, str], frozenset[tuple[str, str]]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> IndexConfig:
        data = json.loads(path.read_text())
        composites = tuple(
            CompositeIndex(
                collection=index["collectionGroup"],
                scope=index["queryScope"],
                fields=tuple(
                    (f["fieldPath"], f.get("order") or f.get("arrayConfig", "CONTAINS"))
                    for f in index["fields"]
                ),
            )
            for index in data["indexes"]
        )
        overrides = data.get("fieldOverrides", [])
        exempt = frozenset(
            (o["collectionGroup"], o["fieldPath"]) for o in overrides if not o.get("indexes")
        )
        listed = {
            (o["collectionGroup"], o["fieldPath"]): frozenset(
                (i["queryScope"], i.get("order") or i.get("arrayConfig", "CONTAINS"))
                for i in o.get("indexes", [])
            )
            for o in overrides
        }
        return cls(composites=composites, exempt=exempt, overrides=listed)

    def single_field(
        self, collection: str, field_path: str, *, group: bool = False, orders: tuple[str, ...] = ()
    ) -> bool:
        """Whether a single-field index on the field serves a query of this scope, in one of
        `orders` (any ascending or descending one when none is given)."""
        if field_path == NAME:
            return True
        listed = self.overrides.get((collection, field_path))
        if listed is None:
            return not group
        scope = "COLLECTION_GROUP" if group else "COLLECTION"
        return any((scope, order) in listed for order in orders or ("ASCENDING", "DESCENDING"))

    def serves(self, shape: QueryShape) -> bool:
        ranged = set(shape.inequalities) | {f for f, _ in shape.orders}
        group = shape.collection_group
        if not ranged:
            # Equalities only: merged from the single-field indexes of each field.
            return all(
                self.single_field(shape.collection, f, group=group) for f in shape.equalities
            )
        if not shape.equalities and len(ranged) == 1:
            (only,) = ranged
            order = dict(shape.orders).get(only, "ASCENDING")
            return self.single_field(shape.collection, only, group=group, orders=(order,))
        return any(self._composite_serves(index, shape) for index in self.composites)

    def _composite_serves(self, index: CompositeIndex, shape: QueryShape) -> bool:
        scope = "COLLECTION_GROUP" if shape.collection_group else "COLLECTION"
        if index.collection != shape.collection or index.scope != scope:
            return False
        fields = [f for f, _ in index.fields]
        prefix = fields[: len(shape.equalities)]
        if set(prefix) != set(shape.equalities):
            return False
        rest = list(index.fields[len(shape.equalities) :])
        wanted = list(shape.orders) or [(f, "ASCENDING") for f in sorted(shape.inequalities)]
        # An inequality's field must be ordered first (Firestore adds that order itself).
        for inequality in shape.inequalities:
            if inequality not in {f for f, _ in wanted}:
                wanted.insert(0, (inequality, "ASCENDING"))
        return rest[: len(wanted)] == wanted


def shape_of(structured: query_pb.StructuredQuery) -> QueryShape:
    (source,) = structured.from_
    equalities: set[str] = set()
    inequalities: set[str] = set()

    def visit(f: query_pb.StructuredQuery.Filter) -> None:
        if "composite_filter" in f:
            for sub in f.composite_filter.filters:
                visit(sub)
        elif "field_filter" in f:
            path = f.field_filter.field.field_path
            target = equalities if f.field_filter.op in EQUALITY else inequalities
            if path != NAME:
                target.add(path)
        elif "unary_filter" in f:
            equalities.add(f.unary_filter.field.field_path)

    if "where" in structured:
        visit(structured.where)
    orders = tuple(
        (o.field.field_path, o.direction.name)
        for o in structured.order_by
        if o.field.field_path != NAME
    )
    return QueryShape(
        collection=source.collection_id,
        collection_group=bool(source.all_descendants),
        equalities=frozenset(equalities),
        inequalities=frozenset(inequalities - equalities),
        orders=orders,
    )


def _field(request: Any, name: str) -> Any:
    if isinstance(request, dict):
        return request.get(name)
    return getattr(request, name) if request is not None and name in request else None


def _collection_of(document_name: str) -> str:
    # projects/P/databases/D/documents/campaigns/c/coupons/id -> "coupons"
    return document_name.split("/")[-2]


@dataclass
class Recorder:
    """Query shapes and written fields seen at the client, from every Firestore client."""

    shapes: set[QueryShape] = field(default_factory=set)
    written: set[tuple[str, str]] = field(default_factory=set)  # (collection, top-level field)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def query(self, request: Any) -> None:
        # The client library passes requests as dicts of protobuf messages.
        aggregation = _field(request, "structured_aggregation_query")
        structured = (
            aggregation.structured_query if aggregation else _field(request, "structured_query")
        )
        if structured:
            with self._lock:
                self.shapes.add(shape_of(structured))

    def save(self, path: Path) -> None:
        """What this process recorded, for the process that checks a run split across workers."""
        with self._lock:
            path.write_bytes(pickle.dumps((self.shapes, self.written)))

    def add_saved(self, path: Path) -> None:
        shapes, written = pickle.loads(path.read_bytes())  # noqa: S301 - written by save() above
        with self._lock:
            self.shapes |= shapes
            self.written |= written

    def commit(self, request: Any) -> None:
        with self._lock:
            for write in _field(request, "writes") or ():
                if "update" not in write:
                    continue
                collection = _collection_of(write.update.name)
                paths = list(write.update.fields.keys())
                paths += [t.field_path for t in write.update_transforms]
                for path in paths:
                    self.written.add((collection, path.split(".")[0].strip("`")))


@contextmanager
def recording() -> Iterator[Recorder]:
    """Record what every Firestore client in this process sends, while inside."""
    recorder = Recorder()
    originals: dict[str, Callable[..., Any]] = {}

    def wrap(name: str, note: Callable[[Any], None]) -> None:
        original = getattr(FirestoreClient, name)
        originals[name] = original

        def recorded(self: FirestoreClient, request: Any = None, **kwargs: Any) -> Any:
            note(request)
            return original(self, request, **kwargs)

        setattr(FirestoreClient, name, recorded)

    wrap("run_query", recorder.query)
    wrap("run_aggregation_query", recorder.query)
    wrap("commit", recorder.commit)
    try:
        yield recorder
    finally:
        for name, original in originals.items():
            setattr(FirestoreClient, name, original)
