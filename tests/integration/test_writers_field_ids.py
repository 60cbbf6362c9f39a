"""Every writer's files carry the field ids of the spec version they were written at: insert,
the merge worker in each mode, a delete's rewrite, and files written after a schema change."""

from __future__ import annotations

import pytest

from icefloe.lifecycle import alter_table, delete_rows
from icefloe.lifecycle.alter import add_column, drop_column, rename_column
from icefloe.spec import TableSpec
from support.field_ids import expected_field_ids, file_field_ids
from support.merge_lake import Lake


def assert_files_carry_their_versions_ids(lake: Lake, table: str = "events") -> set[int]:
    """Check every live file of ``table``; return the spec versions they were written at."""
    spec = lake.meta.get_table(table).spec
    versions = set()
    files = lake.meta.files(table)
    assert files
    for f in files:
        expected = expected_field_ids(spec.layout_at(f.spec_version))
        assert file_field_ids(lake.objects.root / f.path) == expected, f.path
        versions.add(f.spec_version)
    return versions


@pytest.mark.parametrize(
    "merge",
    ["append", "replace(user_id; version=ts)", "aggregate(user_id, event; ts:max, properties:any)"],
)
def test_inserted_merged_and_rewritten_files_carry_field_ids(lake: Lake, merge: str) -> None:
    lake.create(merge=merge, row_group_by="user_id")
    lake.insert_batches("events", batches=5, rows=60, days=2)
    assert_files_carry_their_versions_ids(lake)
    report = lake.merge("events")
    assert report.count("committed") > 0
    assert_files_carry_their_versions_ids(lake)
    deleted = delete_rows(
        meta=lake.meta, objects=lake.objects, table="events", where="user_id = 'u3'"
    )
    assert deleted.rows_deleted > 0 and deleted.files_rewritten > 0
    assert_files_carry_their_versions_ids(lake)


def test_files_written_after_a_schema_change_carry_the_new_version_s_ids(lake: Lake) -> None:
    spec: TableSpec = lake.create()
    lake.insert_batches("events", batches=3, rows=50, days=1)
    alter_table(
        meta=lake.meta,
        table="events",
        changes=[rename_column("user_id=uid"), drop_column("properties"), add_column("n BIGINT")],
    )
    lake.inserter.insert_rows("events", [{"ts": "2026-03-01T05:00:00", "event": "e", "n": 1}])
    assert assert_files_carry_their_versions_ids(lake) == {1, 2}
    after = lake.meta.get_table("events").spec
    # the renamed column keeps its id under its new name; the added one takes the next id
    assert after.column_id("uid") == spec.column_id("user_id") == 3
    assert after.column_id("n") == spec.last_column_id + 1
    lake.merge("events")
    assert assert_files_carry_their_versions_ids(lake) == {2}
