"""An append merge sorted in Arrow writes exactly the files the DuckDB path writes, and every
group the Arrow path may not take goes through DuckDB.

The differential: random tables (columns of sixteen types, NULLs, ties, -0.0, empty and
non-ASCII text, one to three sort keys among the sortable columns) get a few inserts into one
partition; the table's files are copied under a twin table, and the original is merged with
the worker's defaults while the twin is merged with ``sort_in_memory=False``. The two must
produce the same files: the same rows in the same order, the same row groups, the same
statistics in the meta store.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.ingest import Inserter
from icefloe.lifecycle import alter_table
from icefloe.lifecycle.alter import add_column
from icefloe.merge import MergeLimits, MergeWorker, merge_locally
from icefloe.merge.in_memory import PARQUET_SHARE
from icefloe.metastore.models import DataFile, NewFile
from icefloe.metastore.store import MetaStore
from icefloe.spec import SizeTargets, TableSpec
from icefloe.storage import LocalObjectStore

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("ICEFLOE_FUZZ_SEED", "20261125"))
CASES = int(os.environ.get("ICEFLOE_MERGE_IN_MEMORY_FUZZ", "40"))
DAY = datetime(2026, 3, 1)


def _text(rng: random.Random) -> str:
    return rng.choice(["", "a", "b", "ab", "é", "Z", "zz", "a\tb", "日本", "aa"])


# Column types: the Arrow type inserts take, and a random value (None: NULL).
TYPES: dict[str, tuple[pa.DataType, Callable[[random.Random], Any]]] = {
    "BIGINT": (pa.int64(), lambda r: r.randint(-3, 3) * 10 ** r.randint(0, 17)),
    "INTEGER": (pa.int32(), lambda r: r.randint(-5, 5)),
    "SMALLINT": (pa.int16(), lambda r: r.randint(-3, 3)),
    "DOUBLE": (pa.float64(), lambda r: r.choice([-0.0, 0.0, 1.5, -2.25, 1e300, -1e-300, 3.0])),
    "DECIMAL(18,3)": (pa.decimal128(18, 3), lambda r: Decimal(r.randint(-999, 999)) / 100),
    "DECIMAL(38,10)": (pa.decimal128(38, 10), lambda r: Decimal(r.randint(-(10**20), 10**20))),
    "VARCHAR": (pa.string(), _text),
    "BOOLEAN": (pa.bool_(), lambda r: r.random() < 0.5),
    "DATE": (pa.date32(), lambda r: date(2026, 1, 1) + timedelta(days=r.randint(-400, 400))),
    "TIMESTAMPTZ": (
        pa.timestamp("us", tz="UTC"),
        lambda r: datetime(2026, 3, 1, tzinfo=UTC) + timedelta(seconds=r.randint(0, 9)),
    ),
    "BLOB": (pa.binary(), lambda r: bytes(r.choice([b"", b"\x00", b"\xff", b"ab", b"\x00\x01"]))),
    "JSON": (pa.string(), lambda r: json.dumps({"k": r.randint(0, 3), "s": _text(r)})),
    "UUID": (
        pa.string(),
        lambda r: f"0000000{r.randint(0, 9)}-0000-4000-8000-00000000000{r.randint(0, 9)}",
    ),
    "STRUCT(a INTEGER, b VARCHAR)": (
        pa.struct([("a", pa.int32()), ("b", pa.string())]),
        lambda r: {"a": r.randint(0, 3), "b": _text(r)},
    ),
    "INTEGER[]": (
        pa.list_(pa.int32()),
        lambda r: [r.randint(0, 9) for _ in range(r.randint(0, 3))],
    ),
    "MAP(VARCHAR, BIGINT)": (
        pa.map_(pa.string(), pa.int64()),
        lambda r: [(k, r.randint(0, 9)) for k in r.sample(["x", "y", "z"], r.randint(0, 3))],
    ),
}
SORTABLE = (
    "BIGINT",
    "INTEGER",
    "SMALLINT",
    "DOUBLE",
    "DECIMAL(18,3)",
    "VARCHAR",
    "BOOLEAN",
    "DATE",
    "TIMESTAMPTZ",
    "UUID",  # orderable, but sorted in DuckDB: its order in Arrow is not checked to be DuckDB's
)


def random_table(rng: random.Random, name: str) -> tuple[TableSpec, list[str]]:
    """A table of ``ts`` (the day partition) and 3 to 8 columns of random types, sorted by one
    to three of its sortable columns, now and then with the first as its row-group key and
    row groups of a few rows; and the columns' types."""
    kinds = rng.sample(sorted(TYPES), rng.randint(3, 8))
    columns = [f"c{i}" for i in range(len(kinds))]
    schema = ", ".join(
        ["ts TIMESTAMP NOT NULL", *(f"{c} {k}" for c, k in zip(columns, kinds, strict=True))]
    )
    sortable = [c for c, k in zip(columns, kinds, strict=True) if k in SORTABLE] + ["ts"]
    keys = rng.sample(sortable, min(len(sortable), rng.randint(1, 3)))
    spec = TableSpec.create(
        name=name,
        schema=schema,
        partition_by="day(ts)",
        sort_by=", ".join(keys),
        row_group_by=keys[0] if rng.random() < 0.5 else None,
        sizes=SizeTargets(
            min_files_to_merge=2, row_group_target_bytes=rng.choice([256, 2048, 16 * 2**20])
        ),
    )
    return spec, kinds


