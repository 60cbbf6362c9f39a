"""The merge message: one claimed group of files, as versioned JSON on the merge queue.

Messages carry ids, not file lists with paths: a group of 100 files is about 1.5 KB, far under
SQS's 256 KB limit, and the worker reads the current truth from the meta store anyway.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from icefloe.errors import InvalidInputError

MESSAGE_VERSION = 1
_KEYS = frozenset({"version", "kind", "table", "partition", "file_ids", "claim_token"})


class InvalidMergeMessageError(InvalidInputError):
    """A merge queue message that is not a version-1 merge task; it names the field at fault."""


@dataclass(frozen=True, slots=True)
class MergeTask:
    """Merge ``file_ids`` (one partition of ``table``) under the claim ``claim_token``."""

    table: str
    partition_path: str
    file_ids: tuple[int, ...]
    claim_token: uuid.UUID

    @property
    def idempotency_key(self) -> str:
        """The key the worker commits under: a redelivered task finds its earlier commit."""
        return f"merge:{self.claim_token}"

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": MESSAGE_VERSION,
                "kind": "merge",
                "table": self.table,
                "partition": self.partition_path,
                "file_ids": list(self.file_ids),
                "claim_token": str(self.claim_token),
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, body: str) -> MergeTask:
        """Parse a message body; :class:`InvalidMergeMessageError` names what is wrong."""
        try:
            data = json.loads(body)
        except (TypeError, ValueError) as e:
            raise InvalidMergeMessageError(f"merge message is not JSON: {e}") from e
        if not isinstance(data, dict):
            raise InvalidMergeMessageError("merge message must be a JSON object")
        version = data.get("version")
        if version != MESSAGE_VERSION or isinstance(version, bool):
            raise InvalidMergeMessageError(
                f"merge message 'version' is {version!r}; this worker reads {MESSAGE_VERSION}"
            )
        unknown = sorted(set(data) - _KEYS)
        if unknown:
            raise InvalidMergeMessageError(f"merge message has unknown keys {unknown}")
        if data.get("kind") != "merge":
            raise InvalidMergeMessageError(f"merge message 'kind' is {data.get('kind')!r}")
        table, partition = data.get("table"), data.get("partition")
        if not isinstance(table, str) or not table:
            raise InvalidMergeMessageError("merge message 'table' must be a non-empty string")
        if not isinstance(partition, str):
            raise InvalidMergeMessageError("merge message 'partition' must be a string")
        ids = data.get("file_ids")
        if (
            not isinstance(ids, list)
            or not ids
            or not all(isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids)
            or len(set(ids)) != len(ids)
        ):
            raise InvalidMergeMessageError(
                "merge message 'file_ids' must be a non-empty list of distinct positive integers"
            )
        try:
            token = uuid.UUID(str(data.get("claim_token")))
        except ValueError as e:
            raise InvalidMergeMessageError("merge message 'claim_token' is not a UUID") from e
        return cls(table=table, partition_path=partition, file_ids=tuple(ids), claim_token=token)
