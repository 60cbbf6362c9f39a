"""A small lake for merge tests and what they ask of it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from icefloe.ingest import Inserter
from icefloe.merge import LocalMergeReport, MergeWorker, merge_locally
from icefloe.metastore.models import DataFile
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.sample_events import sample_events
from icefloe.spec import SizeTargets, TableSpec
from icefloe.storage import LocalObjectStore

SCHEMA = "ts TIMESTAMP NOT NULL, event VARCHAR NOT NULL, user_id VARCHAR, properties JSON"
# Every row of the events table, in a stable order (a JSON column compared as text).
ALL_ROWS = "SELECT ts, event, user_id, CAST(properties AS VARCHAR) AS p FROM events ORDER BY ALL"
START = datetime(2026, 3, 1)


@dataclass
class Lake:
    meta: MetaStore
    objects: LocalObjectStore
    inserter: Inserter
    worker: MergeWorker
    engine: QueryEngine

    def create(self, **overrides: object) -> TableSpec:
        kwargs: dict[str, object] = {
            "name": "events",
            "schema": SCHEMA,
            "partition_by": "day(ts)",
            "sort_by": "event, ts",
            "sizes": SizeTargets(min_files_to_merge=4),
        }
        kwargs.update(overrides)
        spec = TableSpec.create(**kwargs)  # type: ignore[arg-type]
        self.meta.create_table(spec)
        return spec

    def insert_batches(
        self, table: str, *, batches: int, rows: int, days: int, seed: int = 1
    ) -> None:
        for n in range(batches):
            events = sample_events(rows, days=days, start=START, users=40, seed=seed + n)
            self.inserter.insert_rows(table, events)

    def merge(
        self, table: str | None = None, *, until_quiet: bool = True, workers: int = 1
    ) -> LocalMergeReport:
        return merge_locally(
            meta=self.meta,
            worker=self.worker,
            table=table,
            until_quiet=until_quiet,
            workers=workers,
        )

    def rows(self, sql: str, *, snapshot_id: int | None = None) -> list[dict[str, object]]:
        return self.engine.query(sql, snapshot_id=snapshot_id).rows.to_pylist()

    def head(self, table: str = "events") -> int:
        return self.meta.get_table(table).head_snapshot_id

    def data_objects(self, table: str = "events") -> set[str]:
        """The keys of every object under the table's data prefix, named by a row or not."""
        return {o.key for o in self.objects.list_prefix(f"{table}/data/")}

    def every_file_row(self, table: str = "events") -> list[DataFile]:
        """Every file row of the table, live or dead."""
        return self.meta.files_by_id(table, range(1, 1_000_000))

    def live_files_per_partition(self, table: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for f in self.meta.files(table):
            counts[f.partition_path] = counts.get(f.partition_path, 0) + 1
        return counts
