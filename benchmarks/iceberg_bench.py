"""Iceberg publication benchmark (issue 35): how long a commit takes to show in Iceberg, and what
one publication pass costs on a table of many live files. Local SQL catalog (SQLite), local
warehouse, real Postgres, real pyiceberg.

1. **Commit -> visible**: on a table of ``lag_files`` live files, one small insert commits and
   the publication pass (:func:`icefloe.iceberg.publish_due`) runs right after, as the
   publisher does on a commit event; measured from the insert's return (the commit landed) to
   a reader's ``load_table`` showing that snapshot. Median over ``lag_runs``.
2. **Time per pass at ``live_files`` live files**: after one small insert (an incremental
   publication: one file added), and after a merge that replaces many files of one partition
   (``merge_removed`` files out, one in per hundred; the table is brought back to
   ``live_files`` before each), each median over its runs, against a
   baseline measured in the same run: the same table's first, full publication (every file
   added) into a fresh namespace. Each pass is split into phases, timed by wrapping the
   publisher's own steps: ``load`` (open or create the Iceberg table), ``list`` (the meta
   store's listing of the head's live files), ``plan`` (pyiceberg's plan of the published
   files: every manifest read), ``footers`` (each added file's Parquet footer read for its
   statistics) and ``commit`` (the rest: mostly the Iceberg commit, which writes the manifest
   list and manifests, plus the reload and snapshot expiry).

The live files are built cheaply: one real insert writes a file per day, and copies of those
files (fresh objects, the same rows) are registered in batches through the meta store's commit
API, as ``delete_bench`` and ``metastore_bench`` build their tables.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import benchmark_postgres, write_results
from icefloe.datafiles import new_data_key
from icefloe.iceberg import local_catalog, publish_due
from icefloe.iceberg import publish as publish_module
from icefloe.iceberg.publish import SNAPSHOT_PROPERTY
from icefloe.ingest import Inserter
from icefloe.metastore.models import DataFile, NewFile
from icefloe.metastore.store import MetaStore
from icefloe.sample_events import sample_events, sample_events_spec
from icefloe.storage import LocalObjectStore

SCALES = {
    "small": {
        "live_files": 1_000,
        "lag_files": 100,
        "lag_runs": 10,
        "baseline_runs": 3,
        "insert_runs": 5,
        "merge_runs": 3,
        "merge_removed": 100,
    },
    "full": {
        "live_files": 10_000,
        "lag_files": 100,
        "lag_runs": 10,
        "baseline_runs": 3,
        "insert_runs": 7,
        "merge_runs": 5,
        "merge_removed": 1_000,
    },
}
DAYS = 7
REGISTER_BATCH = 1_000  # files per commit while the table is built
PHASES = ("load", "list", "plan", "footers")


class PhaseTimer:
    """Wraps the publisher's steps (module functions it looks up at each call) to time them."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    @contextmanager
    def installed(self, meta: MetaStore) -> Iterator[PhaseTimer]:
        wrapped = {
            "load": "_load_or_create",
            "plan": "_published_files",
            "footers": "data_file_record",
        }
        originals = {name: getattr(publish_module, name) for name in wrapped.values()}
        for phase, name in wrapped.items():
            setattr(publish_module, name, self._timed(phase, originals[name]))
        # The meta store's listing of the head's live files (the pass's other calls of
        # meta.files, if any, count too)
        meta.files = self._timed("list", meta.files)  # type: ignore[method-assign]
        try:
            yield self
        finally:
            for name, original in originals.items():
                setattr(publish_module, name, original)
            del meta.files

    def _timed(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - start

        return timed

    def reset(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)


class Bench:
    def __init__(self, meta: MetaStore, root: Path) -> None:
        self.meta = meta
        self.objects = LocalObjectStore(root / "warehouse")
        self.home = root
        self.inserter = Inserter(meta=meta, objects=self.objects, duckdb_threads=1)
        self.timer = PhaseTimer()
        self.batch = 0

    def create(self, table: str, files: int) -> None:
        """An opted-in table of ``files`` live files (one real insert, then copies)."""
        self.meta.create_table(sample_events_spec(table))
        self.meta.set_publish(table, "iceberg")
        self.inserter.insert_rows(table, sample_events(200 * DAYS, days=DAYS, seed=1))
        templates = self.meta.files(table)
        copies = [templates[n % len(templates)] for n in range(files - len(templates))]
        for start in range(0, len(copies), REGISTER_BATCH):
            self.register(table, copies[start : start + REGISTER_BATCH], operation="append")
        assert len(self.meta.files(table)) == files

    def register(
        self,
        table: str,
        like: list[DataFile],
        *,
        operation: str,
        remove: list[int] | None = None,
    ) -> None:
        """Commit fresh copies of ``like`` (and the removal of ``remove``)."""
        added = []
        for f in like:
            key = new_data_key(table=table, partition_path=f.partition_path)
            self.objects.put_file(key, Path(self.objects.uri(f.path)))
            added.append(
                NewFile(
                    path=key,
                    partition_path=f.partition_path,
                    size_bytes=f.size_bytes,
                    row_count=f.row_count,
                    row_group_count=f.row_group_count,
                    partition_values=dict(f.partition_values),
                    partition_start=f.partition_start,
                    column_stats=dict(f.column_stats),
                    spec_version=f.spec_version,
                )
            )
        if operation == "append":
            self.meta.commit_append(table, files=added)
        else:
            self.meta.commit(table, operation="replace", add=added, remove=remove or [])

    def small_insert(self, table: str) -> None:
        self.batch += 1
        self.inserter.insert_rows(table, sample_events(50, days=1, seed=100 + self.batch))

    def merge(self, table: str, *, removed: int) -> None:
        """What a merge of one partition commits: ``removed`` files out, one per hundred in."""
        live = self.meta.files(table)
        day = max(
            {f.partition_path for f in live},
            key=lambda p: sum(1 for f in live if f.partition_path == p),
        )
        inputs = [f for f in live if f.partition_path == day][:removed]
        assert len(inputs) == removed, (len(inputs), removed)
        self.register(
            table,
            inputs[: max(1, removed // 100)],
            operation="replace",
            remove=[f.file_id for f in inputs],
        )

    def publish(self, table: str, namespace: str) -> tuple[float, dict[str, float], Any]:
        """One pass over ``table``: its seconds, its phases' and what it published."""
        self.timer.reset()
        catalog = local_catalog(self.home)
        start = time.perf_counter()
        with self.timer.installed(self.meta):
            done = publish_due(
                meta=self.meta,
                objects=self.objects,
                catalog=catalog,
                namespace=namespace,
                tables=[table],
            )
        seconds = time.perf_counter() - start
        assert not done.failed and len(done.published) == 1, done
        phases = dict(self.timer.seconds)
        phases["commit"] = seconds - sum(phases.values())
        return seconds, phases, done.published[0]

    def visible(self, table: str, namespace: str) -> bool:
        """Whether a reader's load of the Iceberg table shows the head, with every live file."""
        iceberg = local_catalog(self.home).load_table((namespace, table))
        head = self.meta.get_table(table).head_snapshot_id
        current = iceberg.current_snapshot()
        total = current.summary.get("total-data-files") if current and current.summary else None
        return iceberg.properties.get(SNAPSHOT_PROPERTY) == str(head) and total == str(
            len(self.meta.files(table))
        )


def summarize(runs: list[tuple[float, dict[str, float], Any]]) -> dict[str, Any]:
    seconds = [r[0] for r in runs]
    last = runs[-1][2]
    return {
        "runs": len(runs),
        "seconds_runs": [round(s, 3) for s in seconds],
        "median_s": round(statistics.median(seconds), 3),
        "phases_median_s": {
            phase: round(statistics.median(r[1][phase] for r in runs), 3)
            for phase in (*PHASES, "commit")
        },
        "files_added": last.files_added,
        "files_removed": last.files_removed,
        "files_live": last.files_live,
    }


def bench_lag(bench: Bench, *, files: int, runs: int) -> dict[str, Any]:
    """Commit -> visible in Iceberg, the pass right after the commit."""
    bench.create("lag", files)
    bench.publish("lag", "lag")  # the first, full publication
    live = len(bench.meta.files("lag"))
    lags = []
    for _ in range(runs):
        bench.small_insert("lag")
        committed = time.perf_counter()
        bench.publish("lag", "lag")
        assert bench.visible("lag", "lag")
        lags.append(time.perf_counter() - committed)
    return {
        "live_files": live,  # before the first of the commits (one file more each)
        "runs": runs,
        "lag_s_runs": [round(s, 3) for s in lags],
        "median_lag_s": round(statistics.median(lags), 3),
    }


def bench_passes(bench: Bench, scale: dict[str, int]) -> dict[str, Any]:
    files = scale["live_files"]
    started = time.perf_counter()
    bench.create("big", files)
    build_s = time.perf_counter() - started
    # Baseline: the first, full publication, each run into a namespace of its own
    baseline = []
    for n in range(scale["baseline_runs"]):
        baseline.append(bench.publish("big", f"first_{n}"))
        assert bench.visible("big", f"first_{n}")
    # The table kept current in one namespace: passes after one small insert, after a merge
    bench.publish("big", "kept")
    inserts = []
    for _ in range(scale["insert_runs"]):
        bench.small_insert("big")
        inserts.append(bench.publish("big", "kept"))
        assert bench.visible("big", "kept")
    merges = []
    removed = scale["merge_removed"]
    for _ in range(scale["merge_runs"]):
        # Back to ``files`` live files first (published, untimed), then the merge
        live = bench.meta.files("big")
        if len(live) < files:
            bench.register("big", live[: files - len(live)], operation="append")
            bench.publish("big", "kept")
        bench.merge("big", removed=removed)
        merges.append(bench.publish("big", "kept"))
        assert bench.visible("big", "kept")
    first, after_insert, after_merge = summarize(baseline), summarize(inserts), summarize(merges)
    assert first["files_added"] >= files and after_insert["files_removed"] == 0
    assert after_merge["files_removed"] == scale["merge_removed"]
    return {
        "live_files": files,
        "build_s": round(build_s, 1),
        "baseline_first_publication": first,
        "pass_after_small_insert": {
            **after_insert,
            "ratio_to_baseline": round(after_insert["median_s"] / first["median_s"], 3),
        },
        "pass_after_merge": {
            **after_merge,
            "ratio_to_baseline": round(after_merge["median_s"] / first["median_s"], 3),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    # pyiceberg warns once per file of a column Parquet keeps no statistics for (JSON)
    logging.getLogger("pyiceberg.io.pyarrow").setLevel(logging.ERROR)
    with (
        benchmark_postgres() as dsn,
        tempfile.TemporaryDirectory() as tmp,
        MetaStore(dsn, schema=schema) as meta,
    ):
        meta.migrate()
        bench = Bench(meta, Path(tmp))
        try:
            lag = bench_lag(bench, files=scale["lag_files"], runs=scale["lag_runs"])
            print(json.dumps({"commit_to_visible": lag}), flush=True)
            passes = bench_passes(bench, scale)
            print(json.dumps({"passes": passes}), flush=True)
        finally:
            bench.inserter.close()
    path = write_results(
        "iceberg_bench",
        {"scale": args.scale, "catalog": "sql", "commit_to_visible": lag, "passes": passes},
    )
    first = passes["baseline_first_publication"]
    insert = passes["pass_after_small_insert"]
    merge = passes["pass_after_merge"]
    print(
        f"commit -> visible in Iceberg ({lag['live_files']:,} live files):"
        f" median {lag['median_lag_s'] * 1000:.0f} ms over {lag['runs']} commits\n"
        f"pass at {passes['live_files']:,} live files: first full publication"
        f" {first['median_s']:.2f} s; after one small insert {insert['median_s']:.2f} s"
        f" ({insert['ratio_to_baseline']:.2f}x); after a merge of"
        f" {merge['files_removed']:,} files {merge['median_s']:.2f} s"
        f" ({merge['ratio_to_baseline']:.2f}x)\n"
        f"wrote {path}"
    )


if __name__ == "__main__":
    main()
