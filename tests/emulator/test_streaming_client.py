"""The streaming client (shared/gcp/firestore.make_streaming_client): the same database and the
same answers as the usual client, its streams read on the calling thread, its calls countable."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore

from devkit.firestore_rpcs import RpcCounter
from shared.coupons.store import stream_unassigned
from shared.gcp import client_internals
from shared.gcp.firestore import _CallingThreadStreams
from tests.support.stack import MakeCampaign

pytestmark = pytest.mark.emulator


@pytest.fixture
def streams() -> firestore.Client:
    from shared.container import instance_services

    return instance_services().streams_db


def _reads_on_the_calling_thread(client: firestore.Client) -> bool:
    channel: Any = client_internals.transport(client_internals.gapic(client)).grpc_channel
    return bool(channel._single_threaded_unary_stream)


def test_a_walk_reads_the_same_candidates_as_the_usual_client(
    db: firestore.Client, streams: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=40)

    def walk(client: firestore.Client) -> Iterator[Any]:
        return stream_unassigned(client, campaign_id=campaign_id, limit=100, low=0.0, high=1.0)

    with RpcCounter(streams) as counter:
        streamed = list(walk(streams))
        counts = counter.snapshot()
    assert streamed == list(walk(db))
    assert len(streamed) == 40
    assert counts.documents_read == 40
    assert _reads_on_the_calling_thread(streams)
    assert not _reads_on_the_calling_thread(db)


def test_a_stream_stopped_half_way_leaves_the_client_usable(
    streams: firestore.Client, make_campaign: MakeCampaign
) -> None:
    campaign_id = make_campaign(codes=10)
    walk = stream_unassigned(streams, campaign_id=campaign_id, limit=100, low=0.0, high=1.0)
    first = next(walk)
    walk.close()  # the job's supply closes its queries so when it ends
    again = list(stream_unassigned(streams, campaign_id=campaign_id, limit=100))
    assert len(again) == 10
    assert first in again


def test_the_production_channel_reads_on_the_calling_thread_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No emulator: the library's own production channel (never connected here), plus the option.
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST")
    anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
    client = _CallingThreadStreams(project="demo-x", credentials=anonymous)
    assert _reads_on_the_calling_thread(client)
