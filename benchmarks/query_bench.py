"""Query benchmarks (Query issue).

1. Planning time for a one-day window when the table holds 10^4, 10^5 and 10^6 file rows
   (file rows loaded directly into the meta store, 100 files a day): pin the head, list the
   day's files through the index, prune by statistics.
2. Latency of a point query, a one-day aggregate and a full-range aggregate on the demo data
   (sample events in many small batches), through the sandboxed engine, beside the same SQL run
   by a bare DuckDB over a glob of all the table's files (no snapshot, no pruning, no sandbox)
   in the same run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from benchmarks.common import benchmark_postgres, median_seconds, write_results
from benchmarks.metastore_bench import EPOCH_DAY, _bulk_load, _spec
from icefloe.ingest import Inserter
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine, TimeRange
from icefloe.sample_events import EVENTS_SCHEMA, sample_events
from icefloe.spec import TableSpec
from icefloe.storage import LocalObjectStore

SCALES: dict[str, dict[str, Any]] = {
    "small": {"file_rows": (10_000, 100_000), "events": 50_000, "batch": 1_000, "repeat": 10},
    "full": {
        "file_rows": (10_000, 100_000, 1_000_000),
        "events": 300_000,
        "batch": 2_000,
        "repeat": 20,
    },
}
QUERIES = {
    "point": "SELECT count(*), sum(CAST(properties->>'numtime' AS BIGINT)) FROM events WHERE user_id = 'u42'",
    "one_day": (
        "SELECT event, count(*), sum(CAST(properties->>'numtime' AS BIGINT)) FROM events"
        " WHERE ts >= '2026-11-03' AND ts < '2026-11-04' GROUP BY event"
    ),
    "full_range": (
        "SELECT event, count(*), count(DISTINCT user_id) FROM events GROUP BY event ORDER BY event"
    ),
}


def bench_planning(dsn: str, schema: str, *, file_rows: int, repeat: int) -> dict[str, Any]:
    table = f"plan_{file_rows}"
    days = file_rows // 100
    with MetaStore(dsn, schema=schema, max_connections=2) as meta:
        info = meta.create_table(_spec(table))
        _bulk_load(dsn, schema, table_id=info.table_id, table=table, days=days)
        engine = QueryEngine(meta=meta, objects=LocalObjectStore(Path(tempfile.gettempdir())))
        day = EPOCH_DAY + timedelta(days=days // 2)
        window = TimeRange(day, day + timedelta(days=1))
        plan = engine.plan(table, time_range=window)
        seconds = median_seconds(lambda: engine.plan(table, time_range=window), repeat=repeat)
    return {
        "file_rows": file_rows,
        "files_listed": plan.files_considered,
        "median_ms": round(seconds * 1000, 3),
    }


def bench_latency(dsn: str, schema: str, *, events: int, batch: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, MetaStore(dsn, schema=schema) as meta:
        objects = LocalObjectStore(Path(tmp))
        meta.create_table(
            TableSpec.create(
                name="events",
                schema=EVENTS_SCHEMA,
                partition_by="day(ts)",
                sort_by="event, ts",
                row_group_by="user_id",
            )
        )
        inserter = Inserter(meta=meta, objects=objects)
        rows = sample_events(events, start=datetime(2026, 11, 1), days=7)
        for offset in range(0, len(rows), batch):
            inserter.insert_rows("events", rows[offset : offset + batch])
        inserter.close()
        engine = QueryEngine(meta=meta, objects=objects)
        files = len(meta.files("events"))
        bare = duckdb.connect()
        glob = f"read_parquet('{tmp}/events/data/**/*.parquet', hive_partitioning = false)"
        results: dict[str, Any] = {"events": events, "files": files}
        for name, sql in QUERIES.items():
            ours = median_seconds(lambda sql=sql: engine.query(sql), repeat=repeat)
            direct_sql = sql.replace("FROM events", f"FROM {glob}")
            theirs = median_seconds(lambda q=direct_sql: bare.execute(q).fetchall(), repeat=repeat)
            plan = engine.query(sql).plan("events")
            results[name] = {
                "median_ms": round(ours * 1000, 1),
                "bare_duckdb_glob_median_ms": round(theirs * 1000, 1),
                "ratio_to_bare": round(ours / theirs, 2),
                "files_scanned": plan.files_scanned,
                "bytes_scanned": plan.bytes_scanned,
            }
        bare.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    with benchmark_postgres() as dsn:
        with MetaStore(dsn, schema=schema) as meta:
            meta.migrate()
        planning = [
            bench_planning(dsn, schema, file_rows=n, repeat=scale["repeat"])
            for n in scale["file_rows"]
        ]
        latency = bench_latency(
            dsn, schema, events=scale["events"], batch=scale["batch"], repeat=scale["repeat"]
        )
    path = write_results(
        "query",
        {"scale": args.scale, "planning_one_day": planning, "latency": latency},
    )
    print(f"wrote {path} in {time.perf_counter() - started:.0f} s")
    for row in planning:
        print(f"plan one day at {row['file_rows']:>9,} file rows: {row['median_ms']} ms")
    for name in QUERIES:
        r = latency[name]
        print(
            f"{name:>10}: {r['median_ms']} ms (bare DuckDB glob {r['bare_duckdb_glob_median_ms']} ms),"
            f" {r['files_scanned']} files"
        )


if __name__ == "__main__":
    main()
