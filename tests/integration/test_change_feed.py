"""The change feed: for every pair of snapshots of random histories (inserts, merges, Spark
compaction, deletes, rollbacks, schema changes), the feed equals the net difference between
the table read whole at both snapshots, and names the snapshot that made each change."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_cli import cli_env, run  # noqa: F401  (cli_env is a fixture)

from icefloe import duck
from icefloe.errors import InvalidInputError, SnapshotNotFoundError
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.lake import Lake
from icefloe.query.changes import read_changes
from icefloe.query.views import files_source, view_body
from support.engines import spark_compact
from support.nested_answers import plain_value

pytestmark = pytest.mark.integration

SCHEMA = (
    "ts TIMESTAMP NOT NULL, k VARCHAR, v BIGINT, w INTEGER, ctx STRUCT(a INTEGER, b VARCHAR),"
    " tags VARCHAR[]"
)
HISTORIES = 2
OPERATIONS = 22


@pytest.fixture
def lake(connected_lake: Lake) -> Lake:
    return connected_lake


def _batch(rng: random.Random, n: int) -> list[dict[str, Any]]:
    return [
        {
            "ts": f"2026-07-0{1 + rng.randrange(3)}T{rng.randrange(24):02d}:00:00",
            "k": rng.choice(["a", "b", "c", None]),
            "v": rng.randrange(100),
            "w": rng.choice([rng.randrange(10), None]),
            "ctx": rng.choice([None, {"a": rng.randrange(5), "b": rng.choice(["x", None])}]),
            "tags": rng.choice([None, [], ["t"], ["t", "u"]]),
        }
        for _ in range(n)
    ]


def _insert(lake: Lake, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` as the table's current schema names them (k renamed, tags dropped)."""
    names = set(lake.table("ev").spec.column_names)
    fitted = []
    for row in rows:
        row = dict(row)
        if "k" not in names:
            row["kind"] = row.pop("k", None)
        if "tags" not in names:
            row.pop("tags", None)
        fitted.append(row)
    lake.insert("ev", fitted)


def _history(lake: Lake, spark: Any, rng: random.Random, *, merge: str) -> None:
    """Random operations on table ``ev``; each commits at most one snapshot."""
    lake.create_table("ev", schema=SCHEMA, partition_by="day(ts)", merge=merge)
    lake.insert("ev", _batch(rng, 8))
    altered: list[str] = []
    steps: list[tuple[int, Callable[[], object]]] = [
        (6, lambda: _insert(lake, _batch(rng, rng.randint(1, 12)))),
        (2, lambda: lake.merge("ev")),
        (2, lambda: lake.delete("ev", where=f"v % {rng.randint(3, 9)} = {rng.randrange(3)}")),
        (1, lambda: _rollback(lake, rng)),
        (1, lambda: _alter(lake, altered)),
    ]
    for n in range(OPERATIONS):
        if n == OPERATIONS // 2:  # two inserts into one day, then Spark compacts it
            _insert(lake, [{"ts": "2026-07-02T00:00:00", "v": 1}])
            _insert(lake, [{"ts": "2026-07-02T01:00:00", "v": 2}])
            spark_compact(lake, spark, "ev")
            continue
        if n in (4, 16):  # every history changes its schema, twice at least
            _alter(lake, altered)
            continue
        weights = [w for w, _ in steps]
        rng.choices(steps, weights)[0][1]()


def _rollback(lake: Lake, rng: random.Random) -> None:
    head = lake.table("ev").head_snapshot_id
    if head > 2:
        lake.rollback("ev", to_snapshot=rng.randrange(1, head))


def _alter(lake: Lake, done: list[str]) -> None:
    changes: list[dict[str, Any]] = [
        {"rename_columns": {"k": "kind"}},
        {"widen": ["w BIGINT"]},
        {"add_columns": ["note VARCHAR"]},
        {"add_columns": ["vv BIGINT AS (v * 2)"]},
        {"drop_columns": ["tags"]},
    ]
    if len(done) < len(changes):
        lake.alter_table("ev", **changes[len(done)])
        done.append("x")


