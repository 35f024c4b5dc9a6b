"""The Firestore client and the collection layout, in one place.

campaigns/{campaign_id}
campaigns/{campaign_id}/coupons/{coupon_id}   coupon_id derived from the code
campaigns/{campaign_id}/claims/{claim_id}     claim_id = user key + slot, one per code held
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from google.cloud import firestore

from shared.settings import get_settings

# The client library's snapshot type is generic over its reference type.
Snapshot = firestore.DocumentSnapshot[Any]

CAMPAIGNS = "campaigns"
COUPONS = "coupons"
CLAIMS = "claims"


@lru_cache(maxsize=1)
def get_db() -> firestore.Client:
    return firestore.Client(project=get_settings().project_id)


def campaign_ref(db: firestore.Client, campaign_id: str) -> firestore.DocumentReference:
    return db.collection(CAMPAIGNS).document(campaign_id)


def coupons_collection(db: firestore.Client, campaign_id: str) -> firestore.CollectionReference:
    collection: firestore.CollectionReference = campaign_ref(db, campaign_id).collection(COUPONS)
    return collection


def claims_collection(db: firestore.Client, campaign_id: str) -> firestore.CollectionReference:
    collection: firestore.CollectionReference = campaign_ref(db, campaign_id).collection(CLAIMS)
    return collection
