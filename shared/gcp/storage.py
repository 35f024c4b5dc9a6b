"""Cloud Storage access: the imports bucket (streaming reads, generated CSVs, requests)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.storage import Client as StorageClient

READ_CHUNK_BYTES = 1 << 20


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
    try:
        with blob.open(
            "w", encoding="utf-8", content_type="text/csv", if_generation_match=0
        ) as writer:
            for line in lines:
                writer.write(line)
    except gexc.PreconditionFailed:
        return False
    return True


def write_json_if_absent(
    client: StorageClient, *, bucket: str, name: str, body: dict[str, Any]
) -> bool:
    blob = client.bucket(bucket).blob(name)
    try:
        blob.upload_from_string(
            json.dumps(body), content_type="application/json", if_generation_match=0
        )
    except gexc.PreconditionFailed:
        return False
    return True
