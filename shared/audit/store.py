"""Firestore access for the audit log (`audit/{entry_id}`).

An entry is never written on its own after the change it describes: the use case adds it to
the batch or transaction that makes the change (`add`), so both commit or neither does."""

from __future__ import annotations

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.audit.models import AuditEntry, AuditEntryPublic
from shared.gcp.firestore import audit_collection

Writer = firestore.WriteBatch | firestore.Transaction


def add(writer: Writer, db: firestore.Client, entry: AuditEntry) -> None:
    writer.create(audit_collection(db).document(entry.entry_id), entry.fields())


def record(db: firestore.Client, entry: AuditEntry) -> None:
    """An entry for a change that writes nothing in Firestore (a signed upload session)."""
    batch = db.batch()
    add(batch, db, entry)
    batch.commit()


def _entry(snapshot: firestore.DocumentSnapshot) -> AuditEntry:  # type: ignore[type-arg]
    return AuditEntry.model_validate({"entry_id": snapshot.id, **(snapshot.to_dict() or {})})


def list_entries(
    db: firestore.Client, *, campaign_id: str | None, limit: int, page_token: str | None
) -> tuple[list[AuditEntry], str | None]:
    """Newest first, a page at a time; the token is the last entry's id."""
    collection = audit_collection(db)
    query: firestore.Query = collection.order_by("at", direction=firestore.Query.DESCENDING)
    if campaign_id is not None:
        query = query.where(filter=FieldFilter("campaign_id", "==", campaign_id))
    if page_token is not None:
        last = audit_collection(db).document(page_token).get()
        if not last.exists or (
            campaign_id is not None and (last.to_dict() or {}).get("campaign_id") != campaign_id
        ):
            return [], None
        query = query.start_after(last)
    snapshots = list(query.limit(limit + 1).stream())
    entries = [_entry(s) for s in snapshots[:limit]]
    more = len(snapshots) > limit
    return entries, entries[-1].entry_id if more and entries else None


def public(entry: AuditEntry) -> AuditEntryPublic:
    return AuditEntryPublic.model_validate(entry.model_dump(exclude={"version"}))
