"""A merge whose inputs do not fit in the worker's DuckDB memory limit spills and completes."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from icefloe.merge import MergeLimits, MergeTask, MergeWorker
from icefloe.metastore.models import NewFile
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from icefloe.storage import LocalObjectStore

pytestmark = pytest.mark.integration

FILES = 48
ROWS_PER_FILE = 25_000
LIMIT_MB = 256


def test_inputs_larger_than_the_memory_limit_are_merged_by_spilling(
    meta: MetaStore, tmp_path: Path
) -> None:
    # Given one partition of files whose rows take well over the worker's memory limit decoded
    spec = TableSpec.create(
        name="wide",
        schema="ts TIMESTAMP NOT NULL, k VARCHAR NOT NULL, payload VARCHAR",
        partition_by="day(ts)",
        sort_by="k",
    )
    meta.create_table(spec)
    objects = LocalObjectStore(tmp_path / "warehouse")
    con = duckdb.connect()
    files = []
    for n in range(FILES):
        key = f"wide/data/day=2026-03-01/input-{n}.parquet"
        path = Path(objects.uri(key))
        path.parent.mkdir(parents=True, exist_ok=True)
        con.execute(
            f"COPY (SELECT TIMESTAMP '2026-03-01' AS ts, md5(random()::VARCHAR) AS k,"
            f" repeat(md5(random()::VARCHAR), 9) AS payload,"
            f" unhex(md5(random()::VARCHAR || i::VARCHAR)) AS _row_id"
            f" FROM range({ROWS_PER_FILE}) r(i)) TO '{path}' (COMPRESSION zstd)"
        )
        files.append(
            NewFile(
                path=key,
                partition_path="day=2026-03-01",
                partition_values={"day": "2026-03-01"},
                partition_start=datetime(2026, 3, 1),
                size_bytes=path.stat().st_size,
                row_count=ROWS_PER_FILE,
            )
        )
    meta.commit_append("wide", files=files)
    decoded_mb = con.execute(
        "SELECT sum(length(k) + length(payload) + 8 + 16) / 1e6 FROM read_parquet(?)",
        [[objects.uri(f.path) for f in files]],
    ).fetchone()[0]  # type: ignore[index]
    assert decoded_mb > 1.5 * LIMIT_MB

    live = meta.files("wide")
    token = meta.claim_files("wide", [f.file_id for f in live], lease=timedelta(minutes=5))
    assert token is not None
    task = MergeTask(
        table="wide",
        partition_path="day=2026-03-01",
        file_ids=tuple(f.file_id for f in live),
        claim_token=token,
    )

    # When a worker limited to 256 MB merges them
    worker = MergeWorker(
        meta=meta,
        objects=objects,
        limits=MergeLimits(memory_limit=f"{LIMIT_MB}MB", threads=1, temp_directory=tmp_path),
    )
    outcome = worker.run(task)

    # Then it completes (DuckDB refuses to pass its limit: it spilled), keeping every row sorted
    assert outcome.status == "committed"
    assert outcome.rows_out == FILES * ROWS_PER_FILE
    merged = [objects.uri(f.path) for f in meta.files("wide")]
    unsorted = con.execute(
        "SELECT count(*) FROM (SELECT k, lag(k) OVER (ORDER BY file_row_number) AS prev"
        " FROM read_parquet(?, file_row_number = true)) WHERE k < prev",
        [merged[:1]],
    ).fetchone()
    assert unsorted == (0,)
