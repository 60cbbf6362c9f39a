"""Nested types benchmark (issue 33): the Segment preset's ``context`` stored as a typed STRUCT
against the same payload with ``context JSON``, in one run.

The same Segment Spec events (``tests/support/segment_corpus.py``; a promotion page is visited
on the last day only) go to two tables that differ only in the type of ``context``. Inserts
alternate between them, batch by batch, as NDJSON (the webhook sink's input); the figure is the
median rows per second over the batches. Both tables are then merged until quiet, and a
selective filter on a nested leaf is run on each, in alternation: ``context.page.url = ...`` on
the struct (pruned by the leaf's file statistics) and ``context->>'$.page.url' = ...`` on the
JSON column (no statistics inside JSON: every file read). Reported per query: files considered
and scanned, bytes scanned (from the query's stats), median latency over ``repeat`` runs, and
that both answers agree.
"""

from __future__ import annotations

import json
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
from icefloe.spec.presets import SEGMENT_CONTEXT, SEGMENT_SCHEMA, segment
from icefloe.spec.table_spec import TableSpec
from icefloe.storage import LocalObjectStore
from support.segment_corpus import segment_events

SCALES = {
    "small": {"batches": 12, "events_per_batch": 1000, "repeat": 7},
    "full": {"batches": 40, "events_per_batch": 5000, "repeat": 9},
}
LIMITS = MergeLimits(memory_limit="1GB", threads=1)
PROMO = "https://shop.example/promo/spring"


def json_context_spec(name: str) -> TableSpec:
    """The Segment preset with ``context JSON``: the baseline."""
    return TableSpec.create(
        name=name,
        schema=SEGMENT_SCHEMA.replace(SEGMENT_CONTEXT, "JSON"),
        partition_by="day(timestamp)",
        sort_by="event, timestamp",
        merge="replace(messageId)",
        extra_fields="keep",
        overflow_column="extra",
    )


def payload(batches: int, events_per_batch: int) -> list[bytes]:
    """NDJSON batches of Segment events over three days; about one page view in ten on the last
    day is of the promotion page, which no other day has."""
    out = []
    for n in range(batches):
        events = segment_events(n, events_per_batch)
        for index, event in enumerate(events):
            page = (event.get("context") or {}).get("page")
            if page and event["timestamp"].startswith("2026-03-03") and index % 10 == 0:
                page["url"] = PROMO
        out.append("".join(json.dumps(e) + "\n" for e in events).encode())
    return out


def filter_both(engine: QueryEngine, repeat: int) -> dict[str, Any]:
    sqls = {
        "struct": f"SELECT count(*) AS n FROM seg_struct WHERE context.page.url = '{PROMO}'",
        "json": f"SELECT count(*) AS n FROM seg_json WHERE context->>'$.page.url' = '{PROMO}'",
    }
    out = ask_alternately(
        engine, sqls, tables={kind: f"seg_{kind}" for kind in sqls}, repeat=repeat
    )
    answers = out.pop("answers")
    out["matching_rows"] = answers["struct"][0]["n"]
    out["same_answer"] = answers["struct"] == answers["json"]
    return out


def bench(dsn: str, schema: str, scale: dict[str, int], root: Path) -> dict[str, Any]:
    batches = payload(scale["batches"], scale["events_per_batch"])
    objects = LocalObjectStore(root / "warehouse")
    with MetaStore(dsn, schema=schema) as meta:
        meta.create_table(segment("seg_struct"))
        meta.create_table(json_context_spec("seg_json"))
        inserter = Inserter(meta=meta, objects=objects, duckdb_threads=1)
        try:
            inserts = insert_alternately(
                inserter, batches, kinds=("struct", "json"), rows=scale["events_per_batch"]
            )
        finally:
            inserter.close()
        worker = MergeWorker(meta=meta, objects=objects, limits=LIMITS)
        merged = merge_until_quiet(meta, worker, [f"seg_{kind}" for kind in ("struct", "json")])
        stored = {kind: merged[f"seg_{kind}"] for kind in ("struct", "json")}
        engine = QueryEngine(meta=meta, objects=objects)
        try:
            filtered = filter_both(engine, scale["repeat"])
        finally:
            engine.close()
    assert filtered["same_answer"], filtered
    result = {
        "rows": scale["batches"] * scale["events_per_batch"],
        "batches": scale["batches"],
        "insert": inserts,
        "stored": stored,
        "filter_page_url": filtered,
    }
    summary = {
        "insert_rows_per_s": {k: v["rows_per_s"] for k, v in inserts.items()},
        "filter": {
            k: [
                filtered[k]["files_scanned"],
                filtered[k]["bytes_scanned"],
                filtered[k]["median_ms"],
            ]
            for k in ("struct", "json")
        },
    }
    print(json.dumps(summary), flush=True)
    return result


def main() -> None:
    run_scaled("nested_bench", __doc__, SCALES, bench)


if __name__ == "__main__":
    main()
