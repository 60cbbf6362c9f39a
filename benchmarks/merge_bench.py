"""Merge benchmarks (Merge issue).

1. Throughput of one :class:`MergeWorker` task (DuckDB limited to one thread, 1 GB) over one
   day of N small files (N = 10, 100, 200, 1000; each written by one insert): MB/s (10^6 bytes) of
   input and rows/s, median of a few runs after a warm-up. Every run merges fresh copies of the
   same input files in a new table (copying is not timed). Alternating with those runs, a bare
   DuckDB ``COPY ... ORDER BY`` of the same files to one zstd Parquet file in the worker's sort
   order (one thread, 1 GB): the floor of reading, sorting and writing; and the same worker
   with every group read and sorted in DuckDB (``sort_in_memory=False``), the path these groups
   took before small append merges were sorted in Arrow. Peak memory of one merge is measured in
   a child process (VmHWM - VmRSS before the merge), for the worker on both paths and for the
   bare COPY.
2. Bytes a point query reads after merging, with value-aligned row groups (``row_group_by =
   user_id``) versus size-only row groups (sorted by ``ts``), on the same rows in which the
   queried user holds exactly 1%: the compressed bytes of the column chunks the query reads in
   the row groups whose min/max statistics of ``user_id`` include the key (row groups that
   min/max pruning cannot exclude), read from the Parquet footers with pyarrow.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from benchmarks.common import (
    benchmark_postgres,
    copy_table_files,
    median_seconds,
    reset_peak,
    status_kib,
    write_results,
)
from icefloe import duck
from icefloe.ingest import Inserter
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.merge import MergeLimits, MergeTask, MergeWorker, merge_locally
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.sample_events import EVENTS_SCHEMA, sample_events, sample_events_spec
from icefloe.spec import SizeTargets, TableSpec
from icefloe.storage import LocalObjectStore

SCALES: dict[str, dict[str, Any]] = {
    "small": {
        "rows_per_file": 200,
        "runs": {10: 5, 100: 5},
        "point_rows": 100_000,
        "point_batch": 1_000,
        "row_group_kib": 64,
    },
    "full": {
        "rows_per_file": 1_000,
        "runs": {10: 5, 100: 5, 200: 5, 1000: 3},
        "point_rows": 500_000,
        "point_batch": 5_000,
        "row_group_kib": 256,
    },
}
DAY = datetime(2026, 11, 3)
LIMITS = MergeLimits(memory_limit="1GB", threads=1)
# The same worker with every merge read and sorted in DuckDB (icefloe.merge.in_memory).
DUCKDB_LIMITS = replace(LIMITS, sort_in_memory=False)
LEASE = timedelta(minutes=30)
KIB = 1024
USERS = 100
POINT_KEY = "u42"
POINT_SQL = (
    "SELECT count(*), sum(CAST(properties->>'numtime' AS BIGINT)) FROM {table}"
    f" WHERE user_id = '{POINT_KEY}'"
)
POINT_COLUMNS = ("user_id", "properties")  # the columns POINT_SQL reads


def _throughput_spec(name: str) -> TableSpec:
    return sample_events_spec(name, sizes=SizeTargets(max_files_per_merge=1000))


def _point_spec(name: str, *, aligned: bool, row_group_bytes: int) -> TableSpec:
    return TableSpec.create(
        name=name,
        schema=EVENTS_SCHEMA,
        partition_by="day(ts)",
        sort_by="ts",
        row_group_by="user_id" if aligned else None,
        sizes=SizeTargets(row_group_target_bytes=row_group_bytes, max_files_per_merge=1000),
    )


# --- throughput -------------------------------------------------------------------------------


def build_source(meta: MetaStore, objects: LocalObjectStore, *, files: int, rows: int) -> str:
    """A table holding one day of ``files`` files, each written by one insert of ``rows``."""
    table = f"src_{files}"
    meta.create_table(_throughput_spec(table))
    inserter = Inserter(meta=meta, objects=objects, duckdb_threads=1)
    try:
        for i in range(files):
            inserter.insert_rows(table, sample_events(rows, days=1, start=DAY, seed=i))
    finally:
        inserter.close()
    if len(meta.files(table)) != files:
        raise RuntimeError(f"expected {files} files in {table}, got {len(meta.files(table))}")
    return table


def copy_and_claim(meta: MetaStore, objects: LocalObjectStore, source: str) -> MergeTask:
    """A new table holding copies of ``source``'s files, all claimed: one task, ready to run."""
    table = f"m_{uuid.uuid4().hex[:10]}"
    meta.create_table(_throughput_spec(table))
    copy_table_files(meta, objects, source=source, target=table)
    live = meta.files(table)
    ids = tuple(f.file_id for f in live)
    token = meta.claim_files(table, ids, lease=LEASE)
    if token is None:
        raise RuntimeError(f"could not claim the files of {table}")
    return MergeTask(
        table=table, partition_path=live[0].partition_path, file_ids=ids, claim_token=token
    )


