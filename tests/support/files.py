"""Builders of file records for meta store tests."""

from __future__ import annotations

from datetime import datetime

from icefloe.metastore.models import ColumnStats, NewFile

DAY = datetime(2026, 11, 22)


def new_file(name: str, *, day: datetime = DAY, rows: int = 10, size: int = 1000) -> NewFile:
    """A file record of the ``events`` table in the ``day`` partition (no object behind it)."""
    return NewFile(
        path=f"events/data/day={day:%Y-%m-%d}/{name}.parquet",
        partition_path=f"day={day:%Y-%m-%d}",
        partition_values={"day": day.strftime("%Y-%m-%d")},
        partition_start=day,
        size_bytes=size,
        row_count=rows,
        row_group_count=1,
        column_stats={"ts": ColumnStats(min=day.isoformat(), max=day.isoformat(), null_count=0)},
    )
