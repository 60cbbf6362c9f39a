"""Meta store benchmarks (Foundation issue).

1. Commits per second on one table for 1, 4 and 16 concurrent committers (one file per append),
   beside a baseline of bare single-row INSERT transactions on the same server: the floor that
   Postgres' own commit (WAL flush) sets.
2. Time to list one day's live files at a snapshot when the table holds 10^5 and 10^6 file rows
   (100 files a day, a fifth of them already merged away), beside the same query with index
   scans disabled: what the indexes buy.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import psycopg

from benchmarks.common import benchmark_postgres, median_seconds, write_results
from icefloe.metastore.models import ColumnStats, NewFile
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec

SCALES = {
    "small": {"commits": 200, "file_rows": (10_000, 100_000), "list_repeat": 30},
    "full": {"commits": 2_000, "file_rows": (100_000, 1_000_000), "list_repeat": 100},
}
FILES_PER_DAY = 100
EPOCH_DAY = datetime(2000, 1, 1)


def _spec(name: str) -> TableSpec:
    return TableSpec.create(
        name=name,
        schema="ts TIMESTAMP NOT NULL, event VARCHAR, user_id VARCHAR",
        partition_by="day(ts)",
        sort_by="event, ts",
    )


def _file(table: str, n: int, day: datetime) -> NewFile:
    return NewFile(
        path=f"{table}/data/day={day:%Y-%m-%d}/{uuid.uuid4().hex}.parquet",
        partition_path=f"day={day:%Y-%m-%d}",
        partition_values={"day": f"{day:%Y-%m-%d}"},
        partition_start=day,
        size_bytes=1_000_000 + n,
        row_count=1000,
        row_group_count=1,
        column_stats={"ts": ColumnStats(min=day.isoformat(), max=day.isoformat(), null_count=0)},
    )


def bench_commits(dsn: str, schema: str, *, commits: int, repeat: int = 3) -> dict[str, Any]:
    """Median commits/s over ``repeat`` runs per writer count, each run on a fresh table."""
    baseline = statistics.median(
        _baseline_commits_per_second(dsn, commits=commits) for _ in range(repeat)
    )
    results: dict[str, Any] = {"baseline_bare_insert_commits_per_s": round(baseline, 1)}
    with MetaStore(dsn, schema=schema, max_connections=20) as meta:
        for writers in (1, 4, 16):
            rates = [
                _commit_rate(meta, f"commits_{writers}_{r}", writers=writers, commits=commits)
                for r in range(repeat)
            ]
            rate = statistics.median(rates)
            results[f"writers_{writers}"] = {
                "commits_per_run": (commits // writers) * writers,
                "runs": repeat,
                "commits_per_s_runs": [round(r, 1) for r in rates],
                "commits_per_s": round(rate, 1),
                "ratio_to_baseline": round(rate / baseline, 3),
            }
    return results


def _commit_rate(meta: MetaStore, table: str, *, writers: int, commits: int) -> float:
    meta.create_table(_spec(table))
    per_writer = max(1, commits // writers)
    barrier = threading.Barrier(writers + 1)

    def run(worker: int) -> None:
        barrier.wait()
        for i in range(per_writer):
            meta.commit_append(table, files=[_file(table, worker * per_writer + i, EPOCH_DAY)])

    with ThreadPoolExecutor(writers) as pool:
        futures = [pool.submit(run, w) for w in range(writers)]
        barrier.wait()
        start = time.perf_counter()
        for f in futures:
            f.result()
        elapsed = time.perf_counter() - start
    total = per_writer * writers
    assert meta.get_table(table).head_snapshot_id == total
    return total / elapsed


def _baseline_commits_per_second(dsn: str, *, commits: int) -> float:
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TEMP TABLE bench_baseline (id bigint, payload text)")
        conn.commit()
        start = time.perf_counter()
        for i in range(commits):
            conn.execute("INSERT INTO bench_baseline VALUES (%s, %s)", (i, "x"))
            conn.commit()
        return commits / (time.perf_counter() - start)


def bench_listing(dsn: str, schema: str, *, file_rows: int, repeat: int) -> dict[str, Any]:
    table = f"listing_{file_rows}"
    days = file_rows // FILES_PER_DAY
    with MetaStore(dsn, schema=schema, max_connections=4) as meta:
        info = meta.create_table(_spec(table))
        _bulk_load(dsn, schema, table_id=info.table_id, table=table, days=days)
        target = EPOCH_DAY + timedelta(days=days // 2)
        head = meta.get_table(table).head_snapshot_id

        def list_day() -> int:
            return len(
                meta.files(
                    table,
                    snapshot_id=head,
                    start_from=target,
                    start_before=target + timedelta(days=1),
                )
            )

        live = list_day()
        indexed = median_seconds(list_day, repeat=repeat)
        seq = _median_without_indexes(
            dsn, schema, info.table_id, head, target, repeat=max(3, repeat // 10)
        )
    return {
        "file_rows": file_rows,
        "days": days,
        "live_files_listed": live,
        "median_ms": round(indexed * 1000, 3),
        "baseline_seq_scan_median_ms": round(seq * 1000, 3),
        "speedup_vs_seq_scan": round(seq / indexed, 1),
    }


# Each file's statistics, as a writer records them: every user and event in every file.
STATS = json.dumps(
    {
        "ts": {"min": "2000-01-01T00:00:00", "max": "2000-01-01T23:59:59", "null_count": 0},
        "event": {"min": "click", "max": "view", "null_count": 0},
        "user_id": {"min": "u000", "max": "u999", "null_count": 0},
    }
)


def _bulk_load(dsn: str, schema: str, *, table_id: int, table: str, days: int) -> None:
    """COPY file rows directly: every day has FILES_PER_DAY files, one in five already replaced.

    Files are added by snapshot 1 and the replaced ones ended by snapshot 2; the head is 2.
    """
    buffer = io.StringIO()
    for d in range(days):
        day = EPOCH_DAY + timedelta(days=d)
        part = f"day={day:%Y-%m-%d}"
        for i in range(FILES_PER_DAY):
            ended = "2" if i % 5 == 0 else "\\N"
            buffer.write(
                f"{table_id}\t{table}/data/{part}/{d}-{i}.parquet\t{part}\t"
                f'{{"day": "{day:%Y-%m-%d}"}}\t{day:%Y-%m-%d} 00:00:00\t1000000\t1000\t1\t{STATS}\t1\t{ended}\n'
            )
    with psycopg.connect(dsn, options=f"-c search_path={schema}") as conn:
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY data_files (table_id, path, partition_path, partition_values, partition_start,"
                " size_bytes, row_count, row_group_count, column_stats, begin_snapshot, end_snapshot)"
                " FROM STDIN"
            ) as copy,
        ):
            copy.write(buffer.getvalue())
        conn.execute(
            "INSERT INTO snapshots (table_id, snapshot_id, parent_id, operation, files_added,"
            " files_removed, rows_added, rows_removed, bytes_added, bytes_removed)"
            " VALUES (%s, 1, NULL, 'append', 0, 0, 0, 0, 0, 0), (%s, 2, 1, 'replace', 0, 0, 0, 0, 0, 0)",
            (table_id, table_id),
        )
        conn.execute("UPDATE lake_tables SET head_snapshot_id = 2 WHERE table_id = %s", (table_id,))
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE data_files")


def _median_without_indexes(
    dsn: str, schema: str, table_id: int, head: int, day: datetime, *, repeat: int
) -> float:
    with psycopg.connect(dsn, options=f"-c search_path={schema}") as conn:
        conn.execute("SET enable_indexscan = off")
        conn.execute("SET enable_bitmapscan = off")
        conn.execute("SET enable_indexonlyscan = off")

        def query() -> object:
            return conn.execute(
                "SELECT * FROM data_files WHERE table_id = %s AND begin_snapshot <= %s"
                " AND (end_snapshot IS NULL OR end_snapshot > %s)"
                " AND partition_start >= %s AND partition_start < %s",
                (table_id, head, head, day, day + timedelta(days=1)),
            ).fetchall()

        return median_seconds(query, repeat=repeat, warmup=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    args = parser.parse_args()
    scale: dict[str, Any] = SCALES[args.scale]
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with benchmark_postgres() as dsn:
        with MetaStore(dsn, schema=schema) as meta:
            meta.migrate()
        commits = bench_commits(dsn, schema, commits=scale["commits"])
        listing = [
            bench_listing(dsn, schema, file_rows=n, repeat=scale["list_repeat"])
            for n in scale["file_rows"]
        ]
    path = write_results(
        "metastore",
        {
            "scale": args.scale,
            "goals": {"commits_per_s_one_writer": 500, "list_one_day_ms_at_1e6": 20},
            "commits": commits,
            "list_one_day": listing,
        },
    )
    print(f"wrote {path}")
    print(
        "commits/s: "
        + ", ".join(f"{w} writers {commits[f'writers_{w}']['commits_per_s']}" for w in (1, 4, 16))
        + f" (bare INSERT+COMMIT baseline {commits['baseline_bare_insert_commits_per_s']})"
    )
    for row in listing:
        print(
            f"list one day at {row['file_rows']:>9,} file rows: {row['median_ms']} ms median"
            f" ({row['live_files_listed']} files; seq scan {row['baseline_seq_scan_median_ms']} ms)"
        )


if __name__ == "__main__":
    main()