def baseline_sql(uris: Sequence[str], out: Path) -> str:
    files = "[" + ", ".join(duck.string_literal(u) for u in uris) + "]"
    order = ", ".join(["user_id", "event", "ts", ROW_ID_COLUMN])  # the worker's file order
    return (
        f"COPY (SELECT * FROM read_parquet({files}, hive_partitioning = false) ORDER BY {order})"
        f" TO {duck.string_literal(str(out))} (FORMAT parquet, COMPRESSION zstd)"
    )


def run_baseline(sql: str) -> None:
    con = duck.connect(threads=LIMITS.threads, memory_limit=LIMITS.memory_limit)
    try:
        con.execute("SET preserve_insertion_order = false")
        con.execute(sql)
    finally:
        con.close()


def bench_throughput(
    dsn: str, schema: str, root: Path, *, files: int, rows: int, runs: int
) -> dict[str, Any]:
    objects = LocalObjectStore(root / "warehouse")
    with MetaStore(dsn, schema=schema) as meta:
        started = time.perf_counter()
        source = build_source(meta, objects, files=files, rows=rows)
        build_s = time.perf_counter() - started
        inputs = meta.files(source)
        bytes_in = sum(f.size_bytes for f in inputs)
        rows_in = sum(f.row_count for f in inputs)
        worker = MergeWorker(meta=meta, objects=objects, limits=LIMITS)
        in_duckdb = MergeWorker(meta=meta, objects=objects, limits=DUCKDB_LIMITS)
        out = root / f"baseline_{files}.parquet"
        sql = baseline_sql([objects.uri(f.path) for f in inputs], out)  # built before timing
        # The worker, the worker held to DuckDB and the bare COPY alternate, so all three see
        # the same machine; one warm-up each.
        outcomes, duckdb_outcomes, base_runs = [], [], []
        for run in range(runs + 1):
            task = copy_and_claim(meta, objects, source)
            outcome = worker.run(task)
            duckdb_outcome = in_duckdb.run(copy_and_claim(meta, objects, source))
            for done in (outcome, duckdb_outcome):
                if done.status != "committed" or done.rows_out != rows_in:
                    raise RuntimeError(f"merge of {files} files went wrong: {done}")
            started = time.perf_counter()
            run_baseline(sql)
            if run:
                outcomes.append(outcome)
                duckdb_outcomes.append(duckdb_outcome)
                base_runs.append(time.perf_counter() - started)
        row_groups_out = sum(f.row_group_count for f in meta.files(task.table))
        base_bytes_out = out.stat().st_size
    seconds = statistics.median(o.seconds for o in outcomes)
    duckdb_s = statistics.median(o.seconds for o in duckdb_outcomes)
    base_s = statistics.median(base_runs)
    mb = bytes_in / 1e6
    probe_worker = bench_memory(dsn, schema, root, source, "worker")
    probe_duckdb_path = bench_memory(dsn, schema, root, source, "worker_duckdb")
    probe_base = bench_memory(dsn, schema, root, source, "duckdb")
    result = {
        "files_in": files,
        "rows_in": rows_in,
        "bytes_in": bytes_in,
        "runs": runs,
        "build_inputs_s": round(build_s, 1),
        "files_out": outcomes[0].files_out,
        "bytes_out": outcomes[0].bytes_out,
        "row_groups_out": row_groups_out,
        "seconds": round(seconds, 3),
        "seconds_runs": [round(o.seconds, 3) for o in outcomes],
        "sorted_in": outcomes[0].sorted_in,
        "duckdb_path_seconds": round(duckdb_s, 3),
        "duckdb_path_seconds_runs": [round(o.seconds, 3) for o in duckdb_outcomes],
        "ratio_to_duckdb_path": round(seconds / duckdb_s, 2),
        "mb_per_s": round(mb / seconds, 2),
        "rows_per_s": round(rows_in / seconds),
        "baseline_duckdb_copy_seconds": round(base_s, 3),
        "baseline_seconds_runs": [round(b, 3) for b in base_runs],
        "baseline_mb_per_s": round(mb / base_s, 2),
        "baseline_rows_per_s": round(rows_in / base_s),
        "baseline_bytes_out": base_bytes_out,
        "ratio_to_baseline": round(seconds / base_s, 2),
        "peak_memory_mib": probe_worker["peak_growth_mib"],
        "duckdb_path_peak_memory_mib": probe_duckdb_path["peak_growth_mib"],
        "baseline_peak_memory_mib": probe_base["peak_growth_mib"],
    }
    print(json.dumps(result), flush=True)
    return result


