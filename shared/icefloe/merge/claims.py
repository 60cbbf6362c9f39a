"""Whether a job may still merge the files it was given."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from icefloe.metastore.models import DataFile


def claim_problem(
    *,
    file_ids: Sequence[int],
    partition_path: str,
    claim_token: uuid.UUID,
    inputs: Sequence[DataFile],
) -> str | None:
    """Why a merge or compaction may not run, or None if every input is live and still claimed
    under ``claim_token`` (the rows of ``file_ids`` as the meta store has them now)."""
    found = {f.file_id for f in inputs}
    missing = sorted(set(file_ids) - found)
    if missing:
        return f"input file {missing[0]} does not exist"
    for f in inputs:
        if f.partition_path != partition_path:
            return f"input file {f.file_id} is in partition {f.partition_path!r}"
        if f.end_snapshot is not None:
            return f"input file {f.file_id} was removed by snapshot {f.end_snapshot}"
        if f.claim_token != claim_token:
            return f"input file {f.file_id} is no longer claimed by this job"
    return None