def random_batch(rng: random.Random, kinds: Sequence[str]) -> pa.Table:
    rows = rng.randint(30, 60)  # batches of like sizes merge (see SizeTargets.merge_size_ratio)
    data: dict[str, pa.Array] = {
        "ts": pa.array(
            [DAY + timedelta(seconds=rng.randint(0, 5)) for _ in range(rows)], pa.timestamp("us")
        )
    }
    for i, kind in enumerate(kinds):
        arrow_type, value = TYPES[kind]
        data[f"c{i}"] = pa.array(
            [None if rng.random() < 0.15 else value(rng) for _ in range(rows)], arrow_type
        )
    return pa.table(data)


def twin(meta: MetaStore, objects: LocalObjectStore, table: str, spec: TableSpec) -> None:
    """``spec``'s table holding copies of ``table``'s files."""
    meta.create_table(spec)
    files = []
    for f in meta.files(table):
        key = f.path.replace(f"{table}/", f"{spec.name}/", 1)
        objects.copy(f.path, key)
        files.append(_copy_of(f, key))
    meta.commit_append(spec.name, files=files)


def _copy_of(f: DataFile, key: str) -> NewFile:
    return NewFile(
        path=key,
        partition_path=f.partition_path,
        partition_values=dict(f.partition_values),
        partition_start=f.partition_start,
        size_bytes=f.size_bytes,
        row_count=f.row_count,
        row_group_count=f.row_group_count,
        column_stats=dict(f.column_stats),
        spec_version=f.spec_version,
    )


def merged(meta: MetaStore, worker: MergeWorker, table: str) -> list[str]:
    """Merge ``table`` until quiet; where each committed merge sorted its rows."""
    report = merge_locally(meta=meta, worker=worker, table=table, until_quiet=True)
    assert not report.dead_letters
    return [o.sorted_in or "" for o in report.outcomes if o.status == "committed"]


def written(meta: MetaStore, objects: LocalObjectStore, table: str) -> list[tuple[Any, ...]]:
    """Each live file of ``table``, in the order written: its rows, row group sizes and
    statistics."""
    out = []
    for f in sorted(meta.files(table), key=lambda f: f.file_id):
        parquet = pq.ParquetFile(objects.uri(f.path))
        groups = [parquet.metadata.row_group(i).num_rows for i in range(f.row_group_count)]
        out.append((parquet.read(), groups, f.row_count, dict(f.column_stats)))
    return out


