"""Struct leaves as sort keys and the row-group key, through insert, a merge and Spark
compaction: every file is in key order (as DuckDB orders the leaves, NULLs first), each
row-group key value lies in one row group, the membership filter of the leaf prunes, and
every answer is plain DuckDB's."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.lake import Lake
from icefloe.spec import SizeTargets
from support.engines import spark_compact

SCHEMA = (
    "ts TIMESTAMP NOT NULL, n BIGINT,"
    " context STRUCT(app VARCHAR, page STRUCT(url VARCHAR, rank INTEGER))"
)
START = datetime(2026, 3, 1)
ORDER = (
    "context.app NULLS FIRST, context.page.url NULLS FIRST, context.page.rank NULLS FIRST, _row_id"
)


def rows(seed: int, count: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        page = rng.choice(
            [None, {"url": None, "rank": 1}]
            + [{"url": f"/p{rng.randrange(5)}", "rank": rng.randrange(3)}] * 4
        )
        context = rng.choice(
            [None, {"app": None, "page": page}]
            + [{"app": f"a{rng.randrange(30)}", "page": page}] * 6
        )
        out.append(
            {
                "ts": (START + timedelta(seconds=seed * 10_000 + i)).isoformat(),
                "n": i,
                "context": context,
            }
        )
    return out  # fmt: skip


@pytest.fixture
def lake(connected_lake: Lake) -> Lake:
    return connected_lake


def check_files(lake: Lake) -> None:
    """Each live file is in key order, and each app lies in one of its row groups."""
    for f in lake.meta.files("ev"):
        path = lake.objects.uri(f.path)
        table = pq.read_table(path)
        con = duckdb.connect()
        con.register("f", table)
        ordered = con.execute(f"SELECT n, ts FROM f ORDER BY {ORDER}").fetchall()
        assert con.execute("SELECT n, ts FROM f").fetchall() == ordered, f.path
        parquet = pq.ParquetFile(path)
        seen: dict[object, int] = {}
        for group in range(parquet.metadata.num_row_groups):
            apps = parquet.read_row_group(group, columns=["context"]).column("context")
            for app in set(pa.compute.struct_field(apps, ["app"]).to_pylist()):
                assert seen.setdefault(app, group) == group, (f.path, app)
        assert f.column_stats["context.app"].membership is not None


def same_answers(lake: Lake, inserted: list[dict[str, Any]]) -> None:
    oracle = duckdb.connect()
    oracle.execute(f"CREATE TABLE ev ({SCHEMA})")
    oracle.executemany(
        "INSERT INTO ev VALUES (?, ?, ?)", [(r["ts"], r["n"], r["context"]) for r in inserted]
    )
    for sql in [
        "SELECT ts, n, context FROM ev",
        "SELECT n FROM ev WHERE context.app = 'a7'",
        "SELECT n FROM ev WHERE context.page.url = '/p2' AND context.page.rank > 0",
        "SELECT n FROM ev WHERE context.app IS NULL",
    ]:
        got = sorted(map(repr, lake.query(sql).to_pylist()))
        want = sorted(map(repr, oracle.execute(sql).to_arrow_table().to_pylist()))
        assert got == want, sql


def test_struct_leaf_keys_order_files_cut_row_groups_and_prune(lake: Lake, spark: Any) -> None:
    lake.create_table(
        "ev",
        schema=SCHEMA,
        partition_by="day(ts)",
        sort_by="context.page.url, context.page.rank",
        row_group_by="context.app",
        sizes=SizeTargets(row_group_target_bytes=4096, min_files_to_merge=2),
    )
    inserted: list[dict[str, Any]] = []
    for seed in range(4):
        batch = rows(seed, 600)
        lake.insert("ev", batch)
        inserted += batch
    check_files(lake)
    same_answers(lake, inserted)

    assert lake.merge("ev").count("committed") > 0
    check_files(lake)
    same_answers(lake, inserted)

    for seed in range(4, 7):
        batch = rows(seed, 600)
        lake.insert("ev", batch)
        inserted += batch
    spark_compact(lake, spark, "ev")
    check_files(lake)
    same_answers(lake, inserted)

    # A file holding only apps a1 and a9: its min and max admit a5, its membership filter not
    sparse = [
        {"ts": (START + timedelta(hours=20, seconds=i)).isoformat(), "n": -i,
         "context": {"app": ("a1", "a9")[i % 2], "page": None}}
        for i in range(50)
    ]  # fmt: skip
    lake.insert("ev", sparse)
    inserted += sparse
    same_answers(lake, inserted)
    (stats,) = lake.query_result("SELECT n FROM ev WHERE context.app = 'a5'").stats
    assert stats.files_considered == len(lake.meta.files("ev")) >= 2
    assert stats.files_scanned == stats.files_considered - 1