def _ids(lake: Lake, snapshot: int) -> set[bytes]:
    if snapshot == 0:
        return set()
    rows = lake.query(f"SELECT {ROW_ID_COLUMN} AS id FROM ev", snapshot_id=snapshot)
    return set(rows.column("id").to_pylist())


def _rows_in_schema_of(lake: Lake, at: int, schema_of: int) -> dict[bytes, tuple[Any, ...]]:
    """The rows live at ``at``, read as a query pinned at ``schema_of`` reads its own."""
    if at == 0:
        return {}
    version = next(s.spec_version for s in lake.snapshots("ev") if s.snapshot_id == schema_of)
    spec = lake.meta.table_spec("ev", version=version)
    files = [
        (lake.objects.uri(f.path), f.spec_version) for f in lake.meta.files("ev", snapshot_id=at)
    ]
    with duck.connect() as con:
        found = con.execute(view_body(spec, files_source(spec, files), None)).fetchall()
    width = len(spec.columns)  # then the row id
    return {row[width]: tuple(plain_value(v) for v in row[:width]) for row in found}


@pytest.mark.parametrize(
    ("seed", "merge"),
    # replace(v): merges fold rows of one v into one, and the feed shows those it folds away
    [(seed, "append") for seed in range(HISTORIES)] + [(HISTORIES, "replace(v)")],
)
def test_the_feed_equals_the_difference_of_full_reads_for_every_pair_of_snapshots(
    lake: Lake, spark: Any, seed: int, merge: str
) -> None:
    rng = random.Random(20261128 + seed)
    _history(lake, spark, rng, merge=merge)
    head = lake.table("ev").head_snapshot_id
    ids = {s: _ids(lake, s) for s in range(head + 1)}
    files = {
        s: {f.file_id for f in lake.meta.files("ev", snapshot_id=s)} if s else set()
        for s in range(head + 1)
    }
    operations = {s.operation for s in lake.snapshots("ev")}
    assert {"append", "replace", "delete", "alter"} <= operations, operations

    operation_of = {s.snapshot_id: s.operation for s in lake.snapshots("ev")}
    by_merges = 0  # changes whose snapshot is a merge's or a compaction's
    for until in range(1, head + 1):
        names = [c.name for c in lake.meta.table_spec("ev", version=_version(lake, until)).columns]
        at_until = _rows_in_schema_of(lake, until, until)
        # from the start, from the snapshot before, and from a few others
        sinces = {0, until - 1, until} | set(rng.sample(range(until + 1), min(3, until + 1)))
        for since in sorted(sinces):
            feed = lake.changes("ev", since_snapshot=since, until_snapshot=until)
            assert (feed.since_snapshot, feed.until_snapshot) == (since, until)
            assert feed.rows.column_names == [*names, ROW_ID_COLUMN, "_change", "_snapshot"]
            at_since = _rows_in_schema_of(lake, since, until)
            inserted = ids[until] - ids[since]
            deleted = ids[since] - ids[until]
            got: dict[str, dict[bytes, tuple[Any, ...]]] = {"insert": {}, "delete": {}}
            made: dict[bytes, int] = {}
            for row in feed.rows.to_pylist():
                key = row[ROW_ID_COLUMN]
                assert key not in got[row["_change"]], "a row appears twice"
                got[row["_change"]][key] = tuple(plain_value(row[n]) for n in names)
                made[key] = row["_snapshot"]
                by_merges += operation_of[row["_snapshot"]] == "replace"
            where = f"seed {seed}, changes in ({since}, {until}]"
            assert got["insert"] == {i: at_until[i] for i in inserted}, where
            assert got["delete"] == {i: at_since[i] for i in deleted}, where
            for row_id in inserted:
                assert made[row_id] == max(
                    s
                    for s in range(since + 1, until + 1)
                    if row_id in ids[s] and row_id not in ids[s - 1]
                ), where
            for row_id in deleted:
                assert made[row_id] == max(
                    s
                    for s in range(since + 1, until + 1)
                    if row_id in ids[s - 1] and row_id not in ids[s]
                ), where
            # only files live at some point of the window and not at both ends were opened,
            # and only those live at one end read beyond their row ids
            between = set().union(*(files[s] for s in range(since, until + 1)))
            assert feed.files_read == len(between - (files[since] & files[until])), where
            assert feed.files_read_whole + feed.files_read_filtered <= len(
                files[until] ^ files[since]
            ), where

    if merge == "append":
        assert by_merges == 0  # merges and compactions keep rows: invisible
    else:
        assert by_merges > 0  # what replace merges folded away


