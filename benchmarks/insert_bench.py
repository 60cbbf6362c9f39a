"""Insert benchmarks (Insert issue).

Events per second from JSON objects in memory to a committed snapshot, for batches of 1k, 10k,
100k and 1M sample events, with DuckDB limited to one thread (per-core throughput), beside a
per-row Python baseline in the style of IceDB's insert (a Python loop validates, partitions and
sorts each row, then pyarrow writes the same files and the same commit follows) measured in the
same run. Peak memory per million events is measured in a child process (VmHWM - VmRSS before
the insert), so earlier runs do not count.
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
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from benchmarks.common import benchmark_postgres, reset_peak, status_kib, write_results
from icefloe import duck
from icefloe.datafiles import encode_parquet, new_data_key, new_file_record, with_json_columns
from icefloe.ingest import Inserter
from icefloe.ingest.load import load_batch
from icefloe.ingest.row_ids import new_row_ids
from icefloe.ingest.sources import InsertLimits, StagedBatch
from icefloe.metastore.models import NewFile
from icefloe.metastore.store import MetaStore
from icefloe.sample_events import sample_events, sample_events_spec
from icefloe.spec import TableSpec
from icefloe.storage import LocalObjectStore, ObjectStore

SCALES: dict[str, dict[str, Any]] = {
    "small": {
        "batches": {1_000: 5, 10_000: 3, 100_000: 1},
        "baseline_max": 100_000,
        "memory": 100_000,
        "arrow": (100_000, 3),
        "ndjson": (100_000, 3),
        "small_batches": (50, 1_000, 3),
    },
    "full": {
        "batches": {1_000: 7, 10_000: 5, 100_000: 3, 1_000_000: 1},
        "baseline_max": 100_000,
        "memory": 1_000_000,
        "arrow": (1_000_000, 5),
        "ndjson": (1_000_000, 5),
        "small_batches": (200, 1_000, 3),
    },
}


def per_row_baseline(
    meta: MetaStore, objects: ObjectStore, spec: TableSpec, rows: Sequence[Mapping[str, Any]]
) -> int:
    """IceDB-style: a Python loop over rows validates, partitions and sorts; then write + commit."""
    parts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        ts = row["ts"]
        if not isinstance(ts, str):
            raise ValueError("ts must be a string")
        when = datetime.fromisoformat(ts.replace("Z", "+00:00")).replace(tzinfo=None)
        event = row["event"]
        if not isinstance(event, str):
            raise ValueError("event must be a string")
        parts[f"day={when:%Y-%m-%d}"].append(
            {
                "ts": when,
                "event": event,
                "user_id": row.get("user_id"),
                "properties": json.dumps(row.get("properties")),
            }
        )
    files: list[NewFile] = []
    for part, part_rows in parts.items():
        part_rows.sort(key=lambda r: (r["user_id"] or "", r["event"], r["ts"]))
        table = pa.Table.from_pylist(part_rows)
        table = table.append_column("_row_id", new_row_ids(table.num_rows))
        encoded = encode_parquet(
            with_json_columns(table, ["properties"]),
            spec=spec,
            row_group_sizes=1_000_000,
        )
        key = new_data_key(table=spec.name, partition_path=part)
        objects.put(key, encoded.data)
        files.append(
            new_file_record(
                key=key,
                encoded=encoded,
                partition_path=part,
                partition_values={"day": part[4:]},
                partition_start=datetime.fromisoformat(part[4:]),
                spec_version=spec.version,
            )
        )
    meta.commit_append(spec.name, files=files)
    return len(rows)


def _median_rate(fn: Any, rows: int, runs: int) -> tuple[float, list[float]]:
    fn()  # warm-up: first-call costs (imports, JIT-free but cache-cold paths) are not the steady state
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        rates.append(rows / (time.perf_counter() - start))
    return statistics.median(rates), rates


def bench_throughput(
    dsn: str, schema: str, scale: dict[str, Any], root: Path
) -> list[dict[str, Any]]:
    results = []
    objects = LocalObjectStore(root / "warehouse")
    with MetaStore(dsn, schema=schema) as meta:
        inserter = Inserter(meta=meta, objects=objects, duckdb_threads=1)
        for size, runs in scale["batches"].items():
            rows = sample_events(size)
            table = f"t{size}"
            spec = sample_events_spec(table)
            meta.create_table(spec)
            rate, rates = _median_rate(
                lambda t=table, r=rows: inserter.insert_rows(t, r), size, runs
            )
            row: dict[str, Any] = {
                "batch_events": size,
                "runs": runs,
                "events_per_s": round(rate),
                "events_per_s_runs": [round(r) for r in rates],
            }
            if size <= scale["baseline_max"]:
                base_table = f"b{size}"
                base_spec = sample_events_spec(base_table)
                meta.create_table(base_spec)
                base, _ = _median_rate(
                    lambda s=base_spec, r=rows: per_row_baseline(meta, objects, s, r), size, runs
                )
                row["baseline_per_row_events_per_s"] = round(base)
                row["speedup_vs_baseline"] = round(rate / base, 2)
            results.append(row)
            print(json.dumps(row), flush=True)
        inserter.close()
    return results


def sample_arrow(events: int) -> pa.Table:
    """The sample events as a typed Arrow table (what a pandas or Arrow caller holds)."""
    rows = sample_events(events)
    return pa.table(
        {
            "ts": pa.array(
                [datetime.fromisoformat(str(r["ts"]).replace("Z", "+00:00")) for r in rows],
                pa.timestamp("us"),
            ),
            "event": [r["event"] for r in rows],
            "user_id": [r["user_id"] for r in rows],
            "properties": [json.dumps(r["properties"]) for r in rows],
        }
    )


US_UTC = pa.timestamp("us", tz="UTC")


def bare_arrow_write(table: pa.Table, root: Path) -> None:
    """The floor: pyarrow alone writes the same rows into the same day partitions (sorted by
    the same keys, zstd), with no check, no row id, no statistics and no commit."""
    day = pc.floor_temporal(table.column("ts"), unit="day")
    keyed = table.append_column("__day", day)
    ordered = keyed.take(
        pc.sort_indices(
            keyed,
            sort_keys=[
                ("__day", "ascending"),
                ("user_id", "ascending"),
                ("event", "ascending"),
                ("ts", "ascending"),
            ],
        )
    )
    days = ordered.column("__day")
    for value in pc.unique(days).to_pylist():
        part = ordered.filter(pc.equal(days, pa.scalar(value, days.type))).drop_columns(["__day"])
        directory = root / f"day={value:%Y-%m-%d}"
        directory.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, directory / f"{uuid.uuid4().hex}.parquet", compression="zstd")


def bench_arrow(dsn: str, schema: str, events: int, runs: int, root: Path) -> dict[str, Any]:
    """insert_arrow against a bare pyarrow write of the same rows, alternated in one run."""
    table = sample_arrow(events)
    objects = LocalObjectStore(root / "arrow-warehouse")
    with MetaStore(dsn, schema=schema) as meta:
        meta.create_table(sample_events_spec("arrow"))
        inserter = Inserter(meta=meta, objects=objects, duckdb_threads=1)
        inserter.insert_arrow("arrow", table)  # warm-up
        bare_arrow_write(table, root / "bare-warmup")
        icefloe_s, bare_s = [], []
        for n in range(runs):
            start = time.perf_counter()
            inserter.insert_arrow("arrow", table)
            icefloe_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            bare_arrow_write(table, root / f"bare-{n}")
            bare_s.append(time.perf_counter() - start)
        inserter.close()
    icefloe, bare = statistics.median(icefloe_s), statistics.median(bare_s)
    result = {
        "events": events,
        "runs": runs,
        "insert_arrow_events_per_s": round(events / icefloe),
        "bare_pyarrow_events_per_s": round(events / bare),
        "ratio_time_to_bare": round(icefloe / bare, 2),
        "insert_arrow_s_runs": [round(x, 3) for x in icefloe_s],
        "bare_s_runs": [round(x, 3) for x in bare_s],
        "goals": {"events_per_s": 2_600_000, "ratio_time_to_bare": 1.3},
    }
    print(json.dumps(result), flush=True)
    return result


def bench_ndjson(dsn: str, schema: str, events: int, runs: int, root: Path) -> dict[str, Any]:
    """An NDJSON file of ``events`` sample events inserted whole (``insert_file``), against a
    bare pyarrow read of the same file (types inferred, no checks) and a bare write of its
    rows into the same partitions, alternated in one run. The load phase alone is also timed
    through the DuckDB conversion every batch took before one parse (``fast=False``), which
    still explains refused batches."""
    path = root / "events.ndjson"
    with path.open("wb") as f:
        for row in sample_events(events):
            f.write(orjson.dumps(row) + b"\n")
    objects = LocalObjectStore(root / "ndjson-warehouse")
    spec = sample_events_spec("ndjson")
    with MetaStore(dsn, schema=schema) as meta:
        meta.create_table(spec)
        inserter = Inserter(meta=meta, objects=objects)
        inserter.insert_file("ndjson", path, fmt="ndjson")  # warm-up
        icefloe_s, bare_s, load_s = [], [], []
        phases = []
        for n in range(runs):
            start = time.perf_counter()
            inserted = inserter.insert_file("ndjson", path, fmt="ndjson")
            icefloe_s.append(time.perf_counter() - start)
            assert inserted.phases is not None
            phases.append(inserted.phases)
            start = time.perf_counter()
            bare = pj.read_json(path)
            bare_arrow_write(
                bare.set_column(0, "ts", pc.cast(bare.column("ts"), US_UTC)), root / f"nd-{n}"
            )
            bare_s.append(time.perf_counter() - start)
        batch = StagedBatch(path=path, format="ndjson", size_bytes=path.stat().st_size, owned=False)
        con = duck.connect()
        for _ in range(runs):
            start = time.perf_counter()
            load_batch(con, spec, batch, limits=InsertLimits(), fast=False)
            load_s.append(time.perf_counter() - start)
        con.close()
        inserter.close()
    icefloe, floor = statistics.median(icefloe_s), statistics.median(bare_s)
    result = {
        "events": events,
        "runs": runs,
        "events_per_s": round(events / icefloe),
        "bare_pyarrow_events_per_s": round(events / floor),
        "ratio_time_to_bare": round(icefloe / floor, 2),
        "load_s": round(statistics.median(p.load_s for p in phases), 3),
        "write_s": round(statistics.median(p.write_s for p in phases), 3),
        "commit_s": round(statistics.median(p.commit_s for p in phases), 3),
        "load_s_duckdb_conversion": round(statistics.median(load_s), 3),
        "insert_s_runs": [round(x, 3) for x in icefloe_s],
        "bare_s_runs": [round(x, 3) for x in bare_s],
        "goals": {"events_per_s": 600_000},
    }
    print(json.dumps(result), flush=True)
    return result


def bench_small_batches(
    dsn: str, schema: str, batches: int, events: int, streams: int, root: Path
) -> dict[str, Any]:
    """A stream: ``batches`` inserts of ``events`` consecutive sample events each (so most land
    in one day partition), as JSON objects, one after another; the phases each insert reports.
    The stream runs ``streams`` times, each followed by a bare pyarrow write of each batch's
    rows (no checks, no commit); the rates are the medians of the streams (one stream lasts
    about a second, and this machine's speed wanders over seconds)."""
    every = sample_events(batches * events, days=7)
    chunks = [every[n * events : (n + 1) * events] for n in range(batches)]
    arrow = sample_arrow(batches * events)
    objects = LocalObjectStore(root / "small-warehouse")
    phases = []
    icefloe_s, bare_s = [], []
    with MetaStore(dsn, schema=schema) as meta:
        meta.create_table(sample_events_spec("small"))
        inserter = Inserter(meta=meta, objects=objects, duckdb_threads=1)
        inserter.insert_rows("small", chunks[0])  # warm-up: first-call costs
        for _ in range(streams):
            start = time.perf_counter()
            for chunk in chunks:
                inserted = inserter.insert_rows("small", chunk)
                assert inserted.phases is not None
                phases.append(inserted.phases)
            icefloe_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            for n in range(batches):
                bare_arrow_write(arrow.slice(n * events, events), root / "small-bare")
            bare_s.append(time.perf_counter() - start)
        inserter.close()

    def p50_ms(values: list[float]) -> float:
        return round(statistics.median(values) * 1000, 2)

    def rate(seconds: float) -> int:
        return round(batches * events / seconds)

    result = {
        "batches": batches,
        "events_per_batch": events,
        "streams": streams,
        "events_per_s": rate(statistics.median(icefloe_s)),
        "events_per_s_runs": [rate(s) for s in icefloe_s],
        "bare_pyarrow_events_per_s": rate(statistics.median(bare_s)),
        "bare_pyarrow_events_per_s_runs": [rate(s) for s in bare_s],
        "p50_ms": {
            "load": p50_ms([p.load_s for p in phases]),
            "write": p50_ms([p.write_s for p in phases]),
            "commit": p50_ms([p.commit_s for p in phases]),
            "whole": p50_ms([p.load_s + p.write_s + p.commit_s for p in phases]),
        },
        "goals": {"events_per_s": 150_000, "commit_p50_ms": 5},
    }
    print(json.dumps(result), flush=True)
    return result


def _memory_probe(dsn: str, schema: str, events: int) -> dict[str, int]:
    """Run in a child: insert ``events`` once and report the peak RSS growth it caused."""
    rows = sample_events(events)
    with tempfile.TemporaryDirectory() as tmp, MetaStore(dsn, schema=schema) as meta:
        table = f"m{uuid.uuid4().hex[:8]}"
        meta.create_table(sample_events_spec(table))
        inserter = Inserter(meta=meta, objects=LocalObjectStore(Path(tmp)), duckdb_threads=1)
        before = status_kib("VmRSS")
        reset_peak()
        inserter.insert_rows(table, rows)
        peak = status_kib("VmHWM")
        inserter.close()
    return {"events": events, "rss_before_kib": before, "peak_kib": peak}


def bench_memory(dsn: str, schema: str, events: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.insert_bench", "--memory-probe", str(events)],
        env={**os.environ, "ICEFLOE_BENCH_DSN": dsn, "ICEFLOE_BENCH_SCHEMA": schema},
        check=True,
        capture_output=True,
        text=True,
    )
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    growth = probe["peak_kib"] - probe["rss_before_kib"]
    return {
        **probe,
        "peak_growth_mib": round(growth / 1024, 1),
        "peak_growth_mib_per_million_events": round(growth / 1024 / (events / 1e6), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--memory-probe", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_probe:
        dsn, schema = os.environ["ICEFLOE_BENCH_DSN"], os.environ["ICEFLOE_BENCH_SCHEMA"]
        print(json.dumps(_memory_probe(dsn, schema, args.memory_probe)))
        return
    scale = SCALES[args.scale]
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with benchmark_postgres() as dsn, tempfile.TemporaryDirectory() as tmp:
        with MetaStore(dsn, schema=schema) as meta:
            meta.migrate()
        throughput = bench_throughput(dsn, schema, scale, Path(tmp))
        arrow_events, arrow_runs = scale["arrow"]
        arrow = bench_arrow(dsn, schema, arrow_events, arrow_runs, Path(tmp))
        ndjson_events, ndjson_runs = scale["ndjson"]
        ndjson = bench_ndjson(dsn, schema, ndjson_events, ndjson_runs, Path(tmp))
        batches, per_batch, streams = scale["small_batches"]
        small = bench_small_batches(dsn, schema, batches, per_batch, streams, Path(tmp))
        memory = bench_memory(dsn, schema, scale["memory"])
    path = write_results(
        "insert",
        {
            "scale": args.scale,
            "duckdb_threads": 1,
            "goal": {"events_per_s_per_core_at_100k": 300_000},
            "throughput": throughput,
            "arrow": arrow,
            "ndjson": ndjson,
            "small_batches": small,
            "peak_memory": memory,
        },
    )
    print(f"wrote {path}")
    print(json.dumps(memory))


if __name__ == "__main__":
    main()
