"""Idempotency keys, and the digests that tell a retried batch from another one under the
same key: of a batch as staged, and of an Arrow stream as read."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pyarrow as pa

from icefloe.errors import BatchRejectedError, InvalidInputError
from icefloe.ingest.sources import ArrowBatch, RowsBatch, StagedBatch

MAX_IDEMPOTENCY_KEY_CHARS = 512


def check_key(key: str) -> None:
    if not isinstance(key, str) or not key or len(key) > MAX_IDEMPOTENCY_KEY_CHARS or "\x00" in key:
        raise InvalidInputError(
            f"idempotency key must be a non-empty string of at most {MAX_IDEMPOTENCY_KEY_CHARS}"
            " characters, without NUL"
        )


def batch_digest(staged: StagedBatch | RowsBatch | ArrowBatch) -> str:
    """A digest of a batch's bytes as staged (rows are serialized the same way every time, and
    digested as their file, staged or not); of an Arrow table, its IPC stream (schema and
    values)."""
    digest = hashlib.blake2b(digest_size=16)
    if isinstance(staged, RowsBatch):
        for chunk in staged.text_chunks():
            digest.update(chunk)
        return f"{staged.staged_format}:{digest.hexdigest()}"
    if isinstance(staged, ArrowBatch):
        digest.update(_ipc_bytes(staged.table))
    else:
        with open(staged.path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return f"{staged.format}:{digest.hexdigest()}"


@dataclass
class StreamDigest:
    """A digest of an Arrow stream as read: its schema and each chunk's values, in order (the
    same rows cut into other batches digest differently)."""

    _hash: hashlib.blake2b = field(default_factory=lambda: hashlib.blake2b(digest_size=16))

    def update(self, table: pa.Table) -> None:
        self._hash.update(_ipc_bytes(table))

    def hexdigest(self) -> str:
        return f"arrow-stream:{self._hash.hexdigest()}"


def _ipc_bytes(table: pa.Table) -> pa.Buffer:
    """``table`` as an Arrow IPC stream (schema and values)."""
    sink = pa.BufferOutputStream()
    try:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    except pa.ArrowException as e:  # a type IPC cannot write (nested 64 levels, say)
        raise BatchRejectedError(
            f"batch refused: its Arrow schema cannot be written for its digest: {e}"
        ) from e
    return sink.getvalue()
