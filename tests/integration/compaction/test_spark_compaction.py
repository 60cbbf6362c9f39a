"""Heavy compaction on local Spark (one shared session): the same answers as the merge
worker on the same input, value-aligned row groups, one snapshot per partition, and a conflict
on one partition that leaves the others committed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pyarrow.parquet as pq
import pytest

from icefloe.compaction import (
    SparkMergeUnsupportedError,
    claim_partitions,
    compact_with_spark,
)
from icefloe.compaction.manifest import CompactionManifest
from icefloe.config import WarehouseLocation
from icefloe.lifecycle import alter_table
from icefloe.lifecycle.alter import add_column, drop_column, rename_column
from icefloe.metastore.models import NewFile
from icefloe.runtime import Runtime
from icefloe.sample_events import sample_events
from icefloe.settings import load_settings
from icefloe.spark import read_table
from icefloe.spec import SizeTargets
from icefloe.tracing import use_tracer
from support.engines import spark_compact
from support.field_ids import expected_field_ids, file_field_ids
from support.hooked_meta import HookedMetaStore, PendingCommit
from support.merge_lake import START, Lake

pytestmark = pytest.mark.integration

KIB = 1024
ALL_ROWS = "SELECT * EXCLUDE (properties), properties::VARCHAR AS properties FROM {table}"


def rows_of(
    lake: Lake, table: str, snapshot_id: int | None = None, *, sql: str = ALL_ROWS
) -> Counter[tuple[Any, ...]]:
    rows = lake.engine.query(sql.format(table=table), snapshot_id=snapshot_id).rows
    return Counter(tuple(r.values()) for r in rows.to_pylist())


def clone(lake: Lake, source: str, target: str) -> None:
    """Register copies of ``source``'s live files under ``target`` (same rows, same ids)."""
    files = []
    for f in lake.meta.files(source):
        key = f.path.replace(f"{source}/", f"{target}/", 1)
        lake.objects.put(key, lake.objects.get(f.path))
        files.append(
            NewFile(
                path=key,
                partition_path=f.partition_path,
                partition_values=f.partition_values,
                partition_start=f.partition_start,
                size_bytes=f.size_bytes,
                row_count=f.row_count,
                row_group_count=f.row_group_count,
                column_stats=f.column_stats,
            )
        )
    lake.meta.commit_append(target, files=files)


@pytest.mark.parametrize(
    "merge",
    [
        "append",
        "replace(user_id; version=ts)",
        "aggregate(user_id, event; ts:max, properties:any)",
    ],
)
def test_spark_gives_the_same_rows_as_the_merge_worker_on_the_same_input(
    lake: Lake, spark: Any, merge: str
) -> None:
    # Given two tables holding the very same files (3 days, 6 inserts)
    for name in ("by_spark", "by_worker"):
        lake.create(name=name, merge=merge, sizes=SizeTargets(min_files_to_merge=2))
    if "any" in merge:  # a file whose properties are all NULL (the largest: read first)
        nulls = sample_events(3000, days=3, start=START, users=40, seed=1)
        lake.inserter.insert_rows("by_spark", [{**e, "properties": None} for e in nulls])
    lake.insert_batches("by_spark", batches=6, rows=300, days=3)
    clone(lake, "by_spark", "by_worker")
    before = rows_of(lake, "by_spark")
    pinned = lake.meta.get_table("by_spark").head_snapshot_id

    # When Spark compacts one and the merge worker merges the other
    result = spark_compact(lake, spark, "by_spark")
    lake.merge("by_worker")

    # Then both hold the same rows, one file per partition, one snapshot per partition
    assert result.count("committed") == 3
    # ('any' picks any one value: compare the deterministic columns of aggregated rows)
    sql = ALL_ROWS if "any" not in merge else "SELECT user_id, event, ts, _row_id FROM {table}"
    assert rows_of(lake, "by_spark", sql=sql) == rows_of(lake, "by_worker", sql=sql)
    if "any" in merge:
        # ('any' keeps one of the group's non-NULL values, NULL only when all are NULL)
        group = "SELECT ts::DATE AS day, user_id, event, properties::VARCHAR AS p FROM {table}"
        values: dict[tuple[Any, ...], set[Any]] = {}
        for row in lake.rows(group.format(table="by_spark"), snapshot_id=pinned):
            key = (row["day"], row["user_id"], row["event"])
            values.setdefault(key, set()).update([row["p"]] if row["p"] is not None else [])
        merged = lake.rows(group.format(table="by_spark"))
        assert len(merged) == len(values)
        for row in merged:
            held = values[(row["day"], row["user_id"], row["event"])]
            assert row["p"] in held if held else row["p"] is None, row
    assert len(lake.meta.files("by_spark")) == 3
    replaces = [s for s in lake.meta.snapshots("by_spark") if s.operation == "replace"]
    assert len(replaces) == 3 and all(s.files_added == 1 for s in replaces)
    if merge == "append":
        assert rows_of(lake, "by_spark") == before
    else:
        assert sum(rows_of(lake, "by_spark").values()) < sum(before.values())
    # And the pre-compaction snapshot still reads the small files
    assert rows_of(lake, "by_spark", snapshot_id=pinned) == before