def _version(lake: Lake, snapshot: int) -> int:
    return next(s.spec_version for s in lake.snapshots("ev") if s.snapshot_id == snapshot)


def test_merges_are_invisible_and_a_row_inserted_and_deleted_inside_the_window_is_not_there(
    lake: Lake,
) -> None:
    lake.create_table("ev", schema=SCHEMA, partition_by="day(ts)")
    rng = random.Random(7)
    lake.insert("ev", _batch(rng, 5))
    start = lake.table("ev").head_snapshot_id
    for _ in range(4):
        lake.insert("ev", _batch(rng, 5))
    merged = lake.merge("ev")
    assert merged.count("committed") > 0
    after_merge = lake.table("ev").head_snapshot_id
    # the merge alone changed nothing
    alone = lake.changes("ev", since_snapshot=after_merge - 1, until_snapshot=after_merge)
    assert alone.rows.num_rows == 0
    lake.insert("ev", [{"ts": "2026-07-01T00:00:00", "k": "gone", "v": 1}])
    lake.delete("ev", where="k = 'gone'")
    feed = lake.changes("ev", since_snapshot=start)
    assert feed.until_snapshot == lake.table("ev").head_snapshot_id
    assert feed.inserts == 20 and feed.deletes == 0
    assert "gone" not in feed.rows.column("k").to_pylist()
    # every insert names its insert's snapshot, not the merge's
    assert set(feed.rows.column("_snapshot").to_pylist()) == set(range(start + 1, start + 5))


def test_a_feed_from_an_expired_snapshot_names_the_oldest_one_kept(lake: Lake) -> None:
    lake.create_table("ev", schema=SCHEMA, partition_by="day(ts)")
    rng = random.Random(3)
    for _ in range(3):
        lake.insert("ev", _batch(rng, 3))
    lake.merge("ev")
    lake.gc("ev", retention=timedelta(0))
    kept = min(s.snapshot_id for s in lake.snapshots("ev") if not s.expired)
    assert kept > 1
    with pytest.raises(SnapshotNotFoundError, match=f"oldest snapshot it keeps is {kept}"):
        lake.changes("ev", since_snapshot=1)
    with pytest.raises(SnapshotNotFoundError, match=f"oldest snapshot it keeps is {kept}"):
        lake.changes("ev", since_snapshot=0)
    with pytest.raises(SnapshotNotFoundError, match="snapshot -1 is unknown"):
        lake.changes("ev", since_snapshot=-1)
    head = lake.table("ev").head_snapshot_id
    with pytest.raises(SnapshotNotFoundError, match="before it"):
        lake.changes("ev", since_snapshot=head + 1)
    assert lake.changes("ev", since_snapshot=kept).until_snapshot == head


def test_a_gc_between_listing_and_reading_the_files_names_the_expired_window(
    lake: Lake,
) -> None:
    # Given a consumer's position, then a delete that removes a file after it
    lake.create_table("ev", schema=SCHEMA, partition_by="day(ts)")
    rng = random.Random(5)
    for _ in range(4):
        lake.insert("ev", _batch(rng, 3))
    position = lake.table("ev").head_snapshot_id
    lake.delete("ev", where="true")

    def gc_in_between(con: Any) -> None:
        # The feed has listed its files and not read them yet: another process collects.
        lake.gc("ev", retention=timedelta(0))

    # When the window expires and its files go while the feed reads, the error says so
    with pytest.raises(SnapshotNotFoundError, match="expired while it read them"):
        read_changes(
            meta=lake.meta,
            objects=lake.objects,
            table="ev",
            since_snapshot=position,
            configure=gc_in_between,
        )
    # And reading again from the oldest snapshot kept answers
    kept = min(s.snapshot_id for s in lake.snapshots("ev") if not s.expired)
    assert lake.changes("ev", since_snapshot=kept).rows.num_rows == 0


