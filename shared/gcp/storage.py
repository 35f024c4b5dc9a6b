"""Cloud Storage access: the imports bucket (streaming reads, generated CSVs, requests, results
of assignment jobs)."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

from google.api_core import exceptions as gexc
from google.cloud.storage import Client as StorageClient

__all__ = ["StorageClient"]

READ_CHUNK_BYTES = 1 << 20
# What a streamed upload holds in memory before sending it (a multiple of 256 KiB; the library's
# default is 40 MiB, which would make a writer's memory grow with the file up to that size).
WRITE_CHUNK_BYTES = 1 << 20


def make_client(project_id: str) -> StorageClient:
    # With STORAGE_EMULATOR_HOST set the client talks to the emulator, anonymously.
    return StorageClient(project=project_id)


def object_chunks(
    client: StorageClient, *, bucket: str, name: str, generation: str | None
) -> Iterator[bytes]:
    """The object's bytes, 1 MiB per read (never a line or a byte at a time); the exact
    generation that was uploaded."""
    blob = client.bucket(bucket).blob(name, generation=int(generation) if generation else None)
    with blob.open("rb", chunk_size=READ_CHUNK_BYTES) as reader:
        while chunk := reader.read(READ_CHUNK_BYTES):
            yield chunk


def stream_object(client: StorageClient, *, bucket: str, name: str) -> Iterator[bytes]:
    """An object's bytes for an HTTP answer, 1 MiB at a time: the first chunk is read before
    this returns, so a missing object fails here, not halfway through the answer."""
    chunks = object_chunks(client, bucket=bucket, name=name, generation=None)
    first = next(chunks, b"")
    return itertools.chain([first], chunks)


def write_lines_if_absent(
    client: StorageClient,
    *,
    bucket: str,
    name: str,
    lines: Iterable[str],
    metadata: dict[str, str],
) -> bool:
    """Stream a text object; False when it already exists (a repeated call wrote it)."""
    blob = client.bucket(bucket).blob(name)
    blob.metadata = metadata

    def write() -> None:
        with blob.open(
            "w", encoding="utf-8", content_type="text/csv", if_generation_match=0
        ) as writer:
            for line in lines:
                writer.write(line)

    return _created(write)


def write_json_if_absent(
    client: StorageClient, *, bucket: str, name: str, body: dict[str, Any]
) -> bool:
    blob = client.bucket(bucket).blob(name)
    return _created(
        lambda: blob.upload_from_string(
            json.dumps(body), content_type="application/json", if_generation_match=0
        )
    )


def _created(write: Callable[[], object]) -> bool:
    """Run a write made only if the object does not exist (if_generation_match=0): False when
    it did."""
    try:
        write()
    except gexc.PreconditionFailed:
        return False
    return True


def open_text_writer(
    client: StorageClient, *, bucket: str, name: str, metadata: dict[str, str]
) -> TextIO:
    """A text object streamed 1 MiB at a time (newline="" for the csv module); the object
    exists once the writer is closed."""
    blob = client.bucket(bucket).blob(name)
    blob.metadata = metadata
    writer: TextIO = blob.open(
        "w",
        chunk_size=WRITE_CHUNK_BYTES,
        encoding="utf-8",
        newline="",
        content_type="text/csv",
    )
    return writer


def open_upload_session(
    client: StorageClient,
    *,
    bucket: str,
    name: str,
    content_type: str,
    origin: str | None,
    metadata: dict[str, str],
) -> str:
    """A resumable upload session for `name` (Cloud Storage's browser-upload pattern): whoever
    holds the returned URL may PUT the object's bytes to it, for a week, without credentials.
    With `origin`, Cloud Storage answers the session's requests with CORS for that origin."""
    blob = client.bucket(bucket).blob(name)
    blob.metadata = metadata
    url: str = blob.create_resumable_upload_session(content_type=content_type, origin=origin)
    return url


def move_object(client: StorageClient, *, bucket: str, source: str, destination: str) -> int:
    """Copy `source` to `destination` inside the bucket (server side, whatever the size), then
    delete `source`; the new object's generation."""
    handle = client.bucket(bucket)
    target = handle.blob(destination)
    token, _, _ = target.rewrite(handle.blob(source))
    while token is not None:
        token, _, _ = target.rewrite(handle.blob(source), token=token)
    delete_if_exists(client, bucket=bucket, name=source)
    return int(target.generation or 0)


def delete_if_exists(client: StorageClient, *, bucket: str, name: str) -> None:
    with contextlib.suppress(gexc.NotFound):
        client.bucket(bucket).blob(name).delete()
