"""Deleting what a test or a benchmark wrote."""

from __future__ import annotations

from google.cloud import firestore
from google.cloud.firestore_v1.bulk_writer import BulkWriterOptions

# The client's BulkWriter ramps up from 500 writes/s, Firestore's advice for production (the
# 500/50/5 rule): 5,000 coupons then take 10 s to delete. The emulator needs no ramp.
_UNTHROTTLED = BulkWriterOptions(initial_ops_per_second=1_000_000, max_ops_per_second=1_000_000)


def delete_tree(
    db: firestore.Client,
    ref: firestore.DocumentReference | firestore.CollectionReference,
) -> None:
    """Delete a document or collection and everything below it, as fast as the emulator takes."""
    db.recursive_delete(ref, bulk_writer=db.bulk_writer(options=_UNTHROTTLED))
