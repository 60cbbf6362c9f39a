"""Merge planning: which live files of each partition to merge together. Pure, no I/O.

Files below the target size are the candidates; claimed files (another merge holds them) and
files younger than the table's minimum age are not. Candidates are taken smallest first and cut
into groups of at most ``max_files_per_merge`` files and at most the target file size in bytes
(so a group becomes exactly one output file; a bigger backlog becomes several groups that
workers merge in parallel). A group is kept only if it holds at least ``min_files_to_merge``
files and its bytes are at least ``merge_size_ratio`` times its largest input's: every row then
moves to a file at least ``ratio`` times bigger whenever it is rewritten, so no row is rewritten
more than ``log_ratio(target / smallest file)`` times (ClickHouse's merge selector bounds write
amplification the same way). Files that fit no group wait for more of their size to arrive.

A file written at a spec version in ``backfill`` (one whose files lack a generated column of the
current spec, see :func:`icefloe.spec.reading.versions_lacking_generated`) is merged whatever
its size and age: one that fits no group above forms groups with its like (up to the file cap
and the group bytes; a file bigger than those alone), since merging is what writes the column.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from icefloe.errors import InvalidArgumentError
from icefloe.metastore.models import LiveFile
from icefloe.spec import SizeTargets

PartitionOrder = Literal["newest_first", "oldest_first"]


@dataclass(frozen=True, slots=True)
class MergeGroup:
    """Files of one partition to merge into as few target-sized files as they fill."""

    partition_path: str
    partition_start: datetime | None
    file_ids: tuple[int, ...]
    bytes: int
    rows: int


@dataclass(frozen=True, slots=True)
class MergePolicy:
    """The knobs of :func:`plan_partition`, read from a table's :class:`SizeTargets`."""

    target_file_bytes: int
    min_files: int
    max_files: int
    max_group_bytes: int  # min(target file size, the table's merge group cap)
    size_ratio: int
    min_age: timedelta

    @classmethod
    def from_sizes(cls, sizes: SizeTargets) -> MergePolicy:
        return cls(
            target_file_bytes=sizes.target_file_bytes,
            min_files=sizes.min_files_to_merge,
            max_files=sizes.max_files_per_merge,
            max_group_bytes=min(sizes.target_file_bytes, sizes.max_merge_group_bytes),
            size_ratio=sizes.merge_size_ratio,
            min_age=timedelta(seconds=sizes.min_file_age_seconds),
        )


def plan_partition(
    files: Iterable[LiveFile],
    *,
    policy: MergePolicy,
    now: datetime,
    backfill: Collection[int] = (),
) -> list[MergeGroup]:
    """Merge groups for the files of ONE partition (all ``files`` must share it)."""
    files = [f for f in files if not f.claimed]
    partitions = {f.partition_path for f in files}
    if len(partitions) > 1:
        raise InvalidArgumentError(f"plan_partition got files of {len(partitions)} partitions")
    eligible = sorted(
        (
            f
            for f in files
            if f.size_bytes < policy.target_file_bytes and now - f.created_at >= policy.min_age
        ),
        key=lambda f: (f.size_bytes, f.file_id),
    )
    groups = _tiered(eligible, policy)
    if backfill:
        grouped = {i for g in groups for i in g.file_ids}
        groups += _backfill(
            [f for f in files if f.spec_version in backfill and f.file_id not in grouped], policy
        )
    return groups


def _tiered(eligible: Sequence[LiveFile], policy: MergePolicy) -> list[MergeGroup]:
    groups: list[MergeGroup] = []
    current: list[LiveFile] = []
    current_bytes = 0
    for f in eligible:
        over_cap = (
            len(current) + 1 > policy.max_files
            or current_bytes + f.size_bytes > policy.max_group_bytes
        )
        # A valid group that this bigger file would make lopsided is closed before it: the
        # file starts the next tier. An invalid group keeps growing: bigger neighbours may yet
        # make it valid (the small files then ride along at little cost).
        breaks_ratio = current_bytes + f.size_bytes < policy.size_ratio * f.size_bytes
        if current and (over_cap or (breaks_ratio and _valid(current, current_bytes, policy))):
            if _valid(current, current_bytes, policy):
                groups.append(_group(current, current_bytes))
            current, current_bytes = [], 0
        current.append(f)
        current_bytes += f.size_bytes
    if current and _valid(current, current_bytes, policy):
        groups.append(_group(current, current_bytes))
    return groups


def _backfill(stale: Sequence[LiveFile], policy: MergePolicy) -> list[MergeGroup]:
    """``stale`` files (smallest first) cut into groups by the file cap and the group bytes
    only."""
    groups: list[MergeGroup] = []
    current: list[LiveFile] = []
    current_bytes = 0
    for f in sorted(stale, key=lambda f: (f.size_bytes, f.file_id)):
        if current and (
            len(current) + 1 > policy.max_files
            or current_bytes + f.size_bytes > policy.max_group_bytes
        ):
            groups.append(_group(current, current_bytes))
            current, current_bytes = [], 0
        current.append(f)
        current_bytes += f.size_bytes
    if current:
        groups.append(_group(current, current_bytes))
    return groups


def plan_table(
    files: Iterable[LiveFile],
    *,
    policy: MergePolicy,
    now: datetime,
    order: PartitionOrder = "newest_first",
    backfill: Collection[int] = (),
) -> list[MergeGroup]:
    """Merge groups of every partition, newest partitions first (or oldest first).

    Partitions are ordered by their period start (partitions without one last), then by path.
    """
    by_partition: dict[str, list[LiveFile]] = {}
    for f in files:
        by_partition.setdefault(f.partition_path, []).append(f)
    groups = [
        group
        for part in by_partition.values()
        for group in plan_partition(part, policy=policy, now=now, backfill=backfill)
    ]
    newest = order == "newest_first"
    dated = sorted(
        (g for g in groups if g.partition_start is not None),
        key=lambda g: (g.partition_start, g.partition_path),
        reverse=newest,
    )
    undated = sorted(
        (g for g in groups if g.partition_start is None),
        key=lambda g: g.partition_path,
        reverse=newest,
    )
    return dated + undated


def _valid(files: Sequence[LiveFile], total: int, policy: MergePolicy) -> bool:
    largest = max(f.size_bytes for f in files)
    return len(files) >= policy.min_files and total >= policy.size_ratio * largest


def _group(files: Sequence[LiveFile], total: int) -> MergeGroup:
    return MergeGroup(
        partition_path=files[0].partition_path,
        partition_start=files[0].partition_start,
        file_ids=tuple(sorted(f.file_id for f in files)),
        bytes=total,
        rows=sum(f.row_count for f in files),
    )
