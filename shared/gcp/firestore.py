"""The Firestore client and every collection path, in one place.

campaigns/{campaign_id}                                  settings, sold_out, pool_generation
campaigns/{campaign_id}/coupons/{coupon_id}              coupon_id derived from the code
campaigns/{campaign_id}/claims/{claim_id}                user key + slot, one per code held
campaigns/{campaign_id}/released_holds/{claim_id}-{µs}   what a released hold was (its claim)
campaigns/{campaign_id}/reversals/{coupon_id}-{n}        what the coupon's n-th redemption was
campaigns/{campaign_id}/counter_shards/{n}               usage counters
campaigns/{campaign_id}/counters/config                  how many shards
campaigns/{campaign_id}/processed_events/{event_id}      count_usage's idempotency markers
campaigns/{campaign_id}/announcements/{event_id}         facts announced exactly once
campaigns/{campaign_id}/room_instances/{instance_id}     waiting-room heartbeats
campaigns/{campaign_id}/segments/{index}                 leases on parts of the code space
campaigns/{campaign_id}/fairness/secret                  a fair drop's seed and entry-id key
campaigns/{campaign_id}/fairness/shard-{nn}              the draw: one range of entry ids
campaigns/{campaign_id}/fairness/draw                    the draw: digest, count, when
campaigns/{campaign_id}/entry_shards/{nn}/entries/{id}  an identity's entry, by range of ids
campaigns/{campaign_id}/admissions/{entry_id or key}     a fair drop's first admission of each
campaigns/{campaign_id}/refusals/{instance_id}           claims refused, by reason (per instance)
campaigns/{campaign_id}/sweep/claims                     how far the sweep has checked claims
jobs/{job_id}                                            import and generation jobs
outbox/{event_id}                                        events waiting to be published
webhooks/{webhook_id}                                    a campaign's webhook and its drain lease
webhooks/{webhook_id}/deliveries/{event_id}              one event's delivery to that webhook
campaign_webhooks/{campaign_id}                          the campaign's webhooks and their events
redeemed_orders/{order_key}                              the coupons an order redeemed
audit/{entry_id}                                         an admin's change: who, what, before, after
admins/{uid}                                             who was made admin or owner, by whom
"""

from __future__ import annotations

from typing import Any

import grpc  # type: ignore[import-untyped]
from google.cloud import firestore
from google.cloud.firestore_v1.base_client import _GRPC_MSG_SIZE_OPTIONS
from google.cloud.firestore_v1.services.firestore import client as gapic_module
from google.cloud.firestore_v1.services.firestore.client import FirestoreClient
from google.cloud.firestore_v1.services.firestore.transports.grpc import FirestoreGrpcTransport

# The client library's snapshot type is generic over its reference type.
Snapshot = firestore.DocumentSnapshot[Any]
Client = firestore.Client

CAMPAIGNS = "campaigns"
COUPONS = "coupons"
CLAIMS = "claims"
RELEASED_HOLDS = "released_holds"
REVERSALS = "reversals"
REDEEMED_ORDERS = "redeemed_orders"
COUNTER_SHARDS = "counter_shards"
COUNTERS = "counters"
PROCESSED_EVENTS = "processed_events"
ANNOUNCEMENTS = "announcements"
ROOM_INSTANCES = "room_instances"
SEGMENTS = "segments"
FAIRNESS = "fairness"
ENTRY_SHARDS = "entry_shards"
ENTRIES = "entries"
ADMISSIONS = "admissions"
REFUSALS = "refusals"
SWEEP = "sweep"
JOBS = "jobs"
OUTBOX = "outbox"
WEBHOOKS = "webhooks"
DELIVERIES = "deliveries"
CAMPAIGN_WEBHOOKS = "campaign_webhooks"
LIMITER_INSTANCES = "limiter_instances"
AUDIT = "audit"
ADMINS = "admins"


def make_client(project_id: str) -> firestore.Client:
    # With FIRESTORE_EMULATOR_HOST set the client talks to the emulator.
    return firestore.Client(project=project_id)


