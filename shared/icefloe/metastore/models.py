"""Typed records the meta store reads and writes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple, TypeAlias
from uuid import UUID

from icefloe.spec import TableSpec

JsonScalar: TypeAlias = str | int | float | bool | None
Operation = Literal["append", "replace", "delete", "rollback", "alter"]


@dataclass(frozen=True, slots=True)
class ColumnStats:
    """Per-column statistics of one file, taken from its Parquet footer (JSON-safe values)."""

    min: JsonScalar = None
    max: JsonScalar = None
    null_count: int = 0
    # A membership filter of the file's distinct values (see icefloe.membership), if written.
    membership: str | None = None

    def to_json(self) -> dict[str, JsonScalar]:
        out: dict[str, JsonScalar] = {
            "min": self.min,
            "max": self.max,
            "null_count": self.null_count,
        }
        if self.membership is not None:
            out["membership"] = self.membership
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, JsonScalar]) -> ColumnStats:
        nulls = value.get("null_count", 0)
        membership = value.get("membership")
        return cls(
            min=value.get("min"),
            max=value.get("max"),
            null_count=int(nulls or 0),
            membership=membership if isinstance(membership, str) else None,
        )


@dataclass(frozen=True, slots=True)
class NewFile:
    """A Parquet object already written to the store, to be added by a commit."""

    path: str
    partition_path: str
    size_bytes: int
    row_count: int
    row_group_count: int = 1
    partition_values: Mapping[str, JsonScalar] = field(default_factory=dict)
    partition_start: datetime | None = None
    column_stats: Mapping[str, ColumnStats] = field(default_factory=dict)
    copy_of: int | None = None  # a rollback's copy: the id of the file it restores
    # The version of the table's spec the file was written at: which columns it holds, under
    # which names (see icefloe.spec.layout).
    spec_version: int = 1

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe form (a delete part keeps its rewrites so until the job commits)."""
        return {
            "path": self.path,
            "partition_path": self.partition_path,
            "size_bytes": self.size_bytes,
            "row_count": self.row_count,
            "row_group_count": self.row_group_count,
            "partition_values": dict(self.partition_values),
            "partition_start": None
            if self.partition_start is None
            else self.partition_start.isoformat(),
            "column_stats": {name: s.to_json() for name, s in self.column_stats.items()},
            "copy_of": self.copy_of,
            "spec_version": self.spec_version,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> NewFile:
        start = value.get("partition_start")
        return cls(
            path=str(value["path"]),
            partition_path=str(value["partition_path"]),
            size_bytes=int(value["size_bytes"]),
            row_count=int(value["row_count"]),
            row_group_count=int(value["row_group_count"]),
            partition_values=dict(value.get("partition_values") or {}),
            partition_start=None if start is None else datetime.fromisoformat(str(start)),
            column_stats={
                name: ColumnStats.from_json(s)
                for name, s in (value.get("column_stats") or {}).items()
            },
            copy_of=None if value.get("copy_of") is None else int(value["copy_of"]),
            spec_version=int(value.get("spec_version", 1)),
        )


class LiveFile(NamedTuple):
    """What planning merges needs of a live file (the merge planner's input): :class:`DataFile`
    without its statistics (a table in a merge backlog may hold 10^5 live files, and decoding
    their statistics took ten times as long as the rest of the listing)."""

    file_id: int
    partition_path: str
    partition_start: datetime | None
    size_bytes: int
    row_count: int
    created_at: datetime
    claimed: bool = False  # a merge holds it under an unexpired lease (the database's clock)
    spec_version: int = 1  # the spec version it was written at


@dataclass(frozen=True, slots=True)
class FileListing:
    """The files a query reads of a snapshot, as columns (the nth entry of each is the nth
    file), and how many live files the time window and partition values left to consider
    before their statistics were.

    Columns, not an object per file: a plan may list 10^5 files, and 10^5 new objects cost a
    query more in the garbage collector's passes over them than the listing itself."""

    paths: tuple[str, ...]
    sizes: tuple[int, ...]
    row_counts: tuple[int, ...]
    spec_versions: tuple[int, ...]
    considered: int


@dataclass(frozen=True, slots=True)
class DataFile:
    """A file row: which snapshots see it (``begin <= S`` and ``end`` null or ``> S``)."""

    file_id: int
    path: str
    partition_path: str
    partition_values: Mapping[str, JsonScalar]
    partition_start: datetime | None
    size_bytes: int
    row_count: int
    row_group_count: int
    column_stats: Mapping[str, ColumnStats]
    begin_snapshot: int
    end_snapshot: int | None
    created_at: datetime | None = None
    claim_token: UUID | None = None
    claimed: bool = False  # a merge holds it under an unexpired lease (by the database's clock)
    copy_of: int | None = None  # a rollback's copy: the id of the file it restores
    spec_version: int = 1  # the table spec's version the file was written at

    @property
    def origin(self) -> int:
        """The file this one's content first came as (itself, unless it is a restored copy)."""
        return self.file_id if self.copy_of is None else self.copy_of


@dataclass(frozen=True, slots=True)
class ChangedFiles:
    """The files whose liveness differs between two snapshots of a table (what a change feed
    reads): live at ``until`` only (added), live at ``since`` only (removed), and live only
    strictly between (passed: added and removed again, such as a merge's input)."""

    since: int
    until: int
    spec_version: int  # of ``until``: the schema the changes are read in
    added: tuple[DataFile, ...]
    removed: tuple[DataFile, ...]
    passed: tuple[DataFile, ...]


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A registered table: its spec and its head snapshot (0 before the first commit)."""

    table_id: int
    name: str
    spec: TableSpec
    head_snapshot_id: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One committed change of a table."""

    snapshot_id: int
    parent_id: int | None
    operation: Operation
    committed_at: datetime
    idempotency_key: str | None
    files_added: int
    files_removed: int
    rows_added: int
    rows_removed: int
    bytes_added: int
    bytes_removed: int
    expired: bool = False
    # A digest of the batch committed under the idempotency key (None for other snapshots).
    batch_digest: str | None = None
    # The snapshot whose files a rollback restored (None for other operations).
    rolled_back_to: int | None = None
    # The version of the table's spec a read of this snapshot uses.
    spec_version: int = 1


@dataclass(frozen=True, slots=True)
class SpecCommit:
    """A new spec version committed: the snapshot that records it, and the spec."""

    table: str
    snapshot_id: int
    spec: TableSpec


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a commit did. ``committed`` is False when the idempotency key had been used already:
    then ``snapshot_id`` is the earlier snapshot and nothing was added."""

    table: str
    snapshot_id: int
    committed: bool
    files_added: int
    files_removed: int
    rows_added: int


@dataclass(frozen=True, slots=True)
class TableStatus:
    """Size of a table at its head snapshot."""

    table: str
    head_snapshot_id: int
    live_files: int
    partitions: int
    rows: int
    bytes: int
    claimed_files: int
    # When the last live claim runs out (None: no file is claimed).
    claimed_until: datetime | None = None


# Upper bounds of the file-size buckets of a partition's shape: 64 KiB, 256 KiB, ... 256 MiB,
# and one bucket above the last.
FILE_SIZE_BUCKETS: tuple[int, ...] = tuple(64 * 1024 * 4**n for n in range(7))


@dataclass(frozen=True, slots=True)
class PartitionShape:
    """A partition's live files at the head: how many, their rows and bytes, and how many
    fall in each of :data:`FILE_SIZE_BUCKETS` (the last count: above the largest bound)."""

    partition_path: str
    files: int
    rows: int
    bytes: int
    size_buckets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RollbackPlan:
    """How to make a table's live files those of an earlier snapshot, as read at one head."""

    table: str
    table_id: int
    head_snapshot_id: int
    target_snapshot_id: int
    keep: tuple[DataFile, ...]  # live now and at the target
    remove: tuple[DataFile, ...]  # live now, not at the target
    restore: tuple[DataFile, ...]  # live at the target, no longer now: copied back

    @property
    def changes_nothing(self) -> bool:
        return not self.remove and not self.restore
