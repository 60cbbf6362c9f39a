"""A generated column added to a table that already has files: the rows of those files get its
value computed from its expression by every reader, merges write it into them until no such
file is left, and pinned snapshots keep the schema they had. An expression that fails on a
row the table holds is refused at the alter, and nothing changes."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from tests.integration.test_generated_columns import GENERATED, INPUTS, events, expected, stored

from icefloe.errors import SpecError, StorageError
from icefloe.lake import Lake
from icefloe.lifecycle import alter as alter_module
from icefloe.spec.reading import versions_lacking_generated

pytestmark = pytest.mark.integration

INPUT_NAMES = ["ts", "event", "properties", "ctx"]


@pytest.fixture
def lake(connected_lake: Lake) -> Lake:
    return connected_lake


def _inputs_only(lake: Lake, snapshot_id: int) -> list[Any]:
    answer = lake.query(f"SELECT {', '.join(INPUT_NAMES)} FROM ev", snapshot_id=snapshot_id)
    return sorted((tuple(r.values()) for r in answer.to_pylist()), key=repr)


def _stale_files(lake: Lake) -> list[Any]:
    spec = lake.table("ev").spec
    return [f for f in lake.meta.files("ev") if f.spec_version in versions_lacking_generated(spec)]


def test_old_files_read_the_value_their_rows_compute_before_and_after_the_merge_backfills_them(
    lake: Lake, tmp_path: Path
) -> None:
    lake.create_table("ev", schema=INPUTS, partition_by="day(ts)")
    batches = [events(seed, 40) for seed in range(20, 25)]
    for batch in batches[:3]:
        lake.insert("ev", batch)
    before_alter = lake.table("ev").head_snapshot_id
    old_rows = [r for b in batches[:3] for r in b]
    plain_before = [row[:4] for row in expected(old_rows, tmp_path)]

    altered = lake.alter_table("ev", add_columns=[f"{n} {t} AS ({e})" for n, t, e in GENERATED])
    after_alter = altered.snapshot_id
    assert len(_stale_files(lake)) >= 3  # every file of before, over three days

    # Computed on the fly for the old files
    assert stored(lake) == expected(old_rows, tmp_path)
    # A snapshot pinned before the alter has the schema it had
    assert _inputs_only(lake, before_alter) == plain_before
    with pytest.raises(Exception, match="numtime"):
        lake.query("SELECT numtime FROM ev", snapshot_id=before_alter)

    # New rows store it; old and new read together
    for batch in batches[3:]:
        lake.insert("ev", batch)
    every_row = [r for b in batches for r in b]
    assert stored(lake) == expected(every_row, tmp_path)
    before_merge = lake.table("ev").head_snapshot_id

    # Merges rewrite every old file, even one alone in its partition, until none is left
    for _ in range(5):
        if not _stale_files(lake) or not lake.merge("ev").count("committed"):
            break
    assert _stale_files(lake) == []
    assert stored(lake) == expected(every_row, tmp_path)
    assert stored(lake, snapshot_id=before_merge) == expected(every_row, tmp_path)
    assert stored(lake, snapshot_id=after_alter) == expected(old_rows, tmp_path)
    assert _inputs_only(lake, before_alter) == plain_before

    # The merged files hold the values themselves, with statistics
    names = [n for n, _, _ in GENERATED]
    held = []
    for f in lake.meta.files("ev"):
        table = pq.read_table(lake.objects.uri(f.path))
        assert set(names) <= set(table.column_names)
        assert "numtime" in f.column_stats
        held += table.select(["ts", "numtime"]).to_pylist()
    plain = expected(every_row, tmp_path)
    assert sorted(((r["ts"], r["numtime"]) for r in held), key=repr) == sorted(
        ((r[0], r[4]) for r in plain), key=repr
    )


def test_a_filter_on_an_added_generated_column_reads_old_files_until_they_are_backfilled(
    lake: Lake,
) -> None:
    lake.create_table("ev", schema=INPUTS, partition_by="day(ts)")
    for day in range(4):  # one file a day, each with its own range of numtime
        rows = [
            {"ts": f"2026-05-0{day + 1}T00:00:{n:02d}", "properties": {"numtime": day * 1000 + n}}
            for n in range(30)
        ]
        lake.insert("ev", rows)
    lake.alter_table(
        "ev", add_columns=["numtime BIGINT AS (CAST(properties->>'numtime' AS BIGINT))"]
    )
    sql = "SELECT count(*) AS n FROM ev WHERE numtime BETWEEN 2000 AND 2010"
    before = lake.query_result(sql)
    assert before.rows.to_pylist() == [{"n": 11}]
    # no statistics yet: an old file is not ruled out (nor, wrongly, taken as all NULL)
    (scan,) = before.stats
    assert (scan.files_considered, scan.files_scanned) == (4, 4)
    nulls = lake.query_result("SELECT count(*) AS n FROM ev WHERE numtime IS NULL")
    assert nulls.rows.to_pylist() == [{"n": 0}]
    while _stale_files(lake):
        assert lake.merge("ev").count("committed") > 0
    after = lake.query_result(sql)
    assert after.rows.to_pylist() == [{"n": 11}]
    (scan,) = after.stats
    assert (scan.files_considered, scan.files_scanned) == (4, 1)


def test_an_expression_failing_on_a_row_the_table_holds_is_refused_and_nothing_changes(
    lake: Lake,
) -> None:
    lake.create_table("ev", schema=INPUTS, partition_by="day(ts)")
    lake.insert("ev", [{"ts": "2026-05-01T00:00:00", "properties": {"numtime": 5}}])
    lake.insert("ev", [{"ts": "2026-05-02T00:00:00", "properties": {"numtime": "five"}}])
    version = lake.table("ev").spec.version
    bad = lake.meta.files("ev")[-1]
    with pytest.raises(SpecError) as refused:
        lake.alter_table("ev", add_columns=["n BIGINT AS (CAST(properties->>'numtime' AS BIGINT))"])
    message = str(refused.value)
    assert "generated column 'n'" in message
    assert lake.objects.uri(bad.path) in message
    assert "five" in message and "TRY_CAST" in message
    assert lake.table("ev").spec.version == version
    # a computed value insert would refuse is refused the same way
    with pytest.raises(SpecError, match="not a finite number"):
        lake.alter_table(
            "ev",
            add_columns=["r DOUBLE AS (CAST(properties->>'numtime' AS DOUBLE) / 0)"],
        )
    # the expression that holds for every row is added
    lake.alter_table("ev", add_columns=["n BIGINT AS (TRY_CAST(properties->>'numtime' AS BIGINT))"])
    assert lake.query("SELECT n FROM ev ORDER BY ts").to_pylist() == [{"n": 5}, {"n": None}]


def test_a_row_a_rollback_brings_back_reads_null_where_its_expression_fails(lake: Lake) -> None:
    lake.create_table("ev", schema=INPUTS, partition_by="day(ts)")
    lake.insert("ev", [{"ts": "2026-05-01T00:00:00", "properties": {"numtime": 5}}])
    lake.insert("ev", [{"ts": "2026-05-02T00:00:00", "properties": {"numtime": "five"}}])
    both = lake.table("ev").head_snapshot_id
    lake.delete("ev", where="ts >= TIMESTAMP '2026-05-02'")
    lake.alter_table("ev", add_columns=["n BIGINT AS (CAST(properties->>'numtime' AS BIGINT))"])
    lake.rollback("ev", to_snapshot=both)  # the files come back; the schema stays
    sql = "SELECT properties->>'numtime' AS p, n FROM ev ORDER BY ts"
    answer = [{"p": "5", "n": 5}, {"p": "five", "n": None}]
    assert lake.query(sql).to_pylist() == answer
    while _stale_files(lake):
        assert lake.merge("ev").count("committed") > 0
    assert lake.query(sql).to_pylist() == answer


def test_spark_reads_the_computed_values_and_its_compaction_writes_them(
    lake: Lake, spark: Any, tmp_path: Path
) -> None:
    from icefloe.spark import read_table
    from support.engines import spark_compact
    from support.nested_answers import spark_value

    lake.create_table("ev", schema=INPUTS, partition_by="day(ts)")
    batches = [events(seed, 30) for seed in range(40, 43)]
    batches.append([{"ts": "2026-06-01T00:00:00", "properties": {"numtime": 7}}])  # a lone file
    for batch in batches:
        lake.insert("ev", batch)
    lake.alter_table("ev", add_columns=[f"{n} {t} AS ({e})" for n, t, e in GENERATED])
    rows = [r for b in batches for r in b]
    plain = expected(rows, tmp_path)
    names = [n for n, _, _ in GENERATED]

    def spark_rows() -> list[Any]:
        frame = read_table(spark, "ev", runtime=lake.runtime).select("ts", *names)
        return sorted(
            (tuple(spark_value(r[c]) for c in ["ts", *names]) for r in frame.collect()), key=repr
        )

    wanted = sorted((tuple(spark_value(v) for v in (r[0], *r[4:])) for r in plain), key=repr)
    assert spark_rows() == wanted  # computed by DuckDB inside Spark for the old files
    spark_compact(lake, spark, "ev")
    assert _stale_files(lake) == []  # every partition, even one with a lone file
    assert stored(lake) == plain
    assert spark_rows() == wanted


def test_iceberg_publication_waits_for_the_backfill_then_shows_the_values(
    lake: Lake, tmp_path: Path
) -> None:
    from support.engines import duckdb_with_iceberg

    lake.create_table("ev", schema=INPUTS, partition_by="day(ts)", publish="iceberg")
    batches = [events(seed, 30) for seed in range(50, 52)]
    for batch in batches:
        lake.insert("ev", batch)
    first = lake.publish_all()
    assert [r.table for r in first.published] == ["ev"]
    lake.alter_table(
        "ev", add_columns=["numtime BIGINT AS (TRY_CAST(properties->>'numtime' AS BIGINT))"]
    )

    waiting = lake.publish_all()
    assert waiting.published == () and waiting.failed == ()
    (reason,) = waiting.waiting
    assert reason.table == "ev" and "'numtime'" in reason.error and "merge" in reason.error
    iceberg = lake.iceberg_catalog().load_table(("icefloe", "ev"))
    assert iceberg.properties["icefloe.snapshot-id"] == str(first.published[0].snapshot_id)

    while _stale_files(lake):  # a local merge publishes opted-in tables after it
        assert lake.merge("ev").count("committed") > 0
    done = lake.publish_all()
    assert done.waiting == () and done.current == ("ev",)
    iceberg = lake.iceberg_catalog().load_table(("icefloe", "ev"))
    assert iceberg.properties["icefloe.snapshot-id"] == str(lake.table("ev").head_snapshot_id)
    with duckdb_with_iceberg() as con:
        read = con.execute(
            f"SELECT ts, numtime FROM iceberg_scan('{iceberg.metadata_location}')"
        ).fetchall()
    plain = expected([r for b in batches for r in b], tmp_path)
    assert sorted(read, key=repr) == sorted(((r[0], r[4]) for r in plain), key=repr)


def test_a_delete_rewrites_an_old_file_with_the_value_its_rows_compute(
    lake: Lake, tmp_path: Path
) -> None:
    lake.create_table("ev", schema=INPUTS, partition_by="day(ts)")
    rows = events(60, 60)
    lake.insert("ev", rows)
    lake.alter_table("ev", add_columns=[f"{n} {t} AS ({e})" for n, t, e in GENERATED])
    stale = len(_stale_files(lake))
    result = lake.delete("ev", where="event = 'View'")
    assert result.rows_deleted > 0
    kept = [r for r in rows if r.get("event") != "View"]
    assert stored(lake) == expected(kept, tmp_path)
    assert len(_stale_files(lake)) < stale  # the rewritten files hold the columns


def test_adding_one_to_a_table_with_files_needs_the_object_store_to_check_them(
    lake: Lake,
) -> None:
    from icefloe.lifecycle import alter_table
    from icefloe.lifecycle.alter import add_column

    change = [add_column("n BIGINT AS (TRY_CAST(properties->>'numtime' AS BIGINT))")]
    lake.create_table("empty", schema=INPUTS)
    # no file to check: the meta store alone does
    assert alter_table(meta=lake.meta, table="empty", changes=change).spec.column("n").generated
    lake.create_table("ev", schema=INPUTS)
    lake.insert("ev", [{"ts": "2026-05-01T00:00:00", "properties": {"numtime": 5}}])
    version = lake.table("ev").spec.version
    with pytest.raises(SpecError, match=r"generated column 'n'.*give the lake's object store"):
        alter_table(meta=lake.meta, table="ev", changes=change)
    assert lake.table("ev").spec.version == version


def test_files_merged_and_collected_while_the_alter_checks_them_are_listed_again(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given rows in four files, every one of which takes the column's value, and an alter
    # whose check, once it has listed those files, meets a merge replacing them and gc (no
    # retention) collecting them
    lake.create_table("ev", schema=INPUTS, partition_by="day(ts)")
    for n in range(4):
        lake.insert("ev", [{"ts": f"2026-05-01T0{n}:00:00", "properties": {"numtime": n}}])
    listed = {f.path for f in lake.meta.files("ev")}
    generated_problem = alter_module.generated_problem
    collected: list[str] = []

    def merged_and_collected_first(*args: Any, **kwargs: Any) -> Any:
        if not collected:
            assert [o.status for o in lake.merge("ev").outcomes] == ["committed"]
            lake.gc("ev", retention=timedelta(0))
            collected.extend(p for p in listed if lake.objects.head(p) is None)
            assert collected
        return generated_problem(*args, **kwargs)

    monkeypatch.setattr(alter_module, "generated_problem", merged_and_collected_first)

    # When the alter adds the column, then it lists the files again (the merged one) and
    # adds it: no row failed, so the expression is not blamed
    lake.alter_table("ev", add_columns=["n BIGINT AS (CAST(properties->>'numtime' AS BIGINT))"])
    assert collected and lake.table("ev").spec.column("n").generated
    assert lake.query("SELECT n FROM ev ORDER BY ts").to_pylist() == [{"n": n} for n in range(4)]


def test_a_live_file_the_alter_cannot_read_is_a_storage_error_not_the_expressions(
    lake: Lake,
) -> None:
    # Given a live file whose object is gone (the store lost it)
    lake.create_table("ev", schema=INPUTS, partition_by="day(ts)")
    lake.insert("ev", [{"ts": "2026-05-01T00:00:00", "properties": {"numtime": 5}}])
    lost = lake.meta.files("ev")[0].path
    lake.objects.delete_many([lost])
    version = lake.table("ev").spec.version

    # When a generated column is added, then it is refused as the store's failure, naming
    # the file, and nothing changes
    with pytest.raises(StorageError) as refused:
        lake.alter_table("ev", add_columns=["n BIGINT AS (CAST(properties->>'numtime' AS BIGINT))"])
    assert lost in str(refused.value) and "expression" not in str(refused.value)
    assert lake.table("ev").spec.version == version
