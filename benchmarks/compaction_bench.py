"""Heavy compaction benchmark (Heavy compaction issue): Spark local against the DuckDB worker.

One partition (one day) of small files, at two sizes, is compacted whole by each engine:

- the DuckDB merge worker (``MergeWorker.run``, DuckDB limited to 2 threads and 2 GB: what the
  deployed 3,008 MB merge Lambda gets), and
- the Spark job (``compact_with_spark``) on ``local[2]`` with 2 GB of driver memory.

Input files are written directly (one DuckDB query per file, encoded and registered exactly as an
insert would: ``encode_parquet`` + ``commit_append``), holding sample-events-like rows (the
``icefloe.sample_events`` schema and distributions), each file sorted like an insert's; the
table is sorted by ``event, ts`` with row groups aligned to ``user_id``, so both engines do the
real work (read, sort by ``user_id, event, ts, _row_id``, cut value-aligned row groups, write
zstd Parquet, replace-commit). Each run compacts its own fresh copy of the inputs in a new table,
claimed with ``claim_partitions`` (copying and claiming are not timed); the time runs from the
claimed manifest to the committed snapshot. Each engine runs in a child process (the DuckDB
worker in a fresh one per size; Spark in one session for both sizes, whose start-up is timed on
its own and excluded): per size one warm-up run (``warmup_s``; Spark's first is the cold JVM's
first job) and then the timed runs, whose median is reported.

Memory: the parent samples the child's whole process tree every 100 ms with psutil (for Spark:
the Python driver, the driver JVM, the PySpark daemon and its Python workers): the sum of RSS and
the sum of PSS (shared pages split between the processes that map them, so forked Python
workers are not counted twice). The peak during a run is reported, beside the tree's size just
before the run. For the DuckDB worker (one process) the kernel's exact VmHWM is also read. The
same sampler records the peak bytes under the worker's temporary directory (DuckDB spill files
and staged outputs: what the Lambda's ephemeral storage must hold).

The DuckDB worker runs again on the larger size limited to 256 MB and to 128 MB, so that it
spills: the slowdown, and the scratch bytes, of a merge bigger than its memory limit. From those
the recommended ``lambda_merge_cap_bytes`` is derived (see :func:`lambda_cap`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import psutil

from benchmarks.common import (
    benchmark_postgres,
    copy_table_files,
    reset_peak,
    status_kib,
    write_results,
)
from icefloe.compaction import CompactionManifest, claim_partitions, compact_with_spark
from icefloe.config import WarehouseLocation
from icefloe.datafiles import encode_parquet, new_data_key, new_file_record, with_json_columns
from icefloe.merge import MergeLimits, MergeTask, MergeWorker
from icefloe.metastore.models import NewFile
from icefloe.metastore.store import MetaStore
from icefloe.sample_events import sample_events_spec
from icefloe.settings import load_settings
from icefloe.spec import SizeTargets, TableSpec
from icefloe.storage import LocalObjectStore

SCALES: dict[str, dict[str, Any]] = {
    "small": {
        "rows_per_file": 2_500,
        "sizes": (100_000, 400_000),
        "duckdb_runs": 3,
        "spark_runs": 2,
    },
    "full": {
        "rows_per_file": 10_000,
        "sizes": (1_000_000, 4_000_000),
        "duckdb_runs": 3,
        "spark_runs": 2,
    },
}
DAY = datetime(2026, 11, 3)
PARTITION = "day=2026-11-03"
DUCKDB_LIMITS = MergeLimits(memory_limit="2GB", threads=2)
SPILL_LIMITS = ("256MB", "128MB")  # the worker again, made to spill on the larger size
SPARK_MASTER = "local[2]"
SPARK_DRIVER_MEMORY = "2g"
SAMPLE_INTERVAL_S = 0.1
MARK = "@@compaction-bench "
MIB = 1024 * 1024
GIB = 1024 * MIB

# The deployed merge Lambda (template.yaml) and the margin the recommended cap keeps.
LAMBDA_MEMORY_MB = 3008
LAMBDA_LARGE_MEMORY_MB = 10240
LAMBDA_TIMEOUT_S = 900
LAMBDA_EPHEMERAL_MB = 10240
SAFETY = 2.0

# One day of events like icefloe.sample_events: rows spread evenly over the day in insert order
# (so each file covers a slice of it), 60/30/3/7 event mix, Pareto(1.2) users modulo 5,000, a
# JSON properties object (an amount on purchases). Deterministic: every value hashes the row's
# global index. Row ids are laid out as an insert's (``icefloe.ingest.row_ids``): 6 bytes of
# milliseconds and 7 random bytes per file (``$prefix``), 3 bytes of the row's index in the file,
# so they compress as real ones do. Each file is sorted like an insert's (the table's file order).
ROWS_SQL = """
WITH r AS (
  SELECT i,
    (hash(i, 1) % 1000000)::BIGINT AS h1, (hash(i, 2) % 1000000)::BIGINT AS h2,
    (hash(i, 3) % 6)::BIGINT AS h3, (hash(i, 4) % 5000)::BIGINT AS h4,
    (hash(i, 5) % 49501)::BIGINT AS h5
  FROM range($start, $stop) t(i)
), e AS (
  SELECT i, h3, h4, h5,
    TIMESTAMP '2026-11-03' + to_microseconds(i * 86400000000 // $total + h1) AS ts,
    CASE WHEN h1 % 100 < 60 THEN 'page_load' WHEN h1 % 100 < 90 THEN 'click'
         WHEN h1 % 100 < 93 THEN 'signup' ELSE 'purchase' END AS event,
    'u' || (floor(pow(1.0 - h2 / 1e6, -1 / 1.2))::BIGINT % 5000) AS user_id
  FROM r
), p AS (
  SELECT *, (['/', '/pricing', '/docs', '/blog', '/signup', '/checkout'])[1 + h3] AS path FROM e
)
SELECT ts, event, user_id,
  CASE WHEN event = 'purchase'
    THEN json_object('path', path, 'numtime', 1 + h4, 'amount', round(5 + h5 / 100, 2))
    ELSE json_object('path', path, 'numtime', 1 + h4) END AS properties,
  unhex($prefix || printf('%06x', i - $start)) AS _row_id
FROM p ORDER BY user_id, event, ts
"""


def _spec(name: str) -> TableSpec:
    return sample_events_spec(name, sizes=SizeTargets(max_files_per_merge=1000))


# --- inputs -----------------------------------------------------------------------------------


def build_source(meta: MetaStore, objects: LocalObjectStore, *, rows: int, per_file: int) -> str:
    """A table holding one day of ``rows`` rows in files of ``per_file`` rows."""
    table = f"src_{rows}"
    meta.create_table(_spec(table))
    con = duckdb.connect()
    con.execute("SET threads = 1")
    files: list[NewFile] = []
    try:
        for start in range(0, rows, per_file):
            millis = int(DAY.replace(tzinfo=UTC).timestamp() * 1000) + start // per_file
            noise = hashlib.md5(f"{table}:{start}".encode()).hexdigest()[:14]
            params = {
                "start": start,
                "stop": min(rows, start + per_file),
                "total": rows,
                "prefix": f"{millis:012x}{noise}",
            }
            batch = con.execute(ROWS_SQL, params).to_arrow_table()
            encoded = encode_parquet(
                with_json_columns(batch, ["properties"]),
                spec=_spec(table),
                row_group_sizes=1_000_000,
            )
            key = new_data_key(table=table, partition_path=PARTITION)
            objects.put(key, encoded.data)
            files.append(
                new_file_record(
                    key=key,
                    encoded=encoded,
                    partition_path=PARTITION,
                    partition_values={"day": "2026-11-03"},
                    partition_start=DAY,
                    spec_version=1,  # the table is created for this run, never altered
                )
            )
    finally:
        con.close()
    meta.commit_append(table, files=files)
    return table


def copy_and_claim(meta: MetaStore, objects: LocalObjectStore, source: str) -> CompactionManifest:
    """A new table holding copies of ``source``'s files, its partition claimed whole."""
    table = f"c_{uuid.uuid4().hex[:10]}"
    meta.create_table(_spec(table))
    copy_table_files(meta, objects, source=source, target=table)
    manifest = claim_partitions(meta, table)
    if manifest is None or len(manifest.groups) != 1:
        raise RuntimeError(f"could not claim the partition of {table}: {manifest}")
    return manifest


# --- one engine, in a child process -----------------------------------------------------------


def _emit(record: dict[str, Any]) -> None:
    print(MARK + json.dumps(record), flush=True)


def _probe(engine: str, sources: list[str], runs: int) -> None:
    """Child: for each of ``sources`` in turn, ``runs`` + 1 compactions of fresh copies of it
    by ``engine`` (one Spark session for all)."""
    dsn, schema = os.environ["ICEFLOE_BENCH_DSN"], os.environ["ICEFLOE_BENCH_SCHEMA"]
    root = Path(os.environ["ICEFLOE_BENCH_ROOT"])
    scratch = Path(os.environ["ICEFLOE_BENCH_SCRATCH"])
    objects = LocalObjectStore(root / "warehouse")
    spark = None
    if engine == "spark":
        from icefloe.compaction.session import local_spark_session

        started = time.monotonic()
        spark = local_spark_session(master=SPARK_MASTER, driver_memory=SPARK_DRIVER_MEMORY)
        _emit({"event": "startup", "seconds": time.monotonic() - started})
    limits = DUCKDB_LIMITS
    if engine.startswith("duckdb@"):  # the worker with a smaller memory limit: it spills
        limits = MergeLimits(memory_limit=engine.partition("@")[2], threads=DUCKDB_LIMITS.threads)
    try:
        with MetaStore(dsn, schema=schema) as meta:
            worker = MergeWorker(
                meta=meta,
                objects=objects,
                limits=MergeLimits(
                    memory_limit=limits.memory_limit,
                    threads=limits.threads,
                    temp_directory=scratch,
                ),
            )
            for source, run in ((s, n) for s in sources for n in range(runs + 1)):
                manifest = copy_and_claim(meta, objects, source)
                (group,) = manifest.groups
                inputs = meta.files_by_id(manifest.table, group.file_ids)
                rows_in = sum(f.row_count for f in inputs)
                rss_before = status_kib("VmRSS")
                reset_peak()
                start = time.monotonic()
                if spark is not None:
                    result = compact_with_spark(
                        spark,
                        meta=meta,
                        objects=objects,
                        location=WarehouseLocation(scheme="file", path=objects.root),
                        manifest=manifest,
                        scratch=str(scratch),
                    )
                    (outcome,) = result.partitions
                    status: str = outcome.status
                    rows_out = outcome.rows_out
                else:
                    task = MergeTask(
                        table=manifest.table,
                        partition_path=group.partition_path,
                        file_ids=group.file_ids,
                        claim_token=group.claim_token,
                    )
                    merged = worker.run(task)
                    status, rows_out = merged.status, merged.rows_out
                end = time.monotonic()
                hwm = status_kib("VmHWM")
                if status != "committed" or rows_out != rows_in:
                    raise RuntimeError(f"{engine} compaction of {source} went wrong: {status}")
                out = meta.files(manifest.table)
                _emit(
                    {
                        "event": "run",
                        "source": source,
                        "run": run,
                        "start": start,
                        "end": end,
                        "seconds": end - start,
                        "rows_in": rows_in,
                        "files_in": len(inputs),
                        "bytes_in": sum(f.size_bytes for f in inputs),
                        "rows_out": rows_out,
                        "files_out": len(out),
                        "bytes_out": sum(f.size_bytes for f in out),
                        "row_groups_out": sum(f.row_group_count for f in out),
                        "python_rss_before_kib": rss_before,
                        "python_hwm_kib": hwm,
                    }
                )
                shutil.rmtree(objects.root / manifest.table, ignore_errors=True)
    finally:
        if spark is not None:
            spark.stop()


class TreeSampler(threading.Thread):
    """Samples a process tree's memory (RSS and PSS sums) and a directory's size."""

    def __init__(self, pid: int, directory: Path) -> None:
        super().__init__(daemon=True)
        self._root = psutil.Process(pid)
        self._directory = directory
        self._stop_event = threading.Event()
        self.samples: list[tuple[float, int, int, int, int]] = []  # t, rss, pss, procs, dir

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def run(self) -> None:
        while not self._stop_event.is_set():
            t = time.monotonic()
            rss = pss = procs = 0
            try:
                tree = [self._root, *self._root.children(recursive=True)]
            except psutil.Error:
                break
            for p in tree:
                try:
                    info = p.memory_full_info()
                except psutil.Error:
                    continue
                rss += info.rss
                pss += info.pss
                procs += 1
            self.samples.append((t, rss, pss, procs, _dir_bytes(self._directory)))
            self._stop_event.wait(SAMPLE_INTERVAL_S)


def _dir_bytes(directory: Path) -> int:
    total = 0
    for base, _, names in os.walk(directory):
        for name in names:
            with contextlib.suppress(OSError):  # a spill file may go while we walk
                total += os.stat(os.path.join(base, name)).st_size
    return total


def _records(stream: Any) -> Iterator[dict[str, Any]]:
    for line in stream:
        if line.startswith(MARK):
            yield json.loads(line[len(MARK) :])


def run_engine(
    dsn: str, schema: str, root: Path, *, engine: str, sources: list[str], runs: int
) -> dict[str, Any]:
    """Run ``engine`` in a child on ``sources``; its runs with the memory sampled around each."""
    scratch = root / f"scratch-{uuid.uuid4().hex[:8]}"
    scratch.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "ICEFLOE_BENCH_DSN": dsn,
        "ICEFLOE_BENCH_SCHEMA": schema,
        "ICEFLOE_BENCH_ROOT": str(root),
        "ICEFLOE_BENCH_SCRATCH": str(scratch),
    }
    command = [sys.executable, "-m", "benchmarks.compaction_bench", "--probe", engine]
    with tempfile.TemporaryFile("w+") as errors:
        child = subprocess.Popen(
            [*command, ",".join(sources), str(runs)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        sampler = TreeSampler(child.pid, scratch)
        sampler.start()
        assert child.stdout is not None
        records = list(_records(child.stdout))
        code = child.wait()
        sampler.stop()
        if code != 0:
            errors.seek(0)
            raise RuntimeError(f"{engine} child failed ({code}):\n{errors.read()[-4000:]}")
    shutil.rmtree(scratch, ignore_errors=True)
    startup = next((r["seconds"] for r in records if r["event"] == "startup"), None)
    runs_seen = [r for r in records if r["event"] == "run"]
    for r in runs_seen:
        during = [s for s in sampler.samples if r["start"] <= s[0] <= r["end"]]
        before = [s for s in sampler.samples if s[0] < r["start"]]
        if not during:  # a run shorter than one interval: the nearest sample after it
            during = [s for s in sampler.samples if s[0] >= r["start"]][:1] or sampler.samples[-1:]
        r["tree_rss_before_mib"] = round(before[-1][1] / MIB) if before else None
        r["tree_peak_rss_mib"] = round(max(s[1] for s in during) / MIB)
        r["tree_peak_pss_mib"] = round(max(s[2] for s in during) / MIB)
        r["processes"] = max(s[3] for s in during)
        r["scratch_peak_mib"] = round(max(s[4] for s in during) / MIB, 1)
        r["samples"] = len(during)
    return {"startup_s": startup, "runs": runs_seen}


def summarize(engine: str, probe: dict[str, Any], source: str) -> dict[str, Any]:
    """One engine on one source: the median of the timed runs; peaks over all, warm-up too."""
    every = [r for r in probe["runs"] if r["source"] == source]
    first, timed = every[0], every[1:]
    seconds = statistics.median(r["seconds"] for r in timed)
    peak = max(every, key=lambda r: r["tree_peak_pss_mib"])
    result: dict[str, Any] = {
        "engine": engine,
        "files_in": first["files_in"],
        "rows_in": first["rows_in"],
        "bytes_in": first["bytes_in"],
        "runs": len(timed),
        "seconds": round(seconds, 2),
        "seconds_runs": [round(r["seconds"], 2) for r in timed],
        "warmup_s": round(first["seconds"], 2),
        "rows_per_s": round(first["rows_in"] / seconds),
        "mb_per_s": round(first["bytes_in"] / 1e6 / seconds, 2),
        "files_out": first["files_out"],
        "bytes_out": first["bytes_out"],
        "row_groups_out": first["row_groups_out"],
        "peak_tree_rss_mib": max(r["tree_peak_rss_mib"] for r in every),
        "peak_tree_pss_mib": peak["tree_peak_pss_mib"],
        "tree_rss_before_mib": peak["tree_rss_before_mib"],
        "processes": max(r["processes"] for r in every),
        "scratch_peak_mib": max(r["scratch_peak_mib"] for r in every),
    }
    if engine == "spark":
        # The job's rule: one range-partitioned sort-and-write task per target file of input.
        target = _spec("x").sizes.target_file_bytes
        result["spark_write_tasks"] = max(1, math.ceil(first["bytes_in"] / target))
    if engine.startswith("duckdb"):
        growth = max((r["python_hwm_kib"] - r["python_rss_before_kib"]) / 1024 for r in every)
        result["vm_hwm_growth_mib"] = round(growth)
        result["vm_hwm_mib"] = round(max(r["python_hwm_kib"] for r in every) / 1024)
    print(json.dumps(result), flush=True)
    return result


# --- crossover and the Lambda cap -------------------------------------------------------------


def crossover(sizes: list[dict[str, Any]]) -> dict[str, Any]:
    """Spark's time over DuckDB's at each size; where a power law through them reaches 1."""
    ratios = [s["spark"]["seconds"] / s["duckdb"]["seconds"] for s in sizes]
    out: dict[str, Any] = {
        "spark_over_duckdb_time": [round(r, 2) for r in ratios],
        "bytes_in": [s["duckdb"]["bytes_in"] for s in sizes],
    }
    (b1, b2), (r1, r2) = out["bytes_in"], ratios
    if r1 <= 1 or r2 <= 1:
        out["measured"] = "Spark local was faster at a measured size"
        out["crossover_bytes"] = None
        return out
    slope = math.log(r2 / r1) / math.log(b2 / b1)
    out["ratio_exponent"] = round(slope, 3)
    if slope >= 0:
        out["measured"] = "DuckDB faster at both sizes, and the gap does not shrink with size"
        out["crossover_bytes"] = None
    else:
        out["measured"] = "DuckDB faster at both sizes; the gap shrinks with size"
        out["crossover_bytes"] = round(b2 * r2 ** (-1 / slope))
    return out


def _limit_bytes(limit: str) -> int:
    if not limit.endswith("MB"):
        raise ValueError(f"expected a limit in MB (10^6 bytes, as DuckDB reads it), got {limit!r}")
    return int(limit[: -len("MB")]) * 1_000_000


def lambda_cap(sizes: list[dict[str, Any]], spills: list[dict[str, Any]]) -> dict[str, Any]:
    """The biggest merge group a merge Lambda can take with a ``SAFETY`` margin on its run time
    and its ephemeral storage, from the DuckDB worker's measured throughput and scratch bytes.

    Scratch (``/tmp``) holds the staged outputs and DuckDB's spill; the spill is modelled as
    ``k * (decoded - limit)``, with ``k`` and the decoded size taken from the two spilling runs
    (same input, two memory limits)."""
    small, large = sizes[0]["duckdb"], sizes[-1]["duckdb"]
    slowest = min([large, *spills], key=lambda r: r["bytes_in"] / r["seconds"])
    bytes_per_s = slowest["bytes_in"] / slowest["seconds"]
    by_time = bytes_per_s * LAMBDA_TIMEOUT_S / SAFETY
    budget = LAMBDA_EPHEMERAL_MB * 1e6 / SAFETY
    measured_ratio = max(r["scratch_peak_mib"] * MIB / r["bytes_in"] for r in spills)
    out_ratio = large["bytes_out"] / large["bytes_in"]
    high, low = sorted(spills, key=lambda r: -_limit_bytes(r["memory_limit"]))
    spilled = [r["scratch_peak_mib"] * MIB - r["bytes_out"] for r in (high, low)]
    limits = [_limit_bytes(r["memory_limit"]) for r in (high, low)]
    did_spill = high["spilled"] and low["spilled"]
    k = (spilled[1] - spilled[0]) / (limits[0] - limits[1]) if did_spill else 0.0
    model: dict[str, Any] = {"spill_bytes_per_decoded_byte": None}
    by_disk: dict[str, Any] = {}
    for mb in (LAMBDA_MEMORY_MB, LAMBDA_LARGE_MEMORY_MB):
        lam = load_settings({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(mb)}).merge.limits
        entry: dict[str, Any] = {"duckdb_memory_limit": lam.memory_limit, "threads": lam.threads}
        if k > 0:
            decoded = (limits[0] + spilled[0] / k) / high["bytes_in"]
            limit = _limit_bytes(lam.memory_limit)
            model = {
                "spill_bytes_per_decoded_byte": round(k, 3),
                "decoded_bytes_per_input_byte": round(decoded, 2),
                "output_bytes_per_input_byte": round(out_ratio, 3),
            }
            entry["spills_above_input_bytes"] = round(limit / decoded)
            entry["cap_by_disk_bytes"] = round((budget + k * limit) / (k * decoded + out_ratio))
        else:  # noise hid the trend: the worst measured ratio, applied to the whole input
            entry["cap_by_disk_bytes"] = round(budget / measured_ratio)
        by_disk[str(mb)] = entry
    deployed = by_disk[str(LAMBDA_MEMORY_MB)]["cap_by_disk_bytes"]
    cap = min(by_time, deployed, budget / measured_ratio)
    recommended = max(256 * MIB, int(cap // (256 * MIB)) * 256 * MIB)
    grow = (large["peak_tree_pss_mib"] - small["peak_tree_pss_mib"]) * MIB
    return {
        "valid": did_spill,
        "note": "" if did_spill else "the runs meant to spill did not: too small a scale",
        "safety": SAFETY,
        "lambda_timeout_s": LAMBDA_TIMEOUT_S,
        "lambda_ephemeral_mb": LAMBDA_EPHEMERAL_MB,
        "deployed_lambda_memory_mb": LAMBDA_MEMORY_MB,
        "input_bytes_per_s": round(bytes_per_s),
        "input_bytes_per_s_from": slowest["engine"],
        "cap_by_time_bytes": round(by_time),
        "memory_pss_per_input_byte": round(grow / (large["bytes_in"] - small["bytes_in"]), 2),
        "scratch_per_input_byte_measured": round(measured_ratio, 2),
        "cap_by_disk_measured_ratio_bytes": round(budget / measured_ratio),
        "spill_model": model,
        "by_lambda_memory_mb": by_disk,
        "recommended_lambda_merge_cap_bytes": recommended,
        "recommended_mib": recommended // MIB,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--probe", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        engine, sources, runs = args.probe
        _probe(engine, sources.split(","), int(runs))
        return
    scale = SCALES[args.scale]
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    load_before = os.getloadavg()
    sizes: list[dict[str, Any]] = []
    spark_start: float | None = None
    spills: list[dict[str, Any]] = []
    with benchmark_postgres() as dsn, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        objects = LocalObjectStore(root / "warehouse")
        sources = {}
        with MetaStore(dsn, schema=schema) as meta:
            meta.migrate()
            for rows in scale["sizes"]:
                t = time.perf_counter()
                sources[rows] = build_source(
                    meta, objects, rows=rows, per_file=scale["rows_per_file"]
                )
                print(f"built {rows:,} rows in {time.perf_counter() - t:.1f} s", flush=True)
        # The DuckDB worker in a fresh process per size; Spark in one process (one session,
        # whose start is timed apart; the first warm-up is the JVM's cold first run).
        duck = {
            rows: summarize(
                "duckdb",
                run_engine(
                    dsn,
                    schema,
                    root,
                    engine="duckdb",
                    sources=[sources[rows]],
                    runs=scale["duckdb_runs"],
                ),
                sources[rows],
            )
            for rows in scale["sizes"]
        }
        probe = run_engine(
            dsn,
            schema,
            root,
            engine="spark",
            sources=[sources[rows] for rows in scale["sizes"]],
            runs=scale["spark_runs"],
        )
        spark_start = probe["startup_s"]
        for rows in scale["sizes"]:
            entry = {
                "rows": rows,
                "duckdb": duck[rows],
                "spark": summarize("spark", probe, sources[rows]),
            }
            entry["spark_over_duckdb_time"] = round(
                entry["spark"]["seconds"] / entry["duckdb"]["seconds"], 2
            )
            sizes.append(entry)
        largest = sources[scale["sizes"][-1]]
        for limit in SPILL_LIMITS:
            engine = f"duckdb@{limit}"
            probe = run_engine(dsn, schema, root, engine=engine, sources=[largest], runs=1)
            result = {**summarize(engine, probe, largest), "memory_limit": limit}
            # What the process held beyond DuckDB's limit: Python, Arrow, the Parquet writer.
            result["vm_hwm_over_limit_mib"] = result["vm_hwm_mib"] - round(
                _limit_bytes(limit) / MIB
            )
            # It spilled if its scratch held clearly more than its staged output.
            result["spilled"] = result["scratch_peak_mib"] * MIB > 1.5 * result["bytes_out"]
            spills.append(result)
    cross = crossover(sizes)
    cap = lambda_cap(sizes, spills)
    path = write_results(
        "compaction",
        {
            "scale": args.scale,
            "rows_per_file": scale["rows_per_file"],
            "duckdb": {
                "memory_limit": DUCKDB_LIMITS.memory_limit,
                "threads": DUCKDB_LIMITS.threads,
            },
            "duckdb_spill_limits": list(SPILL_LIMITS),
            "spark": {
                "master": SPARK_MASTER,
                "driver_memory": SPARK_DRIVER_MEMORY,
                "session_start_s": None if spark_start is None else round(spark_start, 1),
            },
            "memory_method": (
                "child process tree (psutil) sampled every 100 ms: sum of RSS and of PSS;"
                " DuckDB also VmHWM of its one process"
            ),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "sizes": sizes,
            "spill": spills,
            "crossover": cross,
            "lambda_cap": cap,
        },
    )
    print(f"wrote {path} in {time.perf_counter() - started:.0f} s")
    for entry in sizes:
        for engine in ("duckdb", "spark"):
            r = entry[engine]
            print(
                f"{r['rows_in']:>9,} rows, {r['files_in']} files, {r['bytes_in'] / 1e6:.1f} MB,"
                f" {engine:>6}: {r['seconds']} s (warm-up {r['warmup_s']}), {r['rows_per_s']:,}"
                f" rows/s, {r['mb_per_s']} MB/s, peak PSS {r['peak_tree_pss_mib']} MiB"
                f" (RSS {r['peak_tree_rss_mib']}, {r['processes']} processes)"
            )
    print(f"Spark session start-up (not timed above): {spark_start:.1f} s")
    for r in spills:
        print(
            f"DuckDB worker at {r['memory_limit']} ({'spilled' if r['spilled'] else 'no spill'}):"
            f" {r['seconds']} s, {r['mb_per_s']} MB/s,"
            f" scratch peak {r['scratch_peak_mib']} MiB, VmHWM {r['vm_hwm_mib']} MiB"
        )
    print(f"Spark/DuckDB time: {cross['spark_over_duckdb_time']}: {cross['measured']}")
    print(
        f"lambda_merge_cap_bytes: {cap['recommended_lambda_merge_cap_bytes']:,}"
        f" ({cap['recommended_mib']} MiB); by time {cap['cap_by_time_bytes'] / GIB:.2f} GiB,"
        f" by disk {cap['by_lambda_memory_mb'][str(LAMBDA_MEMORY_MB)]['cap_by_disk_bytes'] / GIB:.2f}"
        f" GiB (model), {cap['cap_by_disk_measured_ratio_bytes'] / GIB:.2f} GiB (measured ratio)"
        + ("" if cap["valid"] else f"; NOT VALID: {cap['note']}")
    )


if __name__ == "__main__":
    main()