def test_the_cli_prints_the_changes_and_where_to_ask_from_next(
    cli_env: str,  # noqa: F811  (the fixture imported above)
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    assert run("init")[0] == 0
    assert run("table", "create", "ev", "--schema", "ts TIMESTAMP NOT NULL, k VARCHAR")[0] == 0
    for n, key in enumerate(["a", "b"]):
        batch = tmp_path / f"{n}.ndjson"
        batch.write_text(json.dumps({"ts": f"2026-07-01T0{n}:00:00", "k": key}) + "\n")
        assert run("insert", "ev", str(batch))[0] == 0
    capsys.readouterr()
    code, out = run("changes", "ev", "--since", "1", "--format", "json")
    assert code == 0
    (row,) = json.loads(out)
    assert (row["k"], row["_change"], row["_snapshot"]) == ("b", "insert", 2)
    summary = json.loads(capsys.readouterr().err)
    assert summary["since_snapshot"] == 1 and summary["until_snapshot"] == 2
    assert isinstance(summary["table_id"], int)  # what the position is a position in
    assert (summary["inserts"], summary["deletes"], summary["files_read_whole"]) == (1, 0, 1)
    table_id = summary["table_id"]
    code, out = run("changes", "ev", "--since", "0", "--table-id", str(table_id))
    assert code == 0 and out.count("insert") == 2
    assert f"(next: --since 2 --table-id {table_id})" in capsys.readouterr().err
    # A position from the table of that name before it was dropped is refused
    assert run("table", "drop", "ev")[0] == 0
    assert run("table", "create", "ev", "--schema", "ts TIMESTAMP NOT NULL, k VARCHAR")[0] == 0
    capsys.readouterr()
    code, _ = run("changes", "ev", "--since", "0", "--table-id", str(table_id))
    refused = capsys.readouterr().err
    assert code == 1 and "start again from snapshot 0 with table_id=" in refused
    assert run("table", "drop", "ev")[0] == 0
    assert run("table", "create", "ev", "--schema", "ts TIMESTAMP NOT NULL, k VARCHAR")[0] == 0
    for n in range(2):
        assert run("insert", "ev", str(tmp_path / f"{n}.ndjson"))[0] == 0
    capsys.readouterr()
    code, _ = run("changes", "ev", "--since", "9")
    assert code != 0 and "snapshot 9" in capsys.readouterr().err
    code, _ = run("changes", "ev", "--since", "0", "--format", "parquet")
    assert code != 0 and "--format parquet needs --output" in capsys.readouterr().err
    parquet = tmp_path / "changes.parquet"
    code, _ = run("changes", "ev", "--since", "0", "--format", "parquet", "--output", str(parquet))
    assert code == 0 and pq.read_table(parquet).num_rows == 2


def test_spark_reads_the_same_feed(lake: Lake, spark: Any) -> None:
    from icefloe.spark import read_changes
    from support.nested_answers import spark_value

    lake.create_table("ev", schema=SCHEMA + ", at TIME, m MAP(VARCHAR, INTEGER)")
    rng = random.Random(11)
    rows = _batch(rng, 6)
    for n, row in enumerate(rows):
        row["at"] = f"0{n}:30:00"
        row["m"] = {"x": n}
    lake.insert("ev", rows[:3])
    start = lake.table("ev").head_snapshot_id
    lake.insert("ev", rows[3:])
    lake.delete("ev", where="v = " + str(rows[0]["v"]))
    feed = lake.changes("ev", since_snapshot=start)
    frame = read_changes(
        spark, "ev", since_snapshot=start, table_id=feed.table_id, runtime=lake.runtime
    )
    with pytest.raises(SnapshotNotFoundError, match="no table has now"):
        read_changes(
            spark, "ev", since_snapshot=start, table_id=feed.table_id + 99, runtime=lake.runtime
        )
    names = frame.columns
    assert names == feed.rows.column_names
    from_spark = sorted(
        (
            tuple(bytes(v) if n == ROW_ID_COLUMN else spark_value(v) for n, v in r.asDict().items())
            for r in frame.collect()
        ),
        key=repr,
    )
    from_duckdb = sorted(
        (
            tuple(v.isoformat() if n == "at" else plain_value(v) for n, v in row.items())
            for row in feed.rows.to_pylist(maps_as_pydicts="strict")
        ),
        key=repr,
    )
    assert from_spark == from_duckdb
    assert feed.inserts == 3 and feed.deletes >= 1


def test_an_aggregating_merge_shows_the_rows_it_rolled_up_as_deletes_and_inserts(
    lake: Lake,
) -> None:
    lake.create_table(
        "agg",
        schema="ts TIMESTAMP NOT NULL, k VARCHAR, n BIGINT",
        partition_by="day(ts)",
        merge="aggregate(k; ts:min, n:sum)",
    )
    rng = random.Random(5)
    for _ in range(6):
        lake.insert(
            "agg",
            [
                {"ts": "2026-07-01T00:00:00", "k": rng.choice("abc"), "n": rng.randrange(9)}
                for _ in range(4)
            ],
        )
    lake.delete("agg", where="n = 0")
    assert lake.merge("agg").count("committed") > 0
    head = lake.table("agg").head_snapshot_id

    def rows(at: int) -> Counter[tuple[Any, ...]]:
        if at == 0:
            return Counter()
        answer = lake.query(f"SELECT ts, k, n, {ROW_ID_COLUMN} FROM agg", snapshot_id=at)
        return Counter(tuple(r.values()) for r in answer.to_pylist())

    for since in range(head + 1):
        for until in range(since, head + 1):
            feed = lake.changes("agg", since_snapshot=since, until_snapshot=until)
            got: dict[str, Counter[tuple[Any, ...]]] = {"insert": Counter(), "delete": Counter()}
            for row in feed.rows.to_pylist():
                got[row["_change"]][(row["ts"], row["k"], row["n"], row[ROW_ID_COLUMN])] += 1
            assert got["insert"] == rows(until) - rows(since), (since, until)
            assert got["delete"] == rows(since) - rows(until), (since, until)
    # the merge alone: what it rolled up goes, the sums come, under the merge's snapshot
    merge = lake.changes("agg", since_snapshot=head - 1)
    assert merge.deletes > merge.inserts > 0
    assert set(merge.rows.column("_snapshot").to_pylist()) == {head}


def test_a_position_is_refused_on_another_table_and_on_a_table_created_again_under_its_name(
    lake: Lake,
) -> None:
    """Snapshot ids count from 1 in every table: a consumer's position (2) in a table dropped
    and created again under its name is snapshot 2 of the new table too, and read from there
    it would silently skip the new table's first two inserts. With the feed's table_id given
    back, it is refused instead."""
    schema = "ts TIMESTAMP NOT NULL, k VARCHAR"
    lake.create_table("ev", schema=schema, partition_by="day(ts)")
    for k in ["old1", "old2"]:
        lake.insert("ev", [{"ts": "2026-07-01T00:00:00", "k": k}])
    first = lake.changes("ev", since_snapshot=0)
    position, table_id = first.until_snapshot, first.table_id
    assert (position, table_id) == (2, lake.table("ev").table_id)
    lake.drop_table("ev")
    lake.create_table("ev", schema=schema, partition_by="day(ts)")
    for k in ["new1", "new2", "new3"]:
        lake.insert("ev", [{"ts": "2026-07-01T00:00:00", "k": k}])
    new_id = lake.table("ev").table_id
    assert new_id != table_id
    for since in (position, 0, 3):
        with pytest.raises(SnapshotNotFoundError, match="dropped and created again") as refused:
            lake.changes("ev", since_snapshot=since, table_id=table_id)
        assert f"of an earlier table 'ev' (table id {table_id})" in str(refused.value)
        assert f"start again from snapshot 0 with table_id={new_id}" in str(refused.value)

    # a position of another table, and of a table id no table has
    lake.create_table("other", schema=schema)
    lake.insert("other", [{"ts": "2026-07-01T00:00:00", "k": "o"}])
    other = lake.changes("other", since_snapshot=0)
    with pytest.raises(SnapshotNotFoundError, match=r"of another table, 'other' \(table id"):
        lake.changes("ev", since_snapshot=other.until_snapshot, table_id=other.table_id)
    with pytest.raises(SnapshotNotFoundError, match="which no table has now"):
        lake.changes("ev", since_snapshot=1, table_id=new_id + other.table_id + 1)

    # as the error says: from 0 with the new id, every row of the new table, then a loop
    again = lake.changes("ev", since_snapshot=0, table_id=new_id)
    assert sorted(again.rows.column("k").to_pylist()) == ["new1", "new2", "new3"]
    assert again.table_id == new_id
    lake.insert("ev", [{"ts": "2026-07-01T00:00:00", "k": "new4"}])
    nxt = lake.changes("ev", since_snapshot=again.until_snapshot, table_id=again.table_id)
    assert nxt.rows.column("k").to_pylist() == ["new4"]
    # the table_id of a table dropped after the position was taken is refused too
    lake.drop_table("ev")
    lake.create_table("ev", schema=schema)
    with pytest.raises(SnapshotNotFoundError, match=f"table id {new_id}"):
        lake.changes("ev", since_snapshot=0, table_id=nxt.table_id)


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("since_snapshot", "1"),
        ("since_snapshot", None),
        ("since_snapshot", True),
        ("since_snapshot", 1.0),
        ("since_snapshot", 1.5),
        ("until_snapshot", "2"),
        ("until_snapshot", 2.0),
        ("until_snapshot", False),
        ("table_id", "1"),
        ("table_id", True),
    ],
)
def test_a_snapshot_or_table_id_that_is_no_integer_is_refused_by_name(
    lake: Lake, argument: str, value: object
) -> None:
    lake.create_table("ev", schema="ts TIMESTAMP NOT NULL, k VARCHAR")
    for k in "ab":
        lake.insert("ev", [{"ts": "2026-07-01T00:00:00", "k": k}])
    arguments: dict[str, Any] = {"since_snapshot": 0, argument: value}
    with pytest.raises(InvalidInputError, match=f"{argument} must be an integer"):
        lake.changes("ev", **arguments)


