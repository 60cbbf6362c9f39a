"""Iceberg partition values of identity-partitioned timestamps are exact microseconds, so an
Iceberg reader's partition pruning keeps every matching file, far from 1970 too."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from icefloe.iceberg import NAMESPACE, local_catalog, publish_iceberg
from support.merge_lake import Lake

pytestmark = pytest.mark.integration

# Through a float (`timestamp() * 1e6`) the first two are a microsecond off: 2500 and 1600.
MOMENTS = ("2500-01-01T00:00:00.000001", "1600-01-01T00:00:00.000007", "2026-01-01T00:00:00.000001")


@pytest.mark.parametrize("column_type", ["TIMESTAMP", "TIMESTAMPTZ"])
def test_an_identity_partition_on_a_timestamp_far_from_1970_keeps_its_rows_for_iceberg_readers(
    lake: Lake, tmp_path: Path, column_type: str
) -> None:
    # Given a table partitioned by its timestamp itself, one row per moment
    lake.create(schema=f"ts {column_type} NOT NULL, n BIGINT", partition_by="ts", sort_by="")
    lake.inserter.insert_rows("events", [{"ts": m, "n": i} for i, m in enumerate(MOMENTS)])

    # When it is published
    publish_iceberg(
        meta=lake.meta, objects=lake.objects, table="events", catalog=local_catalog(tmp_path)
    )

    # Then each file's partition value is its moment in exact microseconds since 1970
    table = local_catalog(tmp_path).load_table((NAMESPACE, "events"))
    epoch = datetime(1970, 1, 1)
    exact = {(datetime.fromisoformat(m) - epoch) // _MICROSECOND for m in MOMENTS}
    assert {task.file.partition[0] for task in table.scan().plan_files()} == exact
    # And pyiceberg's scan filtered on each moment finds its row
    for n, moment in enumerate(MOMENTS):
        suffix = "+00:00" if column_type == "TIMESTAMPTZ" else ""
        found = table.scan(row_filter=f"ts == '{moment}{suffix}'").to_arrow()
        assert found.column("n").to_pylist() == [n], moment


_MICROSECOND = datetime(1970, 1, 1, 0, 0, 0, 1) - datetime(1970, 1, 1)