# --- peak memory (child process) --------------------------------------------------------------


def _memory_probe(kind: str, source: str) -> dict[str, Any]:
    """Run in a child: one merge (or bare COPY) of ``source``'s files; the peak RSS growth."""
    dsn, schema = os.environ["ICEFLOE_BENCH_DSN"], os.environ["ICEFLOE_BENCH_SCHEMA"]
    root = Path(os.environ["ICEFLOE_BENCH_ROOT"])
    objects = LocalObjectStore(root / "warehouse")
    with MetaStore(dsn, schema=schema) as meta, tempfile.TemporaryDirectory() as tmp:
        if kind in ("worker", "worker_duckdb"):
            task = copy_and_claim(meta, objects, source)
            limits = LIMITS if kind == "worker" else DUCKDB_LIMITS
            worker = MergeWorker(meta=meta, objects=objects, limits=limits)
            before = status_kib("VmRSS")
            reset_peak()
            outcome = worker.run(task)
            peak = status_kib("VmHWM")
            if outcome.status != "committed":
                raise RuntimeError(f"probe merge went wrong: {outcome}")
        else:
            uris = [objects.uri(f.path) for f in meta.files(source)]
            sql = baseline_sql(uris, Path(tmp) / "out.parquet")
            before = status_kib("VmRSS")
            reset_peak()
            run_baseline(sql)
            peak = status_kib("VmHWM")
    return {"kind": kind, "rss_before_kib": before, "peak_kib": peak}


def bench_memory(dsn: str, schema: str, root: Path, source: str, kind: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.merge_bench", "--memory-probe", kind, source],
        env={
            **os.environ,
            "ICEFLOE_BENCH_DSN": dsn,
            "ICEFLOE_BENCH_SCHEMA": schema,
            "ICEFLOE_BENCH_ROOT": str(root),
        },
        check=True,
        capture_output=True,
        text=True,
    )
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    return {**probe, "peak_growth_mib": round((probe["peak_kib"] - probe["rss_before_kib"]) / 1024)}


# --- point-query bytes ------------------------------------------------------------------------


def point_rows(count: int) -> list[dict[str, object]]:
    """One day of sample events over ``USERS`` users, each holding exactly 1/USERS of the rows."""
    rows = sample_events(count, days=1, start=DAY, seed=11)
    for i, row in enumerate(rows):
        row["user_id"] = f"u{(i * 37) % USERS}"
    return rows


def row_groups_read(paths: Sequence[str], key: str) -> dict[str, int]:
    """Row groups (and their bytes) that min/max statistics of ``user_id`` cannot exclude."""
    total = read = bytes_all = bytes_read = bytes_read_all_columns = 0
    for path in paths:
        metadata = pq.read_metadata(path)
        names = [metadata.schema.column(i).name for i in range(metadata.num_columns)]
        position = names.index("user_id")
        for g in range(metadata.num_row_groups):
            group = metadata.row_group(g)
            chunks = [group.column(i) for i in range(group.num_columns)]
            wanted = sum(
                c.total_compressed_size
                for name, c in zip(names, chunks, strict=True)
                if name in POINT_COLUMNS
            )
            total += 1
            bytes_all += wanted
            stats = chunks[position].statistics
            excluded = (
                stats is not None and stats.has_min_max and not (stats.min <= key <= stats.max)
            )
            if not excluded:
                read += 1
                bytes_read += wanted
                bytes_read_all_columns += sum(c.total_compressed_size for c in chunks)
    return {
        "row_groups": total,
        "row_groups_read": read,
        "bytes_of_read_columns": bytes_all,
        "bytes_read": bytes_read,
        "bytes_read_all_columns": bytes_read_all_columns,
    }


