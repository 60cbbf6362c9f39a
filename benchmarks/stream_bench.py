"""An Arrow stream bigger than memory should be: inserted through ``lake.insert`` in one
snapshot, with the process's peak RSS bounded by the chunk size, not by the stream.

The stream is generated batch by batch (it never exists whole): Segment-like events, one
stream in time order over seven days, ``--scale full`` about 2 GB of Arrow memory. Reported:
the stream's Arrow bytes and rows, rows/s, the process's RSS before the insert and its peak
during it (``VmHWM`` reset first), the growth, and the files and snapshots it made.

    python -m benchmarks.stream_bench --scale small|full
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.common import reset_peak, run_scaled, status_kib
from icefloe.ingest.arrow_stream import STREAM_CHUNK_BYTES

SCALES: dict[str, dict[str, int]] = {
    "small": {"stream_bytes": 200 * 2**20},
    "full": {"stream_bytes": 2 * 2**30},
}
SCHEMA = (
    "ts TIMESTAMP NOT NULL, message_id VARCHAR NOT NULL, type VARCHAR NOT NULL,"
    " event VARCHAR, user_id VARCHAR, page_url VARCHAR, amount DOUBLE"
)
BATCH_ROWS = 65_536
START_US = 1_793_491_200_000_000  # 2026-11-01 in microseconds
SPAN_US = 7 * 86_400 * 1_000_000


def stream(total_bytes: int, *, seed: int = 1) -> tuple[pa.RecordBatchReader, dict[str, int]]:
    """A reader of about ``total_bytes`` of events, made batch by batch; and a dict that
    counts the rows and bytes it gave once read."""
    counts = {"rows": 0, "bytes": 0}
    batches = max(1, total_bytes // _batch(0, seed, step=1).nbytes)
    step = SPAN_US // (batches * BATCH_ROWS)  # the stream spans seven days

    def batches_of() -> Iterator[pa.RecordBatch]:
        for number in range(batches):
            batch = _batch(number, seed, step=step)
            counts["rows"] += batch.num_rows
            counts["bytes"] += batch.nbytes
            yield batch

    schema = _batch(0, seed, step=1).schema
    return pa.RecordBatchReader.from_batches(schema, batches_of()), counts


def _batch(number: int, seed: int, *, step: int) -> pa.RecordBatch:
    """Batch ``number``: its rows ``step`` microseconds apart, after the batches before it."""
    offset = number * BATCH_ROWS
    index = pa.array(range(offset, offset + BATCH_ROWS), pa.int64())
    ts = pc.cast(pc.add(pc.multiply(index, step), START_US), pa.timestamp("us"))
    mixed = pc.bit_wise_and(pc.multiply(pc.add(index, seed), 2_654_435_761), 0xFFFFFFFF)
    kinds = pa.array(["track", "page", "identify", "track"])
    events = pa.array(["Viewed", "Clicked", "Signed Up", "Order Completed", None])
    pages = pa.array(["/", "/pricing", "/docs", "/blog", "/signup", "/checkout"])
    return pa.RecordBatch.from_pydict(
        {
            "ts": ts,
            "message_id": pc.binary_join_element_wise(
                pa.array(["m"] * BATCH_ROWS), pc.cast(index, pa.string()), ""
            ),
            "type": pc.take(kinds, pc.remainder(mixed, 4)),
            "event": pc.take(events, pc.remainder(pc.shift_right(mixed, 3), 5)),
            "user_id": pc.binary_join_element_wise(
                pa.array(["u"] * BATCH_ROWS),
                pc.cast(pc.remainder(pc.shift_right(mixed, 7), 20_000), pa.string()),
                "",
            ),
            "page_url": pc.take(pages, pc.remainder(pc.shift_right(mixed, 5), 6)),
            "amount": pc.divide(pc.cast(pc.remainder(mixed, 50_000), pa.float64()), 100.0),
        }
    )


def bench(dsn: str, schema: str, scale: dict[str, int], root: Path) -> dict[str, Any]:
    import icefloe

    with icefloe.connect(
        home=root / "icefloe",
        warehouse=str(root / "icefloe" / "warehouse"),
        database_url=dsn,
        database_schema=schema,
        query_isolation="in_process",
    ) as lake:
        lake.create_table("events", schema=SCHEMA, partition_by="day(ts)", sort_by="type, ts")
        lake.inserter()  # its DuckDB opened before the baseline
        reader, counts = stream(scale["stream_bytes"])
        before = status_kib("VmRSS")
        reset_peak()
        started = time.perf_counter()
        result = lake.insert("events", reader)
        seconds = time.perf_counter() - started
        peak = status_kib("VmHWM")
        stored = lake.query("SELECT count(*) AS n FROM events").column("n")[0].as_py()
        snapshots = len(lake.snapshots("events"))
    if stored != counts["rows"] or result.rows != counts["rows"]:
        raise AssertionError(f"stored {stored} of {counts['rows']} rows")
    output = {
        "stream_bytes": counts["bytes"],
        "rows": counts["rows"],
        "chunk_bytes": STREAM_CHUNK_BYTES,
        "seconds": round(seconds, 2),
        "rows_per_s": round(counts["rows"] / seconds),
        "rss_before_mib": round(before / 1024, 1),
        "peak_rss_mib": round(peak / 1024, 1),
        "peak_growth_mib": round((peak - before) / 1024, 1),
        "files": len(result.files),
        "snapshots": snapshots,
    }
    print(json.dumps(output), flush=True)
    return output


def main() -> None:
    run_scaled("stream_bench", __doc__, SCALES, bench)


if __name__ == "__main__":
    main()
