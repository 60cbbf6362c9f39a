"""Choosing and claiming whole partitions for heavy compaction."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta

from icefloe.compaction.manifest import CompactionManifest, PartitionGroup
from icefloe.metastore.store import MetaStore
from icefloe.settings.limits import DEFAULT_COMPACTION_LEASE
from icefloe.spec.reading import versions_lacking_generated

# Longer than a compaction job may run (the EMR job's run time limit must stay below it).


def claim_partitions(
    meta: MetaStore,
    table: str,
    *,
    partitions: Sequence[str] | None = None,
    lease: timedelta = DEFAULT_COMPACTION_LEASE,
    min_files: int = 2,
    job_id: str | None = None,
) -> CompactionManifest | None:
    """Claim every live file of each chosen partition (all of them, or ``partitions``), one
    claim per partition; partitions with fewer than ``min_files`` files, or with a file another
    job holds, are left out; a partition holding a file that lacks a generated column is
    claimed whatever its count (compacting it writes the column). Returns None when nothing
    was claimed."""
    live = meta.files(table, partitions=partitions)
    stale = versions_lacking_generated(meta.get_table(table).spec)
    by_partition: dict[str, list[int]] = {}
    backfill: set[str] = set()
    for f in live:
        by_partition.setdefault(f.partition_path, []).append(f.file_id)
        if f.spec_version in stale:
            backfill.add(f.partition_path)
    groups = []
    for partition, ids in sorted(by_partition.items()):
        if len(ids) < min_files and partition not in backfill:
            continue
        token = meta.claim_files(table, ids, lease=lease)
        if token is not None:
            groups.append(PartitionGroup(partition, tuple(sorted(ids)), token))
    if not groups:
        return None
    return CompactionManifest(
        job_id=job_id or f"compact-{uuid.uuid4().hex[:16]}", table=table, groups=tuple(groups)
    )
