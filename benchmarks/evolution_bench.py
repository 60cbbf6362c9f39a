"""Schema evolution benchmark (table lifecycle issue): what a schema change costs, and what
reading files of an older schema version costs.

A table of ``files`` files (sample events over a week) is queried warm (median of several runs)
at three points: as created (every file read by name: the baseline, measured in the same run);
after a column was added (every file is of the old version: read through a projection that
gives the new column as NULL); and after ``event`` was renamed and a column dropped (read
through the projection, and ``event_name`` statistics found under the old name). Each point
runs the same three queries: a full scan, a point query on the row-group key (pruned by
statistics and membership filters), and a filter on the renamed column. The alter itself is
timed too: it writes a spec version and a snapshot, and rewrites no file.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import benchmark_postgres, median_seconds, write_results
from icefloe.ingest import Inserter
from icefloe.lifecycle import alter_table
from icefloe.lifecycle.alter import add_column, drop_column, rename_column
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.sample_events import sample_events, sample_events_spec
from icefloe.spec.evolution import SchemaChange
from icefloe.storage import LocalObjectStore

SCALES = {
    "small": {"files": 100, "events_per_file": 500, "repeat": 5},
    "full": {"files": 400, "events_per_file": 2500, "repeat": 9},
}


def queries(event: str) -> dict[str, str]:
    return {
        "full_scan": f"SELECT {event}, count(*) AS n FROM events GROUP BY ALL ORDER BY 1",
        "point_user": "SELECT count(*) AS n FROM events WHERE user_id = 'u00042'",
        "filter_event": f"SELECT count(*) AS n FROM events WHERE {event} = 'signup'",
    }


def measure(engine: QueryEngine, event: str, repeat: int) -> dict[str, dict[str, Any]]:
    out = {}
    for name, sql in queries(event).items():
        answer = engine.query(sql)
        plan = answer.plan("events")
        out[name] = {
            "median_ms": round(
                median_seconds(lambda sql=sql: engine.query(sql), repeat=repeat) * 1000, 2
            ),
            "files_scanned": plan.files_scanned,
            "answer": answer.rows.to_pylist()[:4],
        }
    return out


def alter(meta: MetaStore, changes: list[SchemaChange]) -> float:
    started = time.perf_counter()
    alter_table(meta=meta, table="events", changes=changes)
    return round((time.perf_counter() - started) * 1000, 2)


def bench(
    dsn: str, schema: str, files: int, events_per_file: int, repeat: int, root: Path
) -> dict[str, Any]:
    objects = LocalObjectStore(root / "warehouse")
    events = sample_events(files * events_per_file, days=7, users=5000)
    with MetaStore(dsn, schema=schema) as meta:
        meta.create_table(sample_events_spec("events"))
        inserter = Inserter(meta=meta, objects=objects, duckdb_threads=1)
        for n in range(files):
            inserter.insert_rows("events", events[n * events_per_file : (n + 1) * events_per_file])
        inserter.close()
        engine = QueryEngine(meta=meta, objects=objects)
        try:
            baseline = measure(engine, "event", repeat)
            added_ms = alter(meta, [add_column("country VARCHAR")])
            added = measure(engine, "event", repeat)
            renamed_ms = alter(meta, [rename_column("event=event_name"), drop_column("country")])
            renamed = measure(engine, "event_name", repeat)
        finally:
            engine.close()
    for name, row in baseline.items():
        # The same answers at every point: a schema change never changes what is read.
        assert added[name]["answer"] == row["answer"], name
        assert [list(r.values()) for r in renamed[name]["answer"]] == [
            list(r.values()) for r in row["answer"]
        ], name
    ratios = {
        name: {
            "after_add_column": round(added[name]["median_ms"] / row["median_ms"], 2),
            "after_rename_and_drop": round(renamed[name]["median_ms"] / row["median_ms"], 2),
        }
        for name, row in baseline.items()
    }
    result = {
        "files": files,
        "rows": len(events),
        "alter_ms": {"add_column": added_ms, "rename_and_drop": renamed_ms},
        "baseline": baseline,
        "after_add_column": added,
        "after_rename_and_drop": renamed,
        "ratio_to_baseline": ratios,
    }
    print(json.dumps({"alter_ms": result["alter_ms"], "ratio_to_baseline": ratios}), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with benchmark_postgres() as dsn, tempfile.TemporaryDirectory() as tmp:
        with MetaStore(dsn, schema=schema) as meta:
            meta.migrate()
        result = bench(
            dsn, schema, scale["files"], scale["events_per_file"], scale["repeat"], Path(tmp)
        )
    path = write_results("evolution", {"scale": args.scale, **result})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
