"""Rows of the meta store as models, shared by its parts: the columns a file or snapshot is
read with, how such a row becomes a :class:`DataFile`, :class:`Snapshot` or
:class:`TableInfo`, a stored spec document as a :class:`TableSpec`, and the statement that
records a snapshot."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from icefloe.metastore.models import ColumnStats, DataFile, Snapshot, TableInfo
from icefloe.spec import TableSpec

# What data_file() reads.
FILE_COLUMNS = """
    file_id, path, partition_path, partition_values, partition_start, size_bytes, row_count,
    row_group_count, column_stats, begin_snapshot, end_snapshot, created_at, claim_token,
    coalesce(claim_token IS NOT NULL AND claim_expires_at > now(), false), copy_of,
    spec_version
"""
# The same columns without the statistics, for readers that do not use them (data_file()
# gives such a row empty column_stats): parsing them is most of the cost of reading a row.
FILE_COLUMNS_WITHOUT_STATS = FILE_COLUMNS.replace("column_stats", "NULL::jsonb")
# What snapshot_of() reads.
SNAPSHOT_COLUMNS = """
    snapshot_id, parent_id, operation, committed_at, idempotency_key, files_added, files_removed,
    rows_added, rows_removed, bytes_added, bytes_removed, expired_at IS NOT NULL, batch_digest,
    rolled_back_to, spec_version
"""
# Records a snapshot (what an alter or a stepwise commit adds).
INSERT_SNAPSHOT = """
    INSERT INTO snapshots (table_id, snapshot_id, parent_id, operation, idempotency_key,
        files_added, files_removed, rows_added, rows_removed, bytes_added, bytes_removed,
        batch_digest, rolled_back_to, spec_version)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""


def table_info(row: Sequence[Any]) -> TableInfo:
    return TableInfo(
        table_id=int(row[0]),
        name=str(row[1]),
        spec=spec_of(row[2]),
        head_snapshot_id=int(row[3]),
        created_at=row[4],
    )


_SPECS: dict[str, TableSpec] = {}
_SPECS_KEPT = 256


def spec_of(stored: Mapping[str, Any]) -> TableSpec:
    """The spec of a stored document; a document seen before is not parsed again (every query
    reads its tables' specs)."""
    key = json.dumps(stored, sort_keys=True)
    spec = _SPECS.get(key)
    if spec is None:
        spec = TableSpec.from_dict(stored)
        if len(_SPECS) >= _SPECS_KEPT:
            _SPECS.clear()
        _SPECS[key] = spec
    return spec


def snapshot_of(row: Sequence[Any]) -> Snapshot:
    return Snapshot(
        snapshot_id=int(row[0]),
        parent_id=None if row[1] is None else int(row[1]),
        operation=row[2],
        committed_at=row[3],
        idempotency_key=row[4],
        files_added=int(row[5]),
        files_removed=int(row[6]),
        rows_added=int(row[7]),
        rows_removed=int(row[8]),
        bytes_added=int(row[9]),
        bytes_removed=int(row[10]),
        expired=bool(row[11]),
        batch_digest=row[12],
        rolled_back_to=None if row[13] is None else int(row[13]),
        spec_version=int(row[14]),
    )


def data_file(row: Sequence[Any]) -> DataFile:
    stats: Mapping[str, Any] = row[8] or {}
    return DataFile(
        file_id=int(row[0]),
        path=str(row[1]),
        partition_path=str(row[2]),
        partition_values=row[3],
        partition_start=row[4],
        size_bytes=int(row[5]),
        row_count=int(row[6]),
        row_group_count=int(row[7]),
        column_stats=_column_stats(stats),
        begin_snapshot=int(row[9]),
        end_snapshot=None if row[10] is None else int(row[10]),
        created_at=row[11],
        claim_token=row[12],
        claimed=bool(row[13]),
        copy_of=None if row[14] is None else int(row[14]),
        spec_version=int(row[15]),
    )


def _column_stats(value: Mapping[str, Any] | None) -> dict[str, ColumnStats]:
    return {name: ColumnStats.from_json(v) for name, v in (value or {}).items() if v is not None}
