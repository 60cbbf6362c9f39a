"""The reader contract: with nothing but SQL against the meta store and a Parquet reader, a
program outside icefloe reads every snapshot of a table exactly as icefloe's own query does,
through renames, widenings, added and dropped columns, merges and deletes.

The reader here is built from the contract's rows alone: psycopg for the SQL (the functions
called by their schema-qualified names, as another language's client would) and plain DuckDB's
``read_parquet`` for the files.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest

from icefloe.lake import Lake
from icefloe.spec import SizeTargets
from support.query_fuzz import canonical

pytestmark = pytest.mark.integration


@pytest.fixture
def contract(postgres_dsn: str, schema_name: str) -> Iterator[Any]:
    """Calls a contract function by its qualified name; returns its rows as dicts."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:

        def call(function: str, table: str, snapshot: int | None = None) -> list[dict[str, Any]]:
            cursor = conn.execute(
                f'SELECT * FROM "{schema_name}".{function}(%s, %s)', (table, snapshot)
            )
            names = [d.name for d in cursor.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

        yield call


def _rows(rng: random.Random, count: int, columns: dict[str, str]) -> list[dict[str, object]]:
    start = datetime(2026, 5, 1)

    def value(kind: str) -> object:
        if rng.random() < 0.1:
            return None
        if kind == "VARCHAR":
            return rng.choice(["a", "b", "c"]) + str(rng.randrange(100))
        if kind in ("INTEGER", "BIGINT"):
            return rng.randint(-(2**31), 2**31 - 1)
        return rng.uniform(-100, 100)

    return [
        {
            "ts": (start + timedelta(minutes=rng.randrange(3 * 24 * 60))).isoformat(),
            **{name: value(kind) for name, kind in columns.items()},
        }
        for _ in range(count)
    ]


def _read_as_contract_says(
    contract: Any, warehouse: Path, table: str, snapshot: int | None
) -> tuple[list[str], list[tuple[object, ...]]]:
    """The snapshot's rows, read by plain DuckDB from the files the contract lists, each file's
    columns taken and cast as the contract says."""
    columns = contract("icefloe_table_columns", table, snapshot)
    by_file: dict[str, list[dict[str, Any]]] = {}
    for row in contract("icefloe_file_columns", table, snapshot):
        by_file.setdefault(row["path"], []).append(row)
    listed = {f["path"] for f in contract("icefloe_snapshot_files", table, snapshot)}
    assert listed == set(by_file)
    names = [c["name"] for c in columns]
    con = duckdb.connect()
    rows: list[tuple[object, ...]] = []
    for path, mapping in by_file.items():
        select = ", ".join(
            f"CAST({'NULL' if m['file_column'] is None else chr(34) + m['file_column'] + chr(34)}"
            f" AS {m['type']})"
            for m in sorted(mapping, key=lambda m: m["position"])
        )
        rows += con.execute(f"SELECT {select} FROM read_parquet('{warehouse / path}')").fetchall()
    con.close()
    return names, rows


def test_every_snapshot_reads_through_the_contract_as_icefloe_reads_it(
    connected_lake: Lake, contract: Any
) -> None:
    rng = random.Random(20261128)
    lake = connected_lake
    lake.create_table(
        "t",
        schema="ts TIMESTAMP NOT NULL, user_id VARCHAR, n INTEGER, note VARCHAR",
        partition_by="day(ts)",
        sizes=SizeTargets(min_files_to_merge=2),
    )
    columns = {"user_id": "VARCHAR", "n": "INTEGER", "note": "VARCHAR"}

    def insert() -> None:
        lake.insert("t", _rows(rng, rng.randint(20, 60), columns))

    # A history: inserts around a rename, a widening, an added and a dropped column, a merge
    # and a delete
    insert()
    insert()
    lake.alter_table("t", rename_columns={"note": "comment"})
    columns["comment"] = columns.pop("note")
    insert()
    lake.alter_table("t", widen=["n BIGINT"])
    columns["n"] = "BIGINT"
    insert()
    lake.alter_table("t", add_columns=["score DOUBLE"])
    columns["score"] = "DOUBLE"
    insert()
    lake.merge("t")
    lake.delete("t", "n % 3 = 0")
    lake.alter_table("t", drop_columns=["user_id"])
    del columns["user_id"]
    insert()

    snapshots = [s.snapshot_id for s in lake.snapshots("t")]
    assert len(snapshots) >= 10
    warehouse = Path(lake.objects.root_uri)
    for snapshot in snapshots:
        names, read = _read_as_contract_says(contract, warehouse, "t", snapshot)
        icefloe = lake.query(
            f"SELECT {', '.join(chr(34) + n + chr(34) for n in names)} FROM t",
            snapshot_id=snapshot,
        )
        assert icefloe.column_names == names
        assert canonical(read) == canonical([tuple(r.values()) for r in icefloe.to_pylist()]), (
            f"snapshot {snapshot}"
        )
    # Without an id, the head
    assert _read_as_contract_says(contract, warehouse, "t", None) == _read_as_contract_says(
        contract, warehouse, "t", snapshots[-1]
    )


def test_the_head_is_the_default_and_unknown_snapshots_give_no_rows(
    connected_lake: Lake, contract: Any
) -> None:
    connected_lake.create_table("t", schema="ts TIMESTAMP NOT NULL, v INTEGER")
    connected_lake.insert("t", [{"ts": "2026-05-01T00:00:00", "v": 1}])
    connected_lake.insert("t", [{"ts": "2026-05-01T00:00:01", "v": 2}])
    head = contract("icefloe_snapshot", "t")
    assert [(r["snapshot_id"], r["spec_version"]) for r in head] == [(2, 1)]
    assert len(contract("icefloe_snapshot_files", "t")) == 2
    assert len(contract("icefloe_snapshot_files", "t", 1)) == 1
    assert contract("icefloe_snapshot_files", "t", 99) == []
    assert contract("icefloe_snapshot_files", "no_such_table") == []
    columns = contract("icefloe_table_columns", "t")
    assert [(c["position"], c["name"], c["type"], c["nullable"]) for c in columns] == [
        (1, "ts", "TIMESTAMP", False),
        (2, "v", "INTEGER", True),
    ]
    connected_lake.drop_table("t")
    assert contract("icefloe_snapshot_files", "t") == []


# Version 1 as published: a later migration may add result columns at the end, never change
# these (a test failing here means the contract broke for readers in other languages).
CONTRACT_V1 = {
    "icefloe_reader_contract": ("", "integer"),
    "icefloe_snapshot": (
        "table_name text, snapshot bigint DEFAULT NULL::bigint",
        "TABLE(table_id bigint, snapshot_id bigint, spec_version integer)",
    ),
    "icefloe_snapshot_files": (
        "table_name text, snapshot bigint DEFAULT NULL::bigint",
        "TABLE(path text, partition_path text, partition_values jsonb, size_bytes bigint,"
        " row_count bigint, spec_version integer)",
    ),
    "icefloe_table_columns": (
        "table_name text, snapshot bigint DEFAULT NULL::bigint",
        'TABLE("position" integer, name text, type text, nullable boolean, column_id integer,'
        " expression text)",
    ),
    "icefloe_file_columns": (
        "table_name text, snapshot bigint DEFAULT NULL::bigint",
        'TABLE(path text, "position" integer, name text, type text, file_column text,'
        " file_type text)",
    ),
}


def test_the_contract_keeps_its_version_1_signatures(
    postgres_dsn: str, connected_lake: Lake, schema_name: str
) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute(
            "SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid)"
            " FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s AND p.proname LIKE 'icefloe\\_%%'",
            (schema_name,),
        ).fetchall()
        version = conn.execute(f'SELECT "{schema_name}".icefloe_reader_contract()').fetchone()
    found = {name: (arguments, result) for name, arguments, result in rows}
    for name, (arguments, result) in CONTRACT_V1.items():
        assert found[name][0] == arguments, name
        # Result columns may only be added at the end
        assert found[name][1].startswith(result.removesuffix(")")), (name, found[name][1])
    assert version == (1,)
