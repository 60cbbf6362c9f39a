"""Change feed benchmark (issue 36): what a consumer reading one day's changes pays, against
the plain way of finding them, the difference of two full reads, in one run.

A table of ``history_days`` days of events (merged) gets one more day of small inserts (one
batch every ``24 / batches_per_day`` hours, merged as they would be in the background), then
one delete of a user's rows over every day (an erasure request). The changes after the
snapshot before that day are read two ways, in alternation, ``repeat`` times:

- the change feed (``read_changes``): the files whose liveness differs between the two
  snapshots, and the row ids of those passed through;
- two full reads (the table at both snapshots, through the query engine) and DuckDB's
  ``EXCEPT ALL`` both ways.

Reported per way: median latency; bytes read, as the process's ``rchar`` (every byte its read
calls returned: DuckDB's reads of Parquet, cached or not), over the first run of each; the
sizes of the files each way opened beyond row ids (the queries' bytes scanned); and that both
give the same rows.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from benchmarks.common import (
    bytes_read_by_process,
    merge_until_quiet,
    run_scaled,
)
from icefloe.ingest import Inserter
from icefloe.lifecycle import delete_rows
from icefloe.merge import MergeLimits, MergeWorker
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.query.changes import read_changes
from icefloe.spec.table_spec import TableSpec
from icefloe.storage import LocalObjectStore

SCALES = {
    "small": {"history_days": 7, "rows_per_day": 20_000, "batches_per_day": 48, "repeat": 5},
    "full": {"history_days": 30, "rows_per_day": 100_000, "batches_per_day": 288, "repeat": 7},
}
LIMITS = MergeLimits(memory_limit="1GB", threads=1)
START = datetime(2026, 3, 1)
SCHEMA = "ts TIMESTAMP NOT NULL, user_id VARCHAR, event VARCHAR, v BIGINT, properties JSON"
USERS = 500


def day_rows(day: int, rows: int, rng: random.Random) -> list[dict[str, Any]]:
    step = timedelta(days=1) / rows
    at = START + timedelta(days=day)
    return [
        {
            "ts": (at + step * n).isoformat(),
            "user_id": f"u{rng.randrange(USERS)}",
            "event": rng.choice(["page", "track", "identify", "signup"]),
            "v": rng.randrange(10**6),
            "properties": {"plan": rng.choice(["free", "pro"]), "n": n},
        }
        for n in range(rows)
    ]


def full_read_difference(engine: QueryEngine, since: int, until: int) -> tuple[Any, int]:
    """The rows at ``until`` and not at ``since`` and the other way, by two full reads."""
    before = engine.query("SELECT * FROM events", snapshot_id=since)
    after = engine.query("SELECT * FROM events", snapshot_id=until)
    scanned = sum(p.bytes_scanned for r in (before, after) for p in r.plans)
    with duckdb.connect() as con:
        con.register("before", before.rows)
        con.register("after", after.rows)
        changes = con.execute(
            "SELECT *, 'insert' AS _change FROM (FROM after EXCEPT ALL FROM before)"
            " UNION ALL SELECT *, 'delete' FROM (FROM before EXCEPT ALL FROM after)"
        ).fetchall()
    return changes, scanned


def bench(dsn: str, schema: str, scale: dict[str, int], root: Path) -> dict[str, Any]:
    rng = random.Random(20261128)
    objects = LocalObjectStore(root / "warehouse")
    with MetaStore(dsn, schema=schema) as meta:
        meta.create_table(
            TableSpec.create(
                name="events", schema=SCHEMA, partition_by="day(ts)", sort_by="user_id, ts"
            )
        )
        inserter = Inserter(meta=meta, objects=objects, duckdb_threads=1)
        worker = MergeWorker(meta=meta, objects=objects, limits=LIMITS)
        try:
            for day in range(scale["history_days"]):
                inserter.insert_rows("events", day_rows(day, scale["rows_per_day"], rng))
            merge_until_quiet(meta, worker, ["events"])
            since = meta.get_table("events").head_snapshot_id
            today = day_rows(scale["history_days"], scale["rows_per_day"], rng)
            per_batch = len(today) // scale["batches_per_day"]
            for start in range(0, len(today), per_batch):
                inserter.insert_rows("events", today[start : start + per_batch])
            stored = merge_until_quiet(meta, worker, ["events"])["events"]
        finally:
            inserter.close()
        day = meta.get_table("events").head_snapshot_id
        deleted = delete_rows(meta=meta, objects=objects, table="events", where="user_id = 'u7'")
        until = meta.get_table("events").head_snapshot_id
        engine = QueryEngine(meta=meta, objects=objects)
        try:
            windows = {
                "day": compare(meta, objects, engine, since, day, scale["repeat"]),
                "day_and_erasure": compare(meta, objects, engine, since, until, scale["repeat"]),
            }
        finally:
            engine.close()
    result = {
        "rows": scale["rows_per_day"] * (scale["history_days"] + 1),
        "history_days": scale["history_days"],
        "batches_today": scale["batches_per_day"],
        "live_files": stored["files_after_merge"],
        "rows_deleted": deleted.rows_deleted,
        **windows,
    }
    print(
        json.dumps(
            {
                name: {k: w[k] for k in ("speedup", "bytes_ratio")}
                | {"ms": [w["feed"]["median_ms"], w["full_reads"]["median_ms"]]}
                for name, w in windows.items()
            }
        )
    )
    return result


def compare(
    meta: MetaStore,
    objects: LocalObjectStore,
    engine: QueryEngine,
    since: int,
    until: int,
    repeat: int,
) -> dict[str, Any]:
    """The changes in ``(since, until]`` by the feed and by two full reads, alternating."""

    def feed_now() -> Any:
        return read_changes(
            meta=meta, objects=objects, table="events", since_snapshot=since, until_snapshot=until
        )

    before = bytes_read_by_process()
    feed = feed_now()
    feed_bytes = bytes_read_by_process() - before
    before = bytes_read_by_process()
    plain, scanned = full_read_difference(engine, since, until)
    full_bytes = bytes_read_by_process() - before
    same = sorted(map(repr, plain)) == sorted(
        repr(tuple(row.values())[:-1]) for row in feed.rows.to_pylist()
    )
    assert same, f"the feed and the full reads disagree over ({since}, {until}]"
    samples: dict[str, list[float]] = {"feed": [], "full_reads": []}
    for _ in range(repeat):
        started = time.perf_counter()
        feed_now()
        samples["feed"].append(time.perf_counter() - started)
        started = time.perf_counter()
        full_read_difference(engine, since, until)
        samples["full_reads"].append(time.perf_counter() - started)
    median = {k: round(statistics.median(v) * 1000, 1) for k, v in samples.items()}
    return {
        "since_snapshot": since,
        "until_snapshot": until,
        "inserts": feed.inserts,
        "deletes": feed.deletes,
        "same_rows": same,
        "feed": {
            "median_ms": median["feed"],
            "files_read_whole": feed.files_read_whole,
            "files_read_filtered": feed.files_read_filtered,
            "files_row_ids_read": feed.files_row_ids_read,
            "bytes_of_files_read": feed.bytes_of_files_read,
            "bytes_read": feed_bytes,
        },
        "full_reads": {
            "median_ms": median["full_reads"],
            "bytes_scanned": scanned,
            "bytes_read": full_bytes,
        },
        "speedup": round(median["full_reads"] / median["feed"], 1),
        "bytes_ratio": round(full_bytes / max(1, feed_bytes), 1),
    }


def main() -> None:
    run_scaled("changes_bench", __doc__, SCALES, bench)


if __name__ == "__main__":
    main()
