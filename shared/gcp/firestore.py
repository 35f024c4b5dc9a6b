"""The Firestore client and every collection path, in one place.

campaigns/{campaign_id}                                  settings, sold_out, pool_generation
campaigns/{campaign_id}/coupons/{coupon_id}              coupon_id derived from the code
campaigns/{campaign_id}/claims/{claim_id}                user key + slot, one per code held
campaigns/{campaign_id}/released_holds/{claim_id}-{µs}   what a released hold was (its claim)
campaigns/{campaign_id}/counter_shards/{n}               usage counters
campaigns/{campaign_id}/counters/config                  how many shards
campaigns/{campaign_id}/processed_events/{event_id}      count_usage's idempotency markers
campaigns/{campaign_id}/announcements/{event_id}         facts announced exactly once
campaigns/{campaign_id}/room_instances/{instance_id}     waiting-room heartbeats
campaigns/{campaign_id}/segments/{index}                 leases on parts of the code space
jobs/{job_id}                                            import and generation jobs
outbox/{event_id}                                        events waiting to be published
webhooks/{webhook_id}                                    a campaign's webhook and its drain lease
webhooks/{webhook_id}/deliveries/{event_id}              one event's delivery to that webhook
campaign_webhooks/{campaign_id}                          the campaign's webhooks and their events
"""

from __future__ import annotations

from typing import Any

from google.cloud import firestore

# The client library's snapshot type is generic over its reference type.
Snapshot = firestore.DocumentSnapshot[Any]
Client = firestore.Client

CAMPAIGNS = "campaigns"
COUPONS = "coupons"
CLAIMS = "claims"
RELEASED_HOLDS = "released_holds"
COUNTER_SHARDS = "counter_shards"
COUNTERS = "counters"
PROCESSED_EVENTS = "processed_events"
ANNOUNCEMENTS = "announcements"
ROOM_INSTANCES = "room_instances"
SEGMENTS = "segments"
JOBS = "jobs"
OUTBOX = "outbox"
WEBHOOKS = "webhooks"
DELIVERIES = "deliveries"
CAMPAIGN_WEBHOOKS = "campaign_webhooks"


def make_client(project_id: str) -> firestore.Client:
    # With FIRESTORE_EMULATOR_HOST set the client talks to the emulator.
    return firestore.Client(project=project_id)


def campaigns_collection(db: firestore.Client) -> firestore.CollectionReference:
    return db.collection(CAMPAIGNS)


def campaign_ref(db: firestore.Client, campaign_id: str) -> firestore.DocumentReference:
    return db.collection(CAMPAIGNS).document(campaign_id)


def _sub(db: firestore.Client, campaign_id: str, name: str) -> firestore.CollectionReference:
    collection: firestore.CollectionReference = campaign_ref(db, campaign_id).collection(name)
    return collection


def coupons_collection(db: firestore.Client, campaign_id: str) -> firestore.CollectionReference:
    return _sub(db, campaign_id, COUPONS)


def claims_collection(db: firestore.Client, campaign_id: str) -> firestore.CollectionReference:
    return _sub(db, campaign_id, CLAIMS)


def released_holds_collection(
    db: firestore.Client, campaign_id: str
) -> firestore.CollectionReference:
    return _sub(db, campaign_id, RELEASED_HOLDS)


def counter_shards_collection(
    db: firestore.Client, campaign_id: str
) -> firestore.CollectionReference:
    return _sub(db, campaign_id, COUNTER_SHARDS)


def counter_config_ref(db: firestore.Client, campaign_id: str) -> firestore.DocumentReference:
    return _sub(db, campaign_id, COUNTERS).document("config")


def processed_event_ref(
    db: firestore.Client, campaign_id: str, event_id: str
) -> firestore.DocumentReference:
    """The consumer's idempotency marker for an event."""
    return _sub(db, campaign_id, PROCESSED_EVENTS).document(event_id)


def announcement_ref(
    db: firestore.Client, campaign_id: str, event_id: str
) -> firestore.DocumentReference:
    return _sub(db, campaign_id, ANNOUNCEMENTS).document(event_id)


def room_instances_collection(
    db: firestore.Client, campaign_id: str
) -> firestore.CollectionReference:
    return _sub(db, campaign_id, ROOM_INSTANCES)


def segments_collection(db: firestore.Client, campaign_id: str) -> firestore.CollectionReference:
    return _sub(db, campaign_id, SEGMENTS)


def jobs_collection(db: firestore.Client) -> firestore.CollectionReference:
    return db.collection(JOBS)


def outbox_collection(db: firestore.Client) -> firestore.CollectionReference:
    return db.collection(OUTBOX)


def webhooks_collection(db: firestore.Client) -> firestore.CollectionReference:
    return db.collection(WEBHOOKS)


def webhook_ref(db: firestore.Client, webhook_id: str) -> firestore.DocumentReference:
    return db.collection(WEBHOOKS).document(webhook_id)


def deliveries_collection(db: firestore.Client, webhook_id: str) -> firestore.CollectionReference:
    collection: firestore.CollectionReference = webhook_ref(db, webhook_id).collection(DELIVERIES)
    return collection


def campaign_webhooks_ref(db: firestore.Client, campaign_id: str) -> firestore.DocumentReference:
    return db.collection(CAMPAIGN_WEBHOOKS).document(campaign_id)