def bench_point_query(
    dsn: str, schema: str, root: Path, *, rows: int, batch: int, row_group_bytes: int
) -> dict[str, Any]:
    objects = LocalObjectStore(root / "point")
    data = point_rows(rows)
    results: dict[str, Any] = {
        "rows": rows,
        "users": USERS,
        "key": POINT_KEY,
        "key_rows": sum(1 for r in data if r["user_id"] == POINT_KEY),
        "row_group_target_bytes": row_group_bytes,
        "query": POINT_SQL.format(table="<table>"),
        "columns_read": list(POINT_COLUMNS),
        "method": "pyarrow footers: row groups whose user_id min/max include the key",
    }
    with MetaStore(dsn, schema=schema) as meta:
        inserter = Inserter(meta=meta, objects=objects, duckdb_threads=1)
        worker = MergeWorker(meta=meta, objects=objects, limits=LIMITS)
        engine = QueryEngine(meta=meta, objects=objects)
        answers = {}
        for name, aligned in (("value_aligned", True), ("size_only", False)):
            table = f"point_{name}"
            meta.create_table(_point_spec(table, aligned=aligned, row_group_bytes=row_group_bytes))
            for offset in range(0, rows, batch):
                inserter.insert_rows(table, data[offset : offset + batch])
            files_before = len(meta.files(table))
            report = merge_locally(meta=meta, worker=worker, table=table, until_quiet=True)
            if report.count("committed") == 0 or report.dead_letters:
                raise RuntimeError(f"merging {table} went wrong: {report}")
            live = meta.files(table)
            paths = [objects.uri(f.path) for f in live]
            if len(live) != 1:
                raise RuntimeError(f"expected one merged file in {table}, got {len(live)}")
            sql = POINT_SQL.format(table=table)
            result = engine.query(sql)
            answers[name] = [int(v) for v in result.rows.to_pylist()[0].values()]
            results[name] = {
                "files_before_merge": files_before,
                "files_after_merge": len(live),
                "merges_committed": report.count("committed"),
                **row_groups_read(paths, POINT_KEY),
                "files_scanned": result.plan(table).files_scanned,
                "query_median_ms": round(
                    median_seconds(partial(engine.query, sql), repeat=10) * 1000, 1
                ),
                "answer_count_sum": answers[name],
            }
        inserter.close()
    if answers["value_aligned"] != answers["size_only"]:
        raise RuntimeError(f"the two tables answer differently: {answers}")
    results["same_answer"] = True
    aligned, size_only = results["value_aligned"], results["size_only"]
    ratio = size_only["bytes_read"] / aligned["bytes_read"]
    results["bytes_ratio"] = round(ratio, 1)
    results["meets_goal"] = ratio >= 10
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--memory-probe", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_probe:
        print(json.dumps(_memory_probe(*args.memory_probe)))
        return
    scale = SCALES[args.scale]
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    with benchmark_postgres() as dsn, tempfile.TemporaryDirectory() as tmp:
        with MetaStore(dsn, schema=schema) as meta:
            meta.migrate()
        throughput = [
            bench_throughput(
                dsn,
                schema,
                Path(tmp),
                files=n,
                rows=scale["rows_per_file"],
                runs=runs,
            )
            for n, runs in scale["runs"].items()
        ]
        point = bench_point_query(
            dsn,
            schema,
            Path(tmp),
            rows=scale["point_rows"],
            batch=scale["point_batch"],
            row_group_bytes=scale["row_group_kib"] * KIB,
        )
    path = write_results(
        "merge",
        {
            "scale": args.scale,
            "duckdb_threads": LIMITS.threads,
            "memory_limit": LIMITS.memory_limit,
            "goal": {"point_query_bytes_ratio_at_1pct_key": 10},
            "throughput": throughput,
            "point_query": point,
        },
    )
    print(f"wrote {path} in {time.perf_counter() - started:.0f} s")
    for r in throughput:
        print(
            f"{r['files_in']:>5} files, {r['rows_in']:>9,} rows: {r['seconds']} s,"
            f" {r['mb_per_s']} MB/s, {r['rows_per_s']:,} rows/s, {r['files_out']} out;"
            f" bare COPY {r['baseline_duckdb_copy_seconds']} s (x{r['ratio_to_baseline']});"
            f" peak {r['peak_memory_mib']} MiB (COPY {r['baseline_peak_memory_mib']} MiB)"
        )
    a, s = point["value_aligned"], point["size_only"]
    print(
        f"point query {POINT_KEY!r} ({point['key_rows']:,} of {point['rows']:,} rows):"
        f" value-aligned {a['row_groups_read']}/{a['row_groups']} row groups,"
        f" {a['bytes_read']:,} B; size-only {s['row_groups_read']}/{s['row_groups']},"
        f" {s['bytes_read']:,} B; {point['bytes_ratio']}x fewer"
        f" ({'meets' if point['meets_goal'] else 'misses'} the 10x goal)"
    )


if __name__ == "__main__":
    main()
