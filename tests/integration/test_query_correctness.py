"""Answers that pruning once got wrong, and the janitor racing a pinned read."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import psycopg
import pytest
from psycopg import sql as pgsql

from icefloe.errors import InvalidInputError, SnapshotNotFoundError
from icefloe.ingest import Inserter
from icefloe.janitor import Janitor
from icefloe.lifecycle import alter_table
from icefloe.lifecycle.alter import add_column
from icefloe.merge import MergeWorker, merge_locally
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine, TablePlan, TimeRange
from icefloe.query.executor import QueryReadError
from icefloe.spec import TableSpec
from icefloe.storage import LocalObjectStore

pytestmark = pytest.mark.integration


@pytest.fixture
def objects(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "warehouse")


@pytest.fixture
def inserter(meta: MetaStore, objects: LocalObjectStore) -> Iterator[Inserter]:
    meta.create_table(
        TableSpec.create(
            name="t", schema="ts TIMESTAMP NOT NULL, v INTEGER, s VARCHAR", partition_by="day(ts)"
        )
    )
    inserter = Inserter(meta=meta, objects=objects)
    # Four one-row files per day (enough for a merge to take them), each day with its own v.
    for day, v in ((1, 1), (2, 2), (3, 3), (4, 4)):
        for h in range(4):
            inserter.insert_rows(
                "t", [{"ts": f"2026-11-0{day}T0{h}:30:00", "v": v, "s": f"d{day}"}]
            )
    yield inserter
    inserter.close()


def answer(engine: QueryEngine, sql: str) -> list[tuple[object, ...]]:
    return [tuple(r.values()) for r in engine.query(sql).rows.to_pylist()]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        # The constant is the INTEGER 2 (DuckDB rounds), not 2.4.
        ("SELECT count(*) FROM t WHERE v = CAST(2.4 AS INTEGER)", 4),
        ("SELECT count(*) FROM t WHERE v = 2.4::INTEGER", 4),
        # A DATE compared with a TIMESTAMP is midnight of that day, not 01:30.
        ("SELECT count(*) FROM t WHERE ts >= CAST('2026-11-02 01:30' AS DATE)", 12),
        ("SELECT count(*) FROM t WHERE ts < CAST('2026-11-02 01:30' AS DATE)", 4),
        ("SELECT count(*) FROM t WHERE CAST(ts AS DATE) = '2026-11-02'", 4),
        ("SELECT count(*) FROM t WHERE ts >= TIMESTAMPTZ '2026-11-02 02:30:00+01'", 11),
        ("SELECT count(*) FROM t WHERE v + 1 > 4", 4),
        ("SELECT count(*) FROM t WHERE s LIKE 'd3%'", 4),
        ("SELECT count(*) FROM t WHERE v IN (1, 4) OR s = 'd2'", 12),
    ],
)
def test_typed_constants_prune_as_duckdb_compares_them(
    meta: MetaStore, objects: LocalObjectStore, inserter: Inserter, sql: str, expected: int
) -> None:
    pruned, unpruned = (
        QueryEngine(meta=meta, objects=objects),
        QueryEngine(meta=meta, objects=objects, pruning=False),
    )
    assert answer(pruned, sql) == [(expected,)]
    assert answer(unpruned, sql) == [(expected,)]


@pytest.mark.parametrize("text", ["100%", "%%", "%(x)s", "%s", "a%%b%"])
def test_a_literal_holding_the_drivers_placeholder_mark_prunes_as_itself(
    meta: MetaStore, objects: LocalObjectStore, inserter: Inserter, text: str
) -> None:
    # Given a file holding the text, among files that hold other values of the column
    inserter.insert_rows("t", [{"ts": "2026-11-05T01:00:00", "v": 9, "s": text}])
    engine = QueryEngine(meta=meta, objects=objects)
    literal = "'" + text + "'"
    # When the column is compared with it, the answer finds that one file's row
    equal = engine.query(f"SELECT v FROM t WHERE s = {literal}")
    assert equal.rows.to_pylist() == [{"v": 9}]
    assert equal.plan("t").files_scanned == 1
    in_list = engine.query(f"SELECT count(*) AS n FROM t WHERE s IN ({literal}, 'd1')")
    assert in_list.rows.to_pylist() == [{"n": 5}]
    assert answer(engine, f"SELECT count(*) FROM t WHERE s >= {literal} AND s < 'd'") == [
        (sum(text <= s < "d" for s in (text, "d1", "d2", "d3", "d4")),)
    ]


DISTINCT_FROM_IN_AN_OR = [
    "v IS DISTINCT FROM 5 OR v = 7",
    "v IS DISTINCT FROM 5 OR v IS DISTINCT FROM 7",
    "NOT (v IS NOT DISTINCT FROM 5) OR v > 6",
    "s IS DISTINCT FROM 'x' OR s = 'y'",
    "(v IS DISTINCT FROM 1 OR v = 2) AND s IS DISTINCT FROM 'q'",
    "v IN (SELECT 7 UNION SELECT NULL) OR v is distinct\nfrom 5",
]


@pytest.mark.parametrize("where", DISTINCT_FROM_IN_AN_OR)
def test_an_or_holding_is_distinct_from_keeps_the_rows_of_all_null_files(
    meta: MetaStore, objects: LocalObjectStore, inserter: Inserter, where: str
) -> None:
    # Given files whose v, or s, is NULL in every row, beside files holding values
    extra = [
        {"ts": "2026-11-05T01:00:00", "v": None, "s": None},
        {"ts": "2026-11-05T02:00:00", "v": None, "s": "x"},
        {"ts": "2026-11-05T03:00:00", "v": 5, "s": None},
        {"ts": "2026-11-05T04:00:00", "v": 7, "s": "y"},
    ]
    for row in extra:
        inserter.insert_rows("t", [row])
    engine = QueryEngine(meta=meta, objects=objects)
    everything = engine.query("SELECT ts, v, s FROM t").rows
    # When the filter is an OR holding an IS [NOT] DISTINCT FROM (which DuckDB's Parquet scan
    # evaluates wrongly on an all-NULL row group)
    sql = f"SELECT ts, v, s FROM t WHERE {where} ORDER BY ts"
    got = engine.query(sql).rows.to_pylist()
    # Then the answer is DuckDB's over the same rows held in memory
    with duckdb.connect() as con:
        con.register("rows", everything)
        con.execute("CREATE TABLE t AS SELECT * FROM rows")
        expected = con.execute(sql).to_arrow_table().to_pylist()
    assert got == expected
    assert any(r["v"] is None for r in expected)


def test_each_reference_to_a_table_is_pruned_on_its_own(
    meta: MetaStore, objects: LocalObjectStore, inserter: Inserter
) -> None:
    engine = QueryEngine(meta=meta, objects=objects)
    result = engine.query("SELECT (SELECT count(*) FROM t) AS n FROM t WHERE ts >= '2026-11-03'")
    assert result.rows.to_pylist() == [{"n": 16}] * 8
    # A self-join where each side prunes differently reads the union of both sides' files.
    joined = engine.query(
        "SELECT count(*) AS n FROM t a, t b WHERE a.v = 1 AND b.v = 4 AND a.ts < b.ts"
    )
    assert joined.rows.to_pylist() == [{"n": 16}]
    assert joined.plan("t").files_scanned == 8
    # A point query reads its day's four files.
    assert engine.query("SELECT count(*) FROM t WHERE v = 3").plan("t").files_scanned == 4


def test_a_read_whose_snapshot_the_janitor_expires_before_the_listing_is_a_clear_error(
    meta: MetaStore, objects: LocalObjectStore, inserter: Inserter
) -> None:
    # Given a snapshot whose files a merge then replaces
    pinned_id = meta.resolve_snapshot("t")
    merge_locally(meta=meta, worker=MergeWorker(meta=meta, objects=objects), until_quiet=True)
    janitor = Janitor(meta=meta, objects=objects, query_grace=timedelta(0))
    # When a query's read resolves the snapshot, and the janitor expires it and forgets its
    # files before the read lists them (each read is its own statement)
    with meta.read_tables(["t"]) as read:
        pinned = read.pin("t", snapshot_id=pinned_id)
        report = janitor.run(table="t", retention=timedelta(0))
        assert report.total("files_deleted") > 0
        # Then the listing names the expired snapshot instead of returning what is left
        with pytest.raises(SnapshotNotFoundError, match=f"snapshot {pinned_id} of table 't'"):
            pinned.files()


def test_the_listing_is_the_whole_snapshot_when_the_janitor_runs_between_resolve_and_list(
    meta: MetaStore, objects: LocalObjectStore, inserter: Inserter
) -> None:
    # Given a snapshot whose files a merge then replaces
    pinned_id = meta.resolve_snapshot("t")
    expected = {f.path for f in meta.files("t", snapshot_id=pinned_id)}
    merge_locally(meta=meta, worker=MergeWorker(meta=meta, objects=objects), until_quiet=True)
    janitor = Janitor(meta=meta, objects=objects, query_grace=timedelta(0))
    # When the read resolves the snapshot, and the janitor expires it and forgets its files
    # before the read lists them
    with meta.pin("t", snapshot_id=pinned_id) as pinned:
        report = janitor.run(table="t", retention=timedelta(0))
        assert report.total("files_deleted") == len(expected)
        listed = set(pinned.files().paths)
    # Then the listing is still the snapshot's whole file list
    assert listed == expected
    # And a read that starts after the janitor is told the snapshot expired
    with pytest.raises(SnapshotNotFoundError, match=f"snapshot {pinned_id}"):
        QueryEngine(meta=meta, objects=objects).query(
            "SELECT count(*) FROM t", snapshot_id=pinned_id
        )


def test_a_snapshot_collected_while_its_query_runs_is_a_clear_error(
    meta: MetaStore, objects: LocalObjectStore, inserter: Inserter
) -> None:
    pinned_id = meta.resolve_snapshot("t")
    merge_locally(meta=meta, worker=MergeWorker(meta=meta, objects=objects), until_quiet=True)
    janitor = Janitor(meta=meta, objects=objects, query_grace=timedelta(0))

    def collect_after_planning(_plans: tuple[TablePlan, ...]) -> None:
        # Runs once the files are listed and before DuckDB reads them.
        janitor.run(table="t", retention=timedelta(0))

    engine = QueryEngine(meta=meta, objects=objects, on_plan=collect_after_planning)
    with pytest.raises(
        SnapshotNotFoundError, match=f"snapshot {pinned_id} expired while the query"
    ):
        engine.query("SELECT count(*) FROM t", snapshot_id=pinned_id)


def test_membership_filters_skip_small_files_on_a_point_query(
    meta: MetaStore, objects: LocalObjectStore
) -> None:
    # Given small inserts whose user ids span the whole range (min/max cannot tell them apart)
    meta.create_table(
        TableSpec.create(name="u", schema="user_id VARCHAR, n BIGINT", row_group_by="user_id")
    )
    inserter = Inserter(meta=meta, objects=objects)
    for batch in range(12):
        users = ["a0000", "z9999"] + [f"u{batch:02d}{i}" for i in range(5)]
        inserter.insert_rows("u", [{"user_id": user, "n": batch} for user in users])
    inserter.close()
    engine = QueryEngine(meta=meta, objects=objects)
    unpruned = QueryEngine(meta=meta, objects=objects, pruning=False)
    for sql, files in (
        ("SELECT count(*), sum(n) FROM u WHERE user_id = 'u053'", 1),
        ("SELECT count(*), sum(n) FROM u WHERE user_id IN ('u053', 'u112')", 2),
        ("SELECT count(*), sum(n) FROM u WHERE user_id = 'a0000'", 12),
        ("SELECT count(*), sum(n) FROM u WHERE user_id = 'nobody'", 0),
    ):
        result = engine.query(sql)
        # Then only the files holding the key are read (a false positive would add one), and
        # the answer is the unpruned one
        assert files <= result.plan("u").files_scanned <= files + 1, sql
        assert answer(engine, sql) == answer(unpruned, sql)
    # And a merge writes the filter into its output too
    merge_locally(meta=meta, worker=MergeWorker(meta=meta, objects=objects), until_quiet=True)
    merged = meta.files("u")
    assert len(merged) < 12
    assert all(f.column_stats["user_id"].membership for f in merged)


def test_a_window_and_a_filter_on_a_timestamptz_column_combine(
    meta: MetaStore, objects: LocalObjectStore
) -> None:
    meta.create_table(
        TableSpec.create(
            name="z", schema="seen TIMESTAMPTZ NOT NULL, v INTEGER", partition_by="day(seen)"
        )
    )
    inserter = Inserter(meta=meta, objects=objects)
    for day in range(1, 5):
        inserter.insert_rows("z", [{"seen": f"2026-11-0{day}T12:00:00+00:00", "v": day}])
    inserter.close()
    engine = QueryEngine(meta=meta, objects=objects)
    # A naive window beside an aware bound from the SQL: no error, the right rows
    result = engine.query(
        "SELECT count(*) AS n FROM z WHERE seen >= TIMESTAMPTZ '2026-11-02 00:00:00+00'",
        time_range={"z": TimeRange(datetime(2026, 11, 1), datetime(2026, 11, 4))},
    )
    assert result.rows.to_pylist() == [{"n": 2}]


def test_a_lost_file_of_a_live_snapshot_is_a_read_error_not_an_expiry(
    meta: MetaStore, objects: LocalObjectStore, inserter: Inserter
) -> None:
    # Given a file of the head snapshot deleted behind the meta store's back
    lost = meta.files("t")[0]
    objects.delete_many([lost.path])
    # Then the query fails naming the read, and the snapshot is not called expired
    with pytest.raises(QueryReadError, match="query failed"):
        QueryEngine(meta=meta, objects=objects).query("SELECT count(*) FROM t")


def test_a_listing_gives_each_file_its_own_size_row_count_and_version(
    meta: MetaStore, objects: LocalObjectStore, inserter: Inserter
) -> None:
    # Given files of different sizes, row counts and spec versions: days merged into one
    # file of four rows, then a column added and more one-row files inserted
    merge_locally(meta=meta, worker=MergeWorker(meta=meta, objects=objects), until_quiet=True)
    alter_table(meta=meta, table="t", changes=[add_column("w INTEGER")])
    for n in range(3):
        inserter.insert_rows("t", [{"ts": f"2026-11-05T0{n}:00:00", "v": n, "w": n, "s": "x" * n}])
    # When the head is listed as a query plan lists it (the same snapshot also row by row)
    with meta.pin("t") as pinned:
        listing = pinned.files()
        rows = meta.files("t", snapshot_id=pinned.snapshot_id)
    # Then each listed file carries the size, row count and version of its own file row
    columns = (listing.paths, listing.sizes, listing.row_counts, listing.spec_versions)
    listed = set(zip(*columns, strict=True))
    expected = {(f.path, f.size_bytes, f.row_count, f.spec_version) for f in rows}
    assert listed == expected
    assert {f.row_count for f in rows} == {1, 4} and {f.spec_version for f in rows} == {1, 2}
    assert len(listing.paths) == len(rows) == listing.considered


@pytest.mark.parametrize("separator", ["\t", "\n"], ids=["tab", "line break"])
def test_a_file_path_holding_a_control_character_is_refused_by_the_listing(
    meta: MetaStore, inserter: Inserter, postgres_dsn: str, separator: str
) -> None:
    # Given a file row whose path holds a tab or a line break (no valid key does: only a
    # meta store edited by hand has one), which would break the listing's one-text form
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            pgsql.SQL(
                "UPDATE {}.data_files SET path = path || %s"
                " WHERE file_id = (SELECT min(file_id) FROM {}.data_files)"
            ).format(pgsql.Identifier(meta.schema), pgsql.Identifier(meta.schema)),
            (f"{separator}x",),
        )
    # When the head is listed, then the listing refuses it by name instead of misreading it
    with meta.pin("t") as pinned, pytest.raises(InvalidInputError, match=r"table 't'.*control"):
        pinned.files()