def test_spark_keeps_the_rows_of_a_group_whose_sum_leaves_its_type_as_the_worker_does(
    lake: Lake, spark: Any
) -> None:
    # Given an aggregate table where one group's BIGINT sum and another's DOUBLE sum overflow
    for name in ("by_spark", "by_worker"):
        lake.create(
            name=name,
            schema="ts TIMESTAMP NOT NULL, id VARCHAR, n BIGINT, d DOUBLE, dec DECIMAL(4,1)",
            partition_by="day(ts)",
            sort_by="id",
            merge="aggregate(id; ts:max, n:sum, d:sum, dec:sum)",
            sizes=SizeTargets(min_files_to_merge=2),
        )
    batch = [
        {"ts": "2026-03-01T00:00:00", "id": "n", "n": 2**62, "d": 1.0, "dec": Decimal("1.5")},
        {"ts": "2026-03-01T00:00:00", "id": "d", "n": 1, "d": 1e308, "dec": Decimal("1.5")},
        {"ts": "2026-03-01T00:00:00", "id": "dec", "n": 1, "d": 1.0, "dec": Decimal("999.9")},
        {"ts": "2026-03-01T00:00:00", "id": None, "n": 5, "d": 0.5, "dec": None},
    ]
    for _ in range(2):
        lake.inserter.insert_rows("by_spark", batch)
    clone(lake, "by_spark", "by_worker")
    sql = "SELECT id, n::VARCHAR, d, dec, _row_id FROM {table}"

    # When Spark compacts one and the merge worker merges the other
    result = spark_compact(lake, spark, "by_spark")
    lake.merge("by_worker")

    # Then both keep each overflowing group's two rows and merge the others into one
    assert result.count("committed") == 1
    assert rows_of(lake, "by_spark", sql=sql) == rows_of(lake, "by_worker", sql=sql)
    counts = "SELECT id, count(*) AS c FROM {table} GROUP BY id ORDER BY id NULLS LAST"
    expected = [
        {"id": "d", "c": 2},
        {"id": "dec", "c": 2},
        {"id": "n", "c": 2},
        {"id": None, "c": 1},
    ]
    for table in ("by_spark", "by_worker"):
        assert lake.rows(counts.format(table=table)) == expected


def test_spark_keeps_every_row_whose_replace_key_is_null_as_the_worker_does(
    lake: Lake, spark: Any
) -> None:
    for name in ("by_spark", "by_worker"):
        lake.create(
            name=name,
            schema="ts TIMESTAMP NOT NULL, id VARCHAR, n BIGINT",
            partition_by="day(ts)",
            sort_by="id",
            merge="replace(id)",
            sizes=SizeTargets(min_files_to_merge=2),
        )
    for n in range(3):
        lake.inserter.insert_rows(
            "by_spark",
            [
                {"ts": "2026-03-01T00:00:00", "id": "a", "n": n},
                {"ts": "2026-03-01T00:00:00", "id": None, "n": 10 + n},
            ],
        )
    clone(lake, "by_spark", "by_worker")

    assert spark_compact(lake, spark, "by_spark").count("committed") == 1
    lake.merge("by_worker")

    for table in ("by_spark", "by_worker"):
        assert [r["n"] for r in lake.rows(f"SELECT n FROM {table} ORDER BY n")] == [2, 10, 11, 12]