def test_integers_of_other_types_are_taken_as_ints(lake: Lake) -> None:
    lake.create_table("ev", schema="ts TIMESTAMP NOT NULL, k VARCHAR")
    for k in "ab":
        lake.insert("ev", [{"ts": "2026-07-01T00:00:00", "k": k}])
    table_id = lake.table("ev").table_id
    feed = lake.changes(
        "ev", since_snapshot=np.int64(1), until_snapshot=np.int32(2), table_id=np.int64(table_id)
    )
    assert feed.rows.column("k").to_pylist() == ["b"]
    assert (type(feed.since_snapshot), type(feed.until_snapshot)) == (int, int)
    assert (feed.since_snapshot, feed.until_snapshot, feed.table_id) == (1, 2, table_id)


def test_a_column_named_filename_is_read_like_any_other(lake: Lake) -> None:
    """The feed reads row ids with DuckDB's read_parquet, which can add each row's file name
    as a column: under a name no user column can take, so a column ``filename`` (in files
    written before it was dropped too) is just a column."""
    lake.create_table(
        "ev", schema="ts TIMESTAMP NOT NULL, filename VARCHAR, k VARCHAR", partition_by="day(ts)"
    )
    lake.insert("ev", [{"ts": "2026-07-01T00:00:00", "filename": "a.txt", "k": "a"}])
    lake.insert("ev", [{"ts": "2026-07-01T00:00:00", "filename": "b.txt", "k": "b"}])
    lake.delete("ev", where="k = 'a'")
    feed = lake.changes("ev", since_snapshot=1)
    assert [(r["filename"], r["_change"]) for r in feed.rows.to_pylist()] == [
        ("b.txt", "insert"),
        ("a.txt", "delete"),
    ]
    lake.alter_table("ev", drop_columns=["filename"])
    lake.insert("ev", [{"ts": "2026-07-01T00:00:00", "k": "c"}])
    after = lake.changes("ev", since_snapshot=0)
    assert "filename" not in after.rows.column_names
    assert sorted(after.rows.column("k").to_pylist()) == ["b", "c"]
    assert after.inserts == 2 and after.deletes == 0
