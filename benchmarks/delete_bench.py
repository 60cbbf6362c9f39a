"""Delete benchmark (table lifecycle issue): one user's rows out of a table of many small files.

A table of ``files`` small files (one insert each, sample events over a week, one ``user_id``
per row group, so every file carries a membership filter of its users) loses one user's rows
with :func:`icefloe.lifecycle.delete_rows`. Recorded: how many files the delete read and
rewrote against the total, and its time beside rewriting the whole table without the user's
rows (one DuckDB COPY of every file, partitioned by day: what a delete without statistics or
per-file rewrites would cost), measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.common import benchmark_postgres, write_results
from icefloe import duck
from icefloe.ingest import Inserter
from icefloe.lifecycle import delete_rows, rollback_table
from icefloe.metastore.store import MetaStore
from icefloe.sample_events import sample_events, sample_events_spec
from icefloe.storage import LocalObjectStore

SCALES = {
    "small": {"files": 200, "events_per_file": 200},
    "full": {"files": 1000, "events_per_file": 1000},
}


def bench_delete(
    dsn: str, schema: str, files: int, events_per_file: int, root: Path
) -> dict[str, Any]:
    objects = LocalObjectStore(root / "warehouse")
    events = sample_events(files * events_per_file, days=7, users=5000)
    with MetaStore(dsn, schema=schema) as meta:
        meta.create_table(sample_events_spec("events"))
        inserter = Inserter(meta=meta, objects=objects, duckdb_threads=1)
        for n in range(files):
            inserter.insert_rows("events", events[n * events_per_file : (n + 1) * events_per_file])
        inserter.close()
        live = meta.files("events")
        start = meta.get_table("events").head_snapshot_id
        # A user of median activity among those with a few events (an erasure request)
        per_user = Counter(str(e["user_id"]) for e in events)
        few = sorted((n, u) for u, n in per_user.items() if n >= 3)
        rows, user = few[len(few) // 2]
        where = f"user_id = '{user}'"

        started = time.perf_counter()
        result = delete_rows(meta=meta, objects=objects, table="events", where=where)
        delete_s = time.perf_counter() - started
        assert result.rows_deleted == rows, (result.rows_deleted, rows)
        rollback_table(meta=meta, objects=objects, table="events", to_snapshot=start)

    uris = [objects.uri(f.path) for f in live]
    con = duck.connect(threads=2)
    started = time.perf_counter()
    con.execute(
        "COPY (SELECT *, CAST(ts AS DATE) AS day FROM read_parquet($files) WHERE NOT"
        f" coalesce({where}, false)) TO $out (FORMAT parquet, PARTITION_BY (day),"
        " COMPRESSION zstd)",
        {"files": uris, "out": str(root / "rewritten")},
    )
    whole_s = time.perf_counter() - started
    con.close()
    result_json = {
        "files_total": len(live),
        "rows_total": len(events),
        "user_rows": rows,
        "files_considered": result.files_considered,
        "files_read": result.files_scanned,
        "files_rewritten": result.files_rewritten,
        "files_removed": result.files_removed,
        "delete_s": round(delete_s, 3),
        "rewrite_whole_table_s": round(whole_s, 3),
        "ratio_to_whole_rewrite": round(delete_s / whole_s, 3),
    }
    print(json.dumps(result_json), flush=True)
    return result_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with benchmark_postgres() as dsn, tempfile.TemporaryDirectory() as tmp:
        with MetaStore(dsn, schema=schema) as meta:
            meta.migrate()
        result = bench_delete(dsn, schema, scale["files"], scale["events_per_file"], Path(tmp))
    path = write_results("delete", {"scale": args.scale, "one_user_delete": result})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
