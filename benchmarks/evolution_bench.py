"""Schema evolution benchmark (table lifecycle issue): what a schema change costs, and what
reading files of an older schema version costs.

A table of ``files`` files (sample events over a week) is queried warm after a column was
added (every file is of the old version: read through a projection that gives the new column
as NULL), and after ``event`` was renamed and that column dropped (read through the projection,
the ``event_name`` statistics found under the old name). The baseline, measured in the same
run in alternation, is the same query over a second table holding copies of the same files
and never altered: read by name, as every table was before schema evolution. Three queries: a full scan, a point query on the row-group key
(pruned by statistics and membership filters), and a filter on the renamed column (medians of
``repeat`` runs each). The alter itself is timed too: it writes a spec version and a snapshot,
and rewrites no file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import benchmark_postgres, copy_table_files, write_results
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
        "point_user": "SELECT count(*) AS n FROM events WHERE user_id = 'u42'",
        "filter_event": f"SELECT count(*) AS n FROM events WHERE {event} = 'signup'",
    }


def measure(engine: QueryEngine, event: str, repeat: int) -> dict[str, dict[str, Any]]:
    """Each query over the altered table (new names, old files read through the projection)
    and over ``created`` (copies of the same files, never altered: read by name), run in
    alternation so that neither gains from going second; medians of ``repeat`` each."""
    out = {}
    for (name, sql), old_sql in zip(queries(event).items(), queries("event").values(), strict=True):
        plain_sql = old_sql.replace("FROM events", "FROM created")
        answer = engine.query(sql)
        baseline = engine.query(plain_sql)
        samples: dict[str, list[float]] = {"head": [], "baseline": []}
        for _ in range(2):  # warm-up
            engine.query(sql)
            engine.query(plain_sql)
        for _ in range(repeat):
            for kind, text in (("head", sql), ("baseline", plain_sql)):
                started = time.perf_counter()
                engine.query(text)
                samples[kind].append(time.perf_counter() - started)
        head_ms = statistics.median(samples["head"]) * 1000
        base_ms = statistics.median(samples["baseline"]) * 1000
        out[name] = {
            "median_ms": round(head_ms, 2),
            "baseline_median_ms": round(base_ms, 2),
            "ratio_to_baseline": round(head_ms / base_ms, 2),
            "files_scanned": answer.plan("events").files_scanned,
            "same_answer": [list(r.values()) for r in answer.rows.to_pylist()]
            == [list(r.values()) for r in baseline.rows.to_pylist()],
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
        meta.create_table(sample_events_spec("created"))
        copy_table_files(meta, objects, source="events", target="created")
        engine = QueryEngine(meta=meta, objects=objects)
        try:
            added_ms = alter(meta, [add_column("country VARCHAR")])
            added = measure(engine, "event", repeat)
            renamed_ms = alter(meta, [rename_column("event=event_name"), drop_column("country")])
            renamed = measure(engine, "event_name", repeat)
        finally:
            engine.close()
    for name in added:
        # A schema change never changes what is read.
        assert added[name]["same_answer"] and renamed[name]["same_answer"], name
    result = {
        "files": files,
        "rows": len(events),
        "alter_ms": {"add_column": added_ms, "rename_and_drop": renamed_ms},
        "after_add_column": added,
        "after_rename_and_drop": renamed,
    }
    summary = {
        "alter_ms": result["alter_ms"],
        "ratio_to_baseline": {
            name: [added[name]["ratio_to_baseline"], renamed[name]["ratio_to_baseline"]]
            for name in added
        },
    }
    print(json.dumps(summary), flush=True)
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
