"""What merged files look like inside: value-aligned row groups and what a point query reads."""

from __future__ import annotations

import itertools

import pyarrow.parquet as pq
import pytest

from icefloe.spec import SizeTargets
from support.merge_lake import Lake

pytestmark = pytest.mark.integration

KIB = 1024


def row_group_values(path: str, column: str) -> list[set[object]]:
    parquet = pq.ParquetFile(path)
    return [
        set(parquet.read_row_group(i, columns=[column]).column(column).to_pylist())
        for i in range(parquet.metadata.num_row_groups)
    ]


def test_each_row_group_key_value_lies_in_exactly_one_row_group(lake: Lake) -> None:
    # Given a table keyed by user_id with small row groups, merged from many inserts
    lake.create(
        row_group_by="user_id",
        sizes=SizeTargets(row_group_target_bytes=8 * KIB, min_files_to_merge=4),
    )
    lake.insert_batches("events", batches=8, rows=1500, days=1)
    lake.merge("events")
    (merged,) = lake.meta.files("events")

    # Then the file has many row groups, and each user's rows sit in one of them
    groups = row_group_values(lake.objects.uri(merged.path), "user_id")
    assert len(groups) > 5
    seen: dict[object, int] = {}
    for index, values in enumerate(groups):
        for value in values:
            assert value not in seen, f"{value!r} in row groups {seen[value]} and {index}"
            seen[value] = index
    assert len(seen) == 40
    # And the footer statistics say so, which is what readers prune on
    metadata = pq.read_metadata(lake.objects.uri(merged.path))
    position = metadata.schema.names.index("user_id")
    bounds = [
        (
            metadata.row_group(i).column(position).statistics.min,
            metadata.row_group(i).column(position).statistics.max,
        )
        for i in range(metadata.num_row_groups)
    ]
    assert all(high < low for (_, high), (low, _) in itertools.pairwise(bounds))


def test_a_point_query_on_the_key_reads_one_row_group_per_file(lake: Lake) -> None:
    lake.create(
        row_group_by="user_id",
        sizes=SizeTargets(row_group_target_bytes=8 * KIB, min_files_to_merge=4),
    )
    lake.insert_batches("events", batches=8, rows=1500, days=2)
    lake.merge("events")
    files = lake.meta.files("events")
    assert len(files) == 2
    for f in files:
        metadata = pq.read_metadata(lake.objects.uri(f.path))
        position = metadata.schema.names.index("user_id")
        matching = [
            i
            for i in range(metadata.num_row_groups)
            if metadata.row_group(i).column(position).statistics.min
            <= "u7"
            <= metadata.row_group(i).column(position).statistics.max
        ]
        assert len(matching) == 1 and metadata.num_row_groups > 5
    count = lake.rows("SELECT count(*) AS n FROM events WHERE user_id = 'u7'")[0]["n"]
    assert count > 0


def test_a_key_value_bigger_than_the_row_group_cap_gets_groups_of_its_own(lake: Lake) -> None:
    # Given a key whose rows pass row_group_max_rows
    lake.create(
        row_group_by="event",
        sizes=SizeTargets(row_group_max_rows=500, row_group_target_bytes=64 * KIB),
    )
    lake.insert_batches("events", batches=4, rows=1000, days=1)
    lake.merge("events")
    (merged,) = lake.meta.files("events")
    groups = row_group_values(lake.objects.uri(merged.path), "event")
    parquet = pq.ParquetFile(lake.objects.uri(merged.path))
    sizes = [parquet.metadata.row_group(i).num_rows for i in range(parquet.metadata.num_row_groups)]
    # Then no group passes the cap, and a split value shares its groups with no other value
    assert max(sizes) <= 500
    split = {v for g in groups if len(g) == 1 for v in g}
    for values in groups:
        if len(values) > 1:
            assert not values & split