def test_spark_outputs_have_value_aligned_row_groups(lake: Lake, spark: Any) -> None:
    lake.create(
        row_group_by="user_id",
        sizes=SizeTargets(row_group_target_bytes=8 * KIB, min_files_to_merge=2),
    )
    lake.insert_batches("events", batches=6, rows=1500, days=1)
    spark_compact(lake, spark, "events")
    (merged,) = lake.meta.files("events")
    parquet = pq.ParquetFile(lake.objects.uri(merged.path))
    seen: dict[str, int] = {}
    for index in range(parquet.metadata.num_row_groups):
        for value in set(parquet.read_row_group(index, columns=["user_id"])["user_id"].to_pylist()):
            assert value not in seen, f"{value} in row groups {seen[value]} and {index}"
            seen[value] = index
    assert parquet.metadata.num_row_groups > 5 and len(seen) == 40
    assert merged.row_count == 9000 and merged.column_stats["user_id"].min is not None


def test_a_conflict_on_one_partition_leaves_the_others_committed_and_its_outputs_deleted(
    lake: Lake, spark: Any
) -> None:
    lake.create(sizes=SizeTargets(min_files_to_merge=2))
    lake.insert_batches("events", batches=4, rows=300, days=3)
    manifest = claim_partitions(lake.meta, "events")
    assert manifest is not None and len(manifest.groups) == 3
    victim = manifest.groups[1]
    before_objects = {o.key for o in lake.objects.list_prefix("events/data/")}

    def merged_elsewhere_meanwhile(commit: PendingCommit) -> None:
        # another writer takes one of the victim's files after its lease ran out
        if commit.idempotency_key == victim.idempotency_key:
            lake.meta.release_claim(victim.claim_token)
            lake.meta.commit("events", operation="delete", remove=[victim.file_ids[0]])

    spans: list[str] = []

    @contextmanager
    def record(name: str) -> Iterator[None]:
        spans.append(name)
        yield

    use_tracer(record)
    try:
        with HookedMetaStore.like(lake.meta, before_commit=merged_elsewhere_meanwhile) as meta:
            result = compact_with_spark(
                spark,
                meta=meta,
                objects=lake.objects,
                location=WarehouseLocation(scheme="file", path=lake.objects.root),
                manifest=manifest,
            )
    finally:
        use_tracer(None)

    # The job is one span, with each partition's commit inside it
    assert spans[0] == "icefloe.compaction" and spans.count("icefloe.commit") >= 2

    statuses = {p.partition_path: p.status for p in result.partitions}
    assert statuses[victim.partition_path] == "conflict"
    assert sorted(statuses.values()) == ["committed", "committed", "conflict"]
    live = lake.meta.files("events")
    victim_files = [f for f in live if f.partition_path == victim.partition_path]
    assert len(victim_files) == 3  # four inputs, one deleted, none replaced
    assert not any(f.claimed for f in victim_files)  # its claim was released
    # The victim partition's Spark outputs are gone; the others' are registered
    after = {o.key for o in lake.objects.list_prefix("events/data/")}
    new_objects = after - before_objects
    assert new_objects == {f.path for f in live if f.partition_path != victim.partition_path}


def test_a_partition_whose_claim_was_lost_before_the_job_frees_its_other_files(
    lake: Lake, spark: Any
) -> None:
    # Given a job over three partitions, one of whose files a local delete took before the
    # job ran (a delete overrides a claim)
    lake.create(sizes=SizeTargets(min_files_to_merge=2))
    lake.insert_batches("events", batches=4, rows=300, days=3)
    manifest = claim_partitions(lake.meta, "events")
    assert manifest is not None and len(manifest.groups) == 3
    victim = manifest.groups[1]
    lake.meta.commit("events", operation="delete", remove=[victim.file_ids[0]])

    # When the job runs
    result = compact_with_spark(
        spark,
        meta=lake.meta,
        objects=lake.objects,
        location=WarehouseLocation(scheme="file", path=lake.objects.root),
        manifest=manifest,
    )

    # Then that partition's claim is lost and its other files are freed at once (not after
    # the job's lease), while the other partitions commit
    statuses = {p.partition_path: p.status for p in result.partitions}
    assert statuses[victim.partition_path] == "claim_lost"
    assert sorted(statuses.values()) == ["claim_lost", "committed", "committed"]
    victim_files = [
        f for f in lake.meta.files("events") if f.partition_path == victim.partition_path
    ]
    assert len(victim_files) == 3 and not any(f.claimed for f in victim_files)


