"""Generated columns benchmark (issue 34): a JSON path declared as a typed generated column
against the same path read with ``properties->>`` at query time, in one run.

The same Segment Spec events (``tests/support/segment_corpus.py``) spread over 30 days, each
with ``properties.numtime`` (an epoch second that grows with the event's time, as ids and
counters do), go to two tables of the Segment preset's columns (with ``context`` as JSON, as
nested_bench's baseline has it, so that insert measures the generated column rather than the
typed context): one as is (``properties JSON``), one adding ``numtime BIGINT AS
(TRY_CAST(properties->>'numtime' AS BIGINT))``. Inserts alternate between them, batch by batch, as NDJSON: the figure is the median
rows per second over the batches (what computing the column costs at insert). Both tables are
then merged until quiet, and two questions are asked of each, in alternation: a selective filter
(one hour of numtime; pruned by the generated column's file statistics, every file read through
the JSON path) and an aggregate over every row (``sum``). Reported per question: files
considered and scanned, bytes scanned (from the query's stats), median latency over ``repeat``
runs, and that both answers agree.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ask_alternately,
    insert_alternately,
    merge_until_quiet,
    run_scaled,
)
from icefloe.ingest import Inserter
from icefloe.merge import MergeLimits, MergeWorker
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.spec.presets import SEGMENT_CONTEXT, SEGMENT_SCHEMA
from icefloe.spec.table_spec import TableSpec
from icefloe.storage import LocalObjectStore
from support.segment_corpus import segment_events

SCALES = {
    "small": {"batches": 20, "events_per_batch": 5000, "repeat": 7},
    "full": {"batches": 100, "events_per_batch": 10000, "repeat": 9},
}
LIMITS = MergeLimits(memory_limit="1GB", threads=1)
START = datetime(2026, 3, 1)
DAYS = 30
NUMTIME = "TRY_CAST(properties->>'numtime' AS BIGINT)"


def segment_spec(name: str, *, generated: str = "") -> TableSpec:
    """The Segment preset with ``context JSON``, and ``generated`` columns after its own."""
    return TableSpec.create(
        name=name,
        schema=SEGMENT_SCHEMA.replace(SEGMENT_CONTEXT, "JSON") + generated,
        partition_by="day(timestamp)",
        sort_by="event, timestamp",
        merge="replace(messageId)",
        extra_fields="keep",
        overflow_column="extra",
    )


def payload(batches: int, events_per_batch: int) -> tuple[list[bytes], int]:
    """NDJSON batches over DAYS days in time order, and the first numtime of the middle day."""
    total = batches * events_per_batch
    step = timedelta(days=DAYS) / total
    out = []
    for n in range(batches):
        events = segment_events(n, events_per_batch)
        for index, event in enumerate(events):
            at = START + step * (n * events_per_batch + index)
            event["timestamp"] = at.isoformat() + "Z"
            properties = event.setdefault("properties", {})
            properties["numtime"] = int(at.timestamp())
        out.append("".join(json.dumps(e) + "\n" for e in events).encode())
    middle = START + timedelta(days=DAYS // 2, hours=12)
    return out, int(middle.timestamp())


def ask_both(engine: QueryEngine, sqls: dict[str, str], repeat: int) -> dict[str, Any]:
    out = ask_alternately(
        engine, sqls, tables={kind: f"seg_{kind}" for kind in sqls}, repeat=repeat
    )
    answers = out.pop("answers")
    out["answer"] = str(answers["generated"])
    out["same_answer"] = answers["generated"] == answers["json"]
    out["speedup"] = round(out["json"]["median_ms"] / out["generated"]["median_ms"], 1)
    out["bytes_ratio"] = round(
        out["json"]["bytes_scanned"] / max(1, out["generated"]["bytes_scanned"]), 1
    )
    return out


def bench(dsn: str, schema: str, scale: dict[str, int], root: Path) -> dict[str, Any]:
    batches, hour = payload(scale["batches"], scale["events_per_batch"])
    objects = LocalObjectStore(root / "warehouse")
    with MetaStore(dsn, schema=schema) as meta:
        meta.create_table(
            segment_spec("seg_generated", generated=f", numtime BIGINT AS ({NUMTIME})")
        )
        meta.create_table(segment_spec("seg_json"))
        inserter = Inserter(meta=meta, objects=objects, duckdb_threads=1)
        try:
            inserts = insert_alternately(
                inserter, batches, kinds=("generated", "json"), rows=scale["events_per_batch"]
            )
        finally:
            inserter.close()
        worker = MergeWorker(meta=meta, objects=objects, limits=LIMITS)
        merged = merge_until_quiet(meta, worker, [f"seg_{kind}" for kind in ("generated", "json")])
        stored = {kind: merged[f"seg_{kind}"] for kind in ("generated", "json")}
        engine = QueryEngine(meta=meta, objects=objects)
        window = f"BETWEEN {hour} AND {hour + 3599}"
        try:
            selective = ask_both(
                engine,
                {
                    "generated": f"SELECT count(*) AS n FROM seg_generated WHERE numtime {window}",
                    "json": f"SELECT count(*) AS n FROM seg_json WHERE {NUMTIME} {window}",
                },
                scale["repeat"],
            )
            aggregate = ask_both(
                engine,
                {
                    "generated": "SELECT sum(numtime) AS s FROM seg_generated",
                    "json": f"SELECT sum({NUMTIME}) AS s FROM seg_json",
                },
                scale["repeat"],
            )
        finally:
            engine.close()
    assert selective["same_answer"] and aggregate["same_answer"], (selective, aggregate)
    result = {
        "rows": scale["batches"] * scale["events_per_batch"],
        "batches": scale["batches"],
        "insert": inserts,
        "stored": stored,
        "selective_filter": selective,
        "aggregate": aggregate,
    }
    summary = {
        "insert_rows_per_s": {k: v["rows_per_s"] for k, v in inserts.items()},
        "selective": {
            k: [
                selective[k]["files_scanned"],
                selective[k]["bytes_scanned"],
                selective[k]["median_ms"],
            ]
            for k in ("generated", "json")
        },
        "aggregate_ms": {k: aggregate[k]["median_ms"] for k in ("generated", "json")},
    }
    print(json.dumps(summary), flush=True)
    return result


def main() -> None:
    run_scaled("generated_bench", __doc__, SCALES, bench)


if __name__ == "__main__":
    main()