def test_arrow_and_duckdb_merges_write_the_same_files(meta: MetaStore, tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path / "warehouse")
    inserter = Inserter(meta=meta, objects=objects)
    in_arrow = MergeWorker(meta=meta, objects=objects)
    in_duckdb = MergeWorker(meta=meta, objects=objects, limits=MergeLimits(sort_in_memory=False))
    counts = {"arrow": 0, "duckdb": 0, "rows": 0}
    try:
        for number in range(CASES):
            rng = random.Random(f"{SEED}:in-memory:{number}")
            spec, kinds = random_table(rng, f"a{number}")
            name, other = spec.name, f"d{number}"
            meta.create_table(spec)
            for _ in range(rng.randint(3, 5)):
                inserter.insert_arrow(name, random_batch(rng, kinds))
            rows = sum(f.row_count for f in meta.files(name))
            twin(meta, objects, name, replace(meta.get_table(name).spec, name=other))

            case = f"case {number}: {kinds}, sorted by {spec.file_sort_keys}"
            paths = merged(meta, in_arrow, name)
            uuid_key = any(kinds[int(k[1:])] == "UUID" for k in spec.file_sort_keys if k != "ts")
            assert paths and set(paths) == {"duckdb" if uuid_key else "arrow"}, case
            assert merged(meta, in_duckdb, other) == ["duckdb"] * len(paths), case
            got, want = written(meta, objects, name), written(meta, objects, other)
            assert len(got) == len(want), case
            for (g_rows, g_groups, g_count, g_stats), (w_rows, w_groups, w_count, w_stats) in zip(
                got, want, strict=True
            ):
                assert g_rows.equals(w_rows), case
                assert (g_groups, g_count, g_stats) == (w_groups, w_count, w_stats), case
            assert sum(t[0].num_rows for t in got) == rows, case
            counts[paths[0]] += len(paths)
            counts["rows"] += rows
    finally:
        in_arrow.close()
        in_duckdb.close()
        inserter.close()
    assert counts["arrow"] > CASES / 2 and counts["duckdb"] > 0, counts
    assert counts["rows"] > 90 * CASES, counts


def _events(name: str, *, merge: str = "append") -> TableSpec:
    return TableSpec.create(
        name=name,
        schema="ts TIMESTAMP NOT NULL, x DOUBLE, note VARCHAR",
        partition_by="day(ts)",
        sort_by="x",
        merge=merge,
        sizes=SizeTargets(min_files_to_merge=2),
    )


def _batch(xs: Sequence[float | None], note: str = "n") -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([DAY] * len(xs), pa.timestamp("us")),
            "x": pa.array(xs, pa.float64()),
            "note": [note] * len(xs),
        }
    )


@pytest.fixture
def objects(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "warehouse")


def _merge_rows(
    meta: MetaStore, objects: LocalObjectStore, table: str, limits: MergeLimits | None = None
) -> tuple[list[str], pa.Table]:
    """Merge ``table``; where each merge sorted, and the table's rows afterwards."""
    worker = MergeWorker(meta=meta, objects=objects, limits=limits)
    try:
        paths = merged(meta, worker, table)
    finally:
        worker.close()
    files = meta.files(table)
    return paths, pa.concat_tables(pq.read_table(objects.uri(f.path)) for f in files)


def test_a_merge_keeps_negative_zero_in_a_float_sort_key_on_both_paths(
    meta: MetaStore, objects: LocalObjectStore
) -> None:
    # (DuckDB's ORDER BY hands back -0.0 as 0.0 from a column it sorts by)
    for limits, path in ((MergeLimits(), "arrow"), (MergeLimits(sort_in_memory=False), "duckdb")):
        table = f"zeros_{path}"
        meta.create_table(_events(table))
        inserter = Inserter(meta=meta, objects=objects)
        for _ in range(3):
            inserter.insert_arrow(table, _batch([-0.0, 0.0, -0.0, 1.0]))
        inserter.close()

        paths, rows = _merge_rows(meta, objects, table, limits)

        assert paths == [path]
        signs = [math.copysign(1, v) for v in rows.column("x").to_pylist()]
        assert sorted(signs) == [-1.0] * 6 + [1.0] * 6, path


