"""Schema evolution: add, drop, rename and widen columns across inserts, every merge mode,
pruning, time travel, deletes, rollback and the notebook client. Files are never rewritten by
a change; each is read by the layout of the version it was written at."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from icefloe.errors import InvalidInputError, SpecError
from icefloe.ingest import Inserter
from icefloe.lake import Lake as OpenedLake
from icefloe.lifecycle import alter_table, delete_rows, rollback_table
from icefloe.lifecycle.alter import add_column, drop_column, rename_column, widen_column
from icefloe.lifecycle.delete import DeletePlanner
from icefloe.merge import MergeWorker, merge_locally
from icefloe.query import QueryEngine
from icefloe.settings import load_settings
from icefloe.spec import SizeTargets, TableSpec
from icefloe.spec.evolution import SchemaChange
from support.hooked_meta import HookedMetaStore, PendingCommit
from support.merge_lake import Lake

pytestmark = pytest.mark.integration

START = datetime(2026, 5, 1)
SCHEMA = "ts TIMESTAMP NOT NULL, user_id VARCHAR, n INTEGER, price FLOAT, note VARCHAR"


def create(lake: Lake, *, merge: str = "append", sort_by: str = "user_id") -> TableSpec:
    spec = TableSpec.create(
        name="t",
        schema=SCHEMA,
        partition_by="day(ts)",
        sort_by=sort_by,
        merge=merge,
        sizes=SizeTargets(min_files_to_merge=2),
    )
    lake.meta.create_table(spec)
    return spec


def old_rows(seed: int, count: int = 40) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "ts": (START + timedelta(hours=rng.randrange(48))).isoformat(),
            "user_id": f"u{rng.randrange(6)}",
            "n": rng.choice([None, rng.randrange(-50, 50)]),
            "price": rng.choice([None, 0.5, 1.25, 2.0]),
            "note": rng.choice([None, "a", "b"]),
        }
        for _ in range(count)
    ]


def new_rows(seed: int, count: int = 40) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "ts": (START + timedelta(hours=rng.randrange(48))).isoformat(),
            "user_id": f"u{rng.randrange(6)}",
            "amount": rng.choice([None, rng.randrange(-50, 50), 3_000_000_000 + rng.randrange(9)]),
            "price": rng.choice([None, 0.1, 1e300]),
            "note": rng.choice([None, rng.randrange(10)]),
            "country": rng.choice([None, "de", "fr"]),
        }
        for _ in range(count)
    ]


# The changes of the main scenario: every kind, a drop and a re-add of the same name.
CHANGES: list[SchemaChange] = [
    add_column("country VARCHAR"),
    rename_column("n=amount"),
    widen_column("amount BIGINT"),
    widen_column("price DOUBLE"),
    drop_column("note"),
    add_column("note INTEGER"),
]


def as_new(row: dict[str, Any]) -> dict[str, Any]:
    """An old row as the evolved schema reads it."""
    return {
        "ts": row["ts"],
        "user_id": row["user_id"],
        "amount": row["n"],
        "price": row["price"],
        "note": None,  # the old note was dropped: the new one is empty in old rows
        "country": None,
    }


def query(lake: Lake, sql: str, *, snapshot_id: int | None = None) -> list[tuple[Any, ...]]:
    result = lake.engine.query(sql, snapshot_id=snapshot_id).rows
    return sorted(
        (tuple(r.values()) for r in result.to_pylist()), key=lambda t: tuple(map(repr, t))
    )


def expected(rows: list[dict[str, Any]], columns: list[str]) -> list[tuple[Any, ...]]:
    def value(row: dict[str, Any], column: str) -> Any:
        v = row[column]
        return datetime.fromisoformat(v) if column == "ts" else v

    return sorted(
        (tuple(value(r, c) for c in columns) for r in rows), key=lambda t: tuple(map(repr, t))
    )


NEW_COLUMNS = ["ts", "user_id", "amount", "price", "country", "note"]
NEW_SELECT = "SELECT ts, user_id, amount, price, country, note FROM t"


def evolved_lake(lake: Lake) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """Old rows in several files, the changes, then new rows: (old, new, last old snapshot)."""
    create(lake)
    before: list[dict[str, Any]] = []
    for seed in range(3):
        batch = old_rows(seed)
        lake.inserter.insert_rows("t", batch)
        before += batch
    old_head = lake.head("t")
    alter_table(meta=lake.meta, table="t", changes=CHANGES)
    after: list[dict[str, Any]] = []
    for seed in range(10, 13):
        batch = new_rows(seed)
        lake.inserter.insert_rows("t", batch)
        after += batch
    return before, after, old_head


def test_old_files_read_by_id_and_a_pinned_query_keeps_the_old_schema(lake: Lake) -> None:
    before, after, old_head = evolved_lake(lake)
    spec = lake.meta.get_table("t").spec
    assert spec.version == 2 and spec.column_names == tuple(NEW_COLUMNS)
    # Then old rows read the added and re-added columns as NULL, the renamed one keeps its data
    assert query(lake, NEW_SELECT) == expected([as_new(r) for r in before] + after, NEW_COLUMNS)
    # A query pinned before the change sees the old schema and the old note values
    old_columns = ["ts", "user_id", "n", "price", "note"]
    assert query(
        lake, "SELECT ts, user_id, n, price, note FROM t", snapshot_id=old_head
    ) == expected(before, old_columns)
    with pytest.raises(Exception, match="amount"):
        lake.engine.query("SELECT amount FROM t", snapshot_id=old_head)
    # The alter's own snapshot changed no file and records the version
    alter = lake.meta.snapshots("t")[old_head]
    assert (alter.operation, alter.files_added, alter.files_removed, alter.spec_version) == (
        "alter",
        0,
        0,
        2,
    )
    # Widened values beyond the old type are stored and read exactly
    assert query(lake, "SELECT count(*) FROM t WHERE amount > 2147483647") == [
        (sum(1 for r in after if (r["amount"] or 0) > 2**31 - 1),)
    ]


@pytest.mark.parametrize(
    ("where", "check"),
    [
        ("amount = 7", lambda r: r["amount"] == 7),
        ("amount > 3000000003", lambda r: (r["amount"] or 0) > 3_000_000_003),
        ("note IS NULL", lambda r: r["note"] is None),
        ("note = 3", lambda r: r["note"] == 3),
        ("country IS NOT NULL", lambda r: r["country"] is not None),
        (
            "user_id = 'u1' AND amount < 0",
            lambda r: r["user_id"] == "u1" and (r["amount"] or 0) < 0,
        ),
    ],
)
def test_pruning_over_old_and_new_files_gives_the_unpruned_answer(
    lake: Lake, where: str, check: Any
) -> None:
    before, after, _ = evolved_lake(lake)
    rows = [as_new(r) for r in before] + after
    want = expected([r for r in rows if check(r) is True], NEW_COLUMNS)
    result = lake.engine.query(f"{NEW_SELECT} WHERE {where}")
    got = sorted(
        (tuple(r.values()) for r in result.rows.to_pylist()), key=lambda t: tuple(map(repr, t))
    )
    assert got == want


def test_statistics_of_a_renamed_column_still_prune_old_files(lake: Lake) -> None:
    create(lake)
    lake.inserter.insert_rows("t", [{"ts": START.isoformat(), "n": 1}])
    lake.inserter.insert_rows("t", [{"ts": START.isoformat(), "n": 100}])
    alter_table(meta=lake.meta, table="t", changes=[rename_column("n=amount")])
    result = lake.engine.query("SELECT amount FROM t WHERE amount = 100")
    assert result.rows.to_pylist() == [{"amount": 100}]
    plan = result.plan("t")
    assert (plan.files_considered, plan.files_scanned) == (2, 1)
    # A dropped and re-added name never uses the old column's statistics
    alter_table(
        meta=lake.meta,
        table="t",
        changes=[drop_column("amount"), add_column("amount INTEGER")],
    )
    result = lake.engine.query("SELECT count(*) AS c FROM t WHERE amount IS NULL")
    assert result.rows.to_pylist() == [{"c": 2}]


@pytest.mark.parametrize(
    ("mode", "changes", "check"),
    [
        ("append", CHANGES, "rows"),
        ("replace(user_id; version=ts)", [rename_column("user_id=uid"), *CHANGES[:1]], "latest"),
        (
            "aggregate(user_id; ts:max, n:sum, price:max, note:any)",
            [add_column("country VARCHAR"), widen_column("n BIGINT")],
            "sums",
        ),
        ("sql:SELECT * FROM t", [add_column("country VARCHAR"), rename_column("n=amount")], "rows"),
    ],
    ids=["append", "replace", "aggregate", "custom"],
)
def test_each_merge_mode_merges_files_of_several_versions(
    lake: Lake, mode: str, changes: list[SchemaChange], check: str
) -> None:
    create(lake, merge=mode, sort_by="")
    rows = []
    for seed in range(3):
        batch = old_rows(seed, count=20)
        lake.inserter.insert_rows("t", batch)
        rows += batch
    alter_table(meta=lake.meta, table="t", changes=changes)
    spec = lake.meta.get_table("t").spec
    names = spec.column_names
    extra = []
    for seed in range(10, 12):
        batch = [
            {names[spec.column_ids.index(i)]: v for i, v in zip((1, 2, 3, 4), values, strict=True)}
            for values in [(r["ts"], r["user_id"], r["n"], r["price"]) for r in old_rows(seed, 20)]
        ]
        lake.inserter.insert_rows("t", batch)
        extra += [
            dict(zip(("ts", "user_id", "n", "price"), r.values(), strict=False)) for r in batch
        ]
    key, n = names[1], names[2]
    before = lake.rows(f"SELECT {key}, count(*) AS c, sum({n}) AS s FROM t GROUP BY ALL ORDER BY 1")
    report = lake.merge("t")
    assert report.count("committed") > 0, report
    live = lake.meta.files("t")
    assert {f.spec_version for f in live} == {spec.version}
    after = lake.rows(f"SELECT {key}, count(*) AS c, sum({n}) AS s FROM t GROUP BY ALL ORDER BY 1")
    if check == "rows":
        assert after == before
    elif check == "sums":  # one row per key and day; the sums are kept
        assert [(r[key], r["s"]) for r in after] == [(r[key], r["s"]) for r in before]
        per_day = lake.rows(f"SELECT {key}, ts::DATE AS d, count(*) AS c FROM t GROUP BY ALL")
        assert {r["c"] for r in per_day} == {1}
    else:  # replace: one row per key and day, the one with the latest ts
        per_day = lake.rows(f"SELECT {key}, ts::DATE AS d, count(*) AS c FROM t GROUP BY ALL")
        assert {r["c"] for r in per_day} == {1}
        all_rows = rows + extra
        latest = {}
        for r in all_rows:
            k = (r["user_id"], r["ts"][:10])
            latest[k] = max(latest.get(k, ""), r["ts"])
        got = lake.rows(f"SELECT {key} AS k, strftime(ts, '%Y-%m-%dT%H:%M:%S') AS t FROM t")
        assert sorted((r["k"], r["t"]) for r in got) == sorted((k[0], v) for k, v in latest.items())


def test_a_merge_read_at_the_old_version_commits_after_the_change_and_reads_right(
    lake: Lake,
) -> None:
    create(lake)
    rows = old_rows(1, 20) + old_rows(2, 20) + old_rows(3, 20)
    for start in (0, 20, 40):
        lake.inserter.insert_rows("t", rows[start : start + 20])

    def change_schema(_: PendingCommit) -> None:
        if lake.meta.get_table("t").spec.version == 1:
            alter_table(meta=lake.meta, table="t", changes=[rename_column("n=amount")])

    with HookedMetaStore.like(lake.meta, before_commit=change_schema) as changing_meta:
        worker = MergeWorker(meta=changing_meta, objects=lake.objects)
        report = merge_locally(meta=lake.meta, worker=worker, table="t", until_quiet=False)
    assert report.count("committed") == 2, report
    # The first merge wrote at version 1 and committed after the change; the second read at 2
    assert {f.spec_version for f in lake.meta.files("t")} == {1, 2}
    assert lake.meta.get_table("t").spec.version == 2
    got = lake.rows("SELECT amount FROM t WHERE amount IS NOT NULL ORDER BY amount")
    assert [r["amount"] for r in got] == sorted(r["n"] for r in rows if r["n"] is not None)


def test_delete_and_rollback_follow_the_evolved_schema(lake: Lake) -> None:
    before, after, old_head = evolved_lake(lake)
    rows = [as_new(r) for r in before] + after
    result = delete_rows(meta=lake.meta, objects=lake.objects, table="t", where="user_id = 'u1'")
    assert result.rows_deleted == sum(1 for r in rows if r["user_id"] == "u1")
    rewritten = [f for f in lake.meta.files("t") if f.begin_snapshot == result.snapshot_id]
    assert rewritten and {f.spec_version for f in rewritten} == {2}
    assert query(lake, NEW_SELECT) == expected(
        [r for r in rows if r["user_id"] != "u1"], NEW_COLUMNS
    )
    # Rolling back restores data, not schema: the old files read with the current columns
    rollback_table(meta=lake.meta, objects=lake.objects, table="t", to_snapshot=old_head)
    assert lake.meta.get_table("t").spec.version == 2
    assert query(lake, NEW_SELECT) == expected([as_new(r) for r in before], NEW_COLUMNS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (drop_column("ts"), "partition source"),
        (rename_column("ts=time"), "partition source"),
        (widen_column("note INTEGER"), "not a widening"),
        (widen_column("n SMALLINT"), "not a widening"),
        (rename_column("n=price"), "duplicate column"),
        (drop_column("nope"), "no such column"),
        (add_column("x INTEGER NOT NULL"), "must be nullable"),
        (add_column("price DOUBLE"), "duplicate column"),
    ],
)
def test_a_refused_change_names_itself_and_changes_nothing(
    lake: Lake, change: SchemaChange, message: str
) -> None:
    create(lake)
    lake.inserter.insert_rows("t", old_rows(1, 5))
    head = lake.head("t")
    with pytest.raises(SpecError, match=message):
        alter_table(meta=lake.meta, table="t", changes=[add_column("ok VARCHAR"), change])
    assert lake.head("t") == head and lake.meta.get_table("t").spec.version == 1


def test_keys_of_the_merge_and_the_row_group_key_are_kept(lake: Lake) -> None:
    spec = TableSpec.create(
        name="k",
        schema="ts TIMESTAMP NOT NULL, user_id VARCHAR, v INTEGER",
        partition_by="day(ts)",
        row_group_by="user_id",
        merge="replace(v)",
    )
    lake.meta.create_table(spec)
    with pytest.raises(SpecError, match="row-group key"):
        alter_table(meta=lake.meta, table="k", changes=[drop_column("user_id")])
    with pytest.raises(SpecError, match="replace merge keys on it"):
        alter_table(meta=lake.meta, table="k", changes=[drop_column("v")])
    renamed = alter_table(meta=lake.meta, table="k", changes=[rename_column("v=w")])
    assert renamed.spec.merge.to_text() == "replace(w)"


def test_a_custom_merge_query_that_no_longer_fits_refuses_the_change(lake: Lake) -> None:
    create(lake, merge="sql:SELECT ts, user_id, n, price, note, _row_id FROM t")
    with pytest.raises(Exception, match="custom merge query"):
        alter_table(meta=lake.meta, table="t", changes=[rename_column("n=amount")])
    assert lake.meta.get_table("t").spec.version == 1


def test_the_notebook_client_reads_the_evolved_and_the_pinned_schema(
    postgres_dsn: str, schema_name: str, tmp_path: Path
) -> None:
    settings = load_settings(
        {
            "ICEFLOE_HOME": str(tmp_path),
            "ICEFLOE_DATABASE_URL": postgres_dsn,
            "ICEFLOE_DATABASE_SCHEMA": schema_name,
        }
    )
    opened = OpenedLake.open(settings)
    runtime = opened.runtime
    runtime.meta.migrate()
    inserter = Inserter(meta=runtime.meta, objects=runtime.objects)
    lake = Lake(
        meta=runtime.meta,
        objects=runtime.objects,  # type: ignore[arg-type]
        inserter=inserter,
        worker=MergeWorker(meta=runtime.meta, objects=runtime.objects),
        engine=QueryEngine(meta=runtime.meta, objects=runtime.objects),
    )
    try:
        before, after, old_head = evolved_lake(lake)
        got = opened.duckdb().execute(NEW_SELECT).fetchall()
        assert sorted(got, key=lambda t: tuple(map(repr, t))) == expected(
            [as_new(r) for r in before] + after, NEW_COLUMNS
        )
        old = opened.relation("t", snapshot_id=old_head)
        assert old.columns == ["ts", "user_id", "n", "price", "note", "_row_id"]
        assert sorted(
            old.project("ts, user_id, n, price, note").fetchall(),
            key=lambda t: tuple(map(repr, t)),
        ) == expected(before, ["ts", "user_id", "n", "price", "note"])
    finally:
        lake.engine.close()
        inserter.close()
        opened.close()


def test_a_delete_planned_again_after_a_schema_change_checks_its_predicate_again(
    lake: Lake,
) -> None:
    create(lake)
    lake.inserter.insert_rows("t", old_rows(1, 20))
    planner = DeletePlanner(engine=lake.engine, meta=lake.meta, table="t", where="price > 1")
    alter_table(meta=lake.meta, table="t", changes=[add_column("country VARCHAR")])
    plan = planner.plan()
    assert planner.spec.version == 2 and plan.candidates
    alter_table(meta=lake.meta, table="t", changes=[rename_column("price=cost")])
    with pytest.raises(InvalidInputError, match="price"):
        planner.plan()


def test_a_widening_alone_reads_old_and_new_files_each_at_its_own_width(lake: Lake) -> None:
    # (the names are the same in both versions: only the types tell the files apart)
    create(lake)
    lake.inserter.insert_rows("t", [{"ts": START.isoformat(), "n": 7, "price": 0.5}])
    alter_table(
        meta=lake.meta, table="t", changes=[widen_column("n BIGINT"), widen_column("price DOUBLE")]
    )
    lake.inserter.insert_rows("t", [{"ts": START.isoformat(), "n": 2**40, "price": 1e300}])
    assert lake.rows("SELECT n, price FROM t ORDER BY n") == [
        {"n": 7, "price": 0.5},
        {"n": 2**40, "price": 1e300},
    ]
    assert lake.rows("SELECT count(*) AS c FROM t WHERE n > 2147483647") == [{"c": 1}]