def make_streaming_client(project_id: str) -> firestore.Client:
    """A client for long server-streaming reads (a bulk job's walk of a million candidates): its
    channel reads a stream's messages on the thread that iterates it (gRPC's experimental
    SingleThreadedUnaryStream), instead of handing each one over from the channel's own thread.
    The hand-over cost about 56 µs of Python a document here, this 16. Use it only for streams
    read by one thread at a time (the client's other calls are the usual ones)."""
    return _CallingThreadStreams(project=project_id)


# gRPC reads a unary-stream call's responses on the calling thread.
_CALLING_THREAD_STREAMS = (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1)


class _CallingThreadTransport(FirestoreGrpcTransport):
    @classmethod
    def create_channel(cls, *args: Any, **kwargs: Any) -> grpc.Channel:
        # The library asks for its production channel through here, with its own options.
        kwargs["options"] = [*(kwargs.get("options") or ()), _CALLING_THREAD_STREAMS]
        return super().create_channel(*args, **kwargs)


class _CallingThreadStreams(firestore.Client):
    """The library's client on the channel the library would make, plus the option."""

    @property
    def _firestore_api(self) -> Any:
        return self._firestore_api_helper(_CallingThreadTransport, FirestoreClient, gapic_module)

    def _emulator_channel(self, transport: Any) -> grpc.Channel:
        # The library's own emulator channel (base_client._emulator_channel), plus the option.
        token = getattr(self._credentials, "id_token", None) or "owner"
        options = [("Authorization", f"Bearer {token}"), *_GRPC_MSG_SIZE_OPTIONS]
        return grpc.insecure_channel(
            self._emulator_host, options=[*options, _CALLING_THREAD_STREAMS]
        )


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


def reversals_collection(db: firestore.Client, campaign_id: str) -> firestore.CollectionReference:
    return _sub(db, campaign_id, REVERSALS)


def redeemed_order_ref(db: firestore.Client, order_key: str) -> firestore.DocumentReference:
    """An order's redemptions across campaigns (`order_key`: a hash of the shop's order id)."""
    ref: firestore.DocumentReference = db.collection(REDEEMED_ORDERS).document(order_key)
    return ref


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


def limiter_instances_collection(db: firestore.Client) -> firestore.CollectionReference:
    """One heartbeat document per instance serving code look-ups (shared/ratelimit)."""
    return db.collection(LIMITER_INSTANCES)


def segments_collection(db: firestore.Client, campaign_id: str) -> firestore.CollectionReference:
    return _sub(db, campaign_id, SEGMENTS)


def fairness_collection(db: firestore.Client, campaign_id: str) -> firestore.CollectionReference:
    return _sub(db, campaign_id, FAIRNESS)


def drop_secret_ref(db: firestore.Client, campaign_id: str) -> firestore.DocumentReference:
    return fairness_collection(db, campaign_id).document("secret")


def entries_collection(
    db: firestore.Client, campaign_id: str, shard: int
) -> firestore.CollectionReference:
    """One range of a fair drop's entry ids (shared/fairness/draw.py): the draw reads a range by
    listing its own collection, not by filtering one large collection."""
    parent = _sub(db, campaign_id, ENTRY_SHARDS).document(f"{shard:02d}")
    collection: firestore.CollectionReference = parent.collection(ENTRIES)
    return collection


def admissions_collection(db: firestore.Client, campaign_id: str) -> firestore.CollectionReference:
    return _sub(db, campaign_id, ADMISSIONS)


def refusals_collection(db: firestore.Client, campaign_id: str) -> firestore.CollectionReference:
    return _sub(db, campaign_id, REFUSALS)


def sweep_checkpoint_ref(db: firestore.Client, campaign_id: str) -> firestore.DocumentReference:
    """`checked_until`: the sweep has checked every claim of the campaign made before it."""
    return _sub(db, campaign_id, SWEEP).document("claims")


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


def audit_collection(db: firestore.Client) -> firestore.CollectionReference:
    return db.collection(AUDIT)


def admins_collection(db: firestore.Client) -> firestore.CollectionReference:
    return db.collection(ADMINS)