def test_a_rerun_of_a_committed_job_changes_nothing(lake: Lake, spark: Any) -> None:
    lake.create(sizes=SizeTargets(min_files_to_merge=2))
    lake.insert_batches("events", batches=3, rows=100, days=1)
    manifest = claim_partitions(lake.meta, "events")
    assert manifest is not None
    location = WarehouseLocation(scheme="file", path=lake.objects.root)
    first = compact_with_spark(
        spark, meta=lake.meta, objects=lake.objects, location=location, manifest=manifest
    )
    again = compact_with_spark(
        spark, meta=lake.meta, objects=lake.objects, location=location, manifest=manifest
    )
    assert first.count("committed") == 1 and again.count("already_committed") == 1
    assert len(lake.meta.files("events")) == 1


def test_a_custom_merge_query_is_refused_by_spark_naming_the_duckdb_engine(
    lake: Lake, spark: Any
) -> None:
    lake.create(merge="sql:SELECT * FROM events", sizes=SizeTargets(min_files_to_merge=2))
    lake.insert_batches("events", batches=2, rows=10, days=1)
    manifest = claim_partitions(lake.meta, "events")
    assert isinstance(manifest, CompactionManifest)
    with pytest.raises(SparkMergeUnsupportedError, match="DuckDB engine"):
        compact_with_spark(
            spark,
            meta=lake.meta,
            objects=lake.objects,
            location=WarehouseLocation(scheme="file", path=lake.objects.root),
            manifest=manifest,
        )


def test_a_failed_local_compaction_settles_its_job_and_frees_its_claims(
    lake: Lake, spark: Any
) -> None:
    from icefloe.compaction.local import compact_locally
    from icefloe.metastore.jobs import JobStore

    lake.create(merge="sql:SELECT * FROM events", sizes=SizeTargets(min_files_to_merge=2))
    lake.insert_batches("events", batches=2, rows=10, days=1)
    settings = load_settings({"ICEFLOE_WAREHOUSE": str(lake.objects.root)}).core
    with pytest.raises(SparkMergeUnsupportedError):
        compact_locally(
            meta=lake.meta,
            objects=lake.objects,
            settings=settings,
            table="events",
            engine="spark",
            spark=spark,
        )
    assert not any(f.claimed for f in lake.meta.files("events"))
    assert JobStore(lake.meta).unsettled(older_than=timedelta(0)) == []


def test_spark_compacts_files_of_several_schema_versions_by_column_id(
    lake: Lake, spark: Any, tmp_path: Any
) -> None:
    # Given files written before and after a rename, an added column and a dropped one re-added
    lake.create(sizes=SizeTargets(min_files_to_merge=2))
    lake.insert_batches("events", batches=3, rows=100, days=2)
    old_head = lake.head()
    old_rows = rows_of(lake, "events", sql="SELECT ts, event, user_id FROM {table}")
    alter_table(
        meta=lake.meta,
        table="events",
        changes=[
            rename_column("user_id=uid"),
            add_column("n BIGINT"),
            drop_column("properties"),
            add_column("properties VARCHAR"),
        ],
    )
    lake.inserter.insert_rows(
        "events",
        [
            {"ts": f"2026-03-0{1 + i % 2}T01:00:00", "event": "e", "uid": f"u{i}", "n": 2**40 + i}
            for i in range(50)
        ],
    )
    sql = "SELECT ts, event, uid, n, properties FROM {table}"
    before = rows_of(lake, "events", sql=sql)
    assert sum(1 for row in before if row[3] is None and row[4] is None) == 300

    # When Spark compacts every partition
    result = spark_compact(lake, spark, "events")

    # Then the rows are the same, read by id, and written at the current version
    assert result.count("committed") == 2
    assert rows_of(lake, "events", sql=sql) == before
    assert {f.spec_version for f in lake.meta.files("events")} == {2}
    # And each file carries version 2's field ids (uid keeps user_id's id)
    layout = lake.meta.get_table("events").spec.layout
    for f in lake.meta.files("events"):
        assert file_field_ids(lake.objects.root / f.path) == expected_field_ids(layout)
    assert expected_field_ids(layout)["uid"] == 3
    # And Spark reads the head and the pinned old snapshot as the engine does
    runtime = Runtime(
        settings=load_settings({"ICEFLOE_HOME": str(tmp_path)}).core,
        meta=lake.meta,
        objects=lake.objects,
    )
    head = read_table(spark, "events", runtime=runtime)
    assert head.columns == ["ts", "event", "uid", "n", "properties"]
    assert Counter(tuple(r) for r in head.collect()) == before
    then = read_table(spark, "events", snapshot_id=old_head, runtime=runtime)
    assert Counter(tuple(r) for r in then.select("ts", "event", "user_id").collect()) == old_rows