def test_groups_the_arrow_path_may_not_take_are_merged_in_duckdb(
    meta: MetaStore, objects: LocalObjectStore
) -> None:
    inserter = Inserter(meta=meta, objects=objects)
    # A replace merge, and files of an older layout beside files of the current one
    meta.create_table(_events("replaced", merge="replace(x)"))
    meta.create_table(_events("altered"))
    for n in range(3):
        inserter.insert_arrow("replaced", _batch([1.0, 2.0, float(n)]))
        inserter.insert_arrow("altered", _batch([1.0, 2.0, float(n)]))
    alter_table(meta=meta, table="altered", changes=[add_column("country VARCHAR")])
    inserter.insert_arrow("altered", _batch([5.0, 6.0, 7.0]))
    # A group whose decoded rows pass a quarter of the memory limit: text that compresses to
    # almost nothing (5 MB of Parquet budget, 40 MB of rows budget; about 60 MB of rows)
    meta.create_table(_events("roomy"))
    for _ in range(3):
        inserter.insert_arrow("roomy", _batch([1.0] * 100, note="y" * 200_000))
    inserter.close()

    assert _merge_rows(meta, objects, "replaced")[0] == ["duckdb"]
    paths, rows = _merge_rows(meta, objects, "altered")
    assert paths == ["duckdb"] and rows.num_rows == 12 and "country" in rows.column_names
    limits = MergeLimits(memory_limit="160MB")
    paths, rows = _merge_rows(meta, objects, "roomy", limits)
    assert paths == ["duckdb"] and rows.num_rows == 300
    assert sum(f.size_bytes for f in meta.files("roomy")) < limits.memory_bytes * PARQUET_SHARE


def _write_input(
    meta: MetaStore, objects: LocalObjectStore, table: str, name: str, data: pa.Table
) -> None:
    """Commit a file written here, not by icefloe's writer, to ``table``'s day partition."""
    key = f"{table}/data/day=2026-03-01/{name}.parquet"
    path = Path(objects.uri(key))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, path)
    meta.commit_append(
        table,
        files=[
            NewFile(
                path=key,
                partition_path="day=2026-03-01",
                partition_values={"day": "2026-03-01"},
                partition_start=DAY,
                size_bytes=path.stat().st_size,
                row_count=data.num_rows,
            )
        ],
    )


def test_files_of_other_types_or_a_nan_key_are_merged_in_duckdb(
    meta: MetaStore, objects: LocalObjectStore
) -> None:
    # Given files not of the types icefloe writes (a row id of any length, a 32-bit float),
    # and files of exactly those types holding a NaN in the sort key
    def rows(xs: list[float], row_ids: pa.Array) -> pa.Table:
        return _batch(xs).append_column("_row_id", row_ids)

    meta.create_table(_events("foreign"))
    meta.create_table(_events("nan"))
    for n in range(3):
        ids = [bytes([n, i]) * 8 for i in range(3)]
        foreign = rows([1.0, 2.0, 3.0], pa.array(ids, pa.binary()))
        _write_input(meta, objects, "foreign", f"f{n}", foreign)
        nan = rows([1.0, float("nan"), -1.0], pa.array(ids, pa.binary(16)))
        _write_input(meta, objects, "nan", f"n{n}", nan)

    # Then both merge through DuckDB, every row kept, NaN sorted last as DuckDB sorts it
    paths, merged_rows = _merge_rows(meta, objects, "foreign")
    assert paths == ["duckdb"] and merged_rows.num_rows == 9
    paths, merged_rows = _merge_rows(meta, objects, "nan")
    assert paths == ["duckdb"]
    assert [x for x in merged_rows.column("x").to_pylist() if not math.isnan(x)] == [-1.0] * 3 + [
        1.0
    ] * 3
    assert all(math.isnan(x) for x in merged_rows.column("x").to_pylist()[-3:])
