"""The compaction job manifest: which claimed files of which partitions one job compacts.

Written to the object store before the job starts (``<table>/jobs/<job id>.json``, outside the
data prefix the orphan sweep lists) and read by the job's driver, so the job's arguments stay
small and the claims it must honour are explicit.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

from icefloe.errors import InvalidInputError

MANIFEST_VERSION = 1


class InvalidManifestError(InvalidInputError):
    """A manifest that is not a version-1 compaction manifest; it names the field at fault."""


@dataclass(frozen=True, slots=True)
class PartitionGroup:
    """All claimed files of one partition, committed together by the job."""

    partition_path: str
    file_ids: tuple[int, ...]
    claim_token: uuid.UUID

    @property
    def idempotency_key(self) -> str:
        return f"compact:{self.claim_token}"


@dataclass(frozen=True, slots=True)
class CompactionManifest:
    job_id: str
    table: str
    groups: tuple[PartitionGroup, ...] = field(default=())

    @property
    def key(self) -> str:
        """Where the manifest lives in the object store."""
        return f"{self.table}/jobs/{self.job_id}.json"

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": MANIFEST_VERSION,
                "job_id": self.job_id,
                "table": self.table,
                "groups": [
                    {
                        "partition": g.partition_path,
                        "file_ids": list(g.file_ids),
                        "claim_token": str(g.claim_token),
                    }
                    for g in self.groups
                ],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> CompactionManifest:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise InvalidManifestError(f"compaction manifest is not JSON: {e}") from e
        if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
            raise InvalidManifestError(f"compaction manifest 'version' must be {MANIFEST_VERSION}")
        job_id, table, groups = data.get("job_id"), data.get("table"), data.get("groups")
        if not isinstance(job_id, str) or not job_id:
            raise InvalidManifestError("compaction manifest 'job_id' must be a string")
        if not isinstance(table, str) or not table:
            raise InvalidManifestError("compaction manifest 'table' must be a string")
        if not isinstance(groups, list) or not groups:
            raise InvalidManifestError("compaction manifest 'groups' must be a non-empty list")
        parsed = []
        for n, item in enumerate(groups):
            where = f"compaction manifest groups[{n}]"
            if not isinstance(item, dict):
                raise InvalidManifestError(f"{where} must be an object")
            ids = item.get("file_ids")
            if (
                not isinstance(ids, list)
                or not ids
                or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
            ):
                raise InvalidManifestError(f"{where}.file_ids must be a list of integers")
            partition = item.get("partition")
            if not isinstance(partition, str):
                raise InvalidManifestError(f"{where}.partition must be a string")
            try:
                token = uuid.UUID(str(item.get("claim_token")))
            except ValueError as e:
                raise InvalidManifestError(f"{where}.claim_token is not a UUID") from e
            parsed.append(PartitionGroup(partition, tuple(ids), token))
        return cls(job_id=job_id, table=table, groups=tuple(parsed))
