"""Anything that exports an Arrow stream inserts as the same Arrow table would, in one
snapshot: pandas and polars DataFrames, DuckDB relations, record batch readers, datasets.
A stream is read in chunks; a refused chunk or a failing stream leaves nothing behind."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from icefloe.errors import BatchRejectedError, InvalidInputError
from icefloe.ingest import Inserter, InsertLimits
from icefloe.lake import Lake

pytestmark = pytest.mark.integration

SCHEMA = (
    "ts TIMESTAMP NOT NULL, user_id VARCHAR, n INTEGER, big BIGINT, x DOUBLE, ok BOOLEAN,"
    " birthday DATE, price DECIMAL(10, 2), props JSON"
)
VALUES = "SELECT * EXCLUDE (_row_id) FROM {t} ORDER BY ts, user_id NULLS FIRST, n NULLS FIRST"


def events(rows: int, *, seed: int) -> pa.Table:
    """Random events over three days, a share of every nullable column NULL."""
    rng = random.Random(seed)
    start = datetime(2026, 3, 1)

    def maybe(value: object) -> object:
        return None if rng.random() < 0.1 else value

    records = [
        {
            "ts": start + timedelta(seconds=rng.randrange(3 * 86400)),
            "user_id": maybe(f"u{rng.randrange(50)}"),
            "n": maybe(rng.randint(-(2**31), 2**31 - 1)),
            "big": maybe(rng.randint(-(2**62), 2**62)),
            "x": maybe(rng.uniform(-1e6, 1e6)),
            "ok": maybe(rng.random() < 0.5),
            "birthday": maybe(date(2026, 1, 1) + timedelta(days=rng.randrange(365))),
            "price": maybe(Decimal(rng.randrange(-(10**8), 10**8)) / 100),
            "props": maybe(f'{{"k": {rng.randrange(9)}, "tag": "t{rng.randrange(3)}"}}'),
        }
        for _ in range(rows)
    ]
    return pa.Table.from_pylist(
        records,
        schema=pa.schema(
            [
                ("ts", pa.timestamp("us")),
                ("user_id", pa.string()),
                ("n", pa.int32()),
                ("big", pa.int64()),
                ("x", pa.float64()),
                ("ok", pa.bool_()),
                ("birthday", pa.date32()),
                ("price", pa.decimal128(10, 2)),
                ("props", pa.string()),
            ]
        ),
    )


def _duckdb_relation(table: pa.Table) -> Any:
    con = duckdb.connect()
    con.register("events", table)
    return con.sql("SELECT * FROM events")


# pandas' default dtypes turn an integer column holding a NULL into floats, which an integer
# column refuses (a float past 2**53 is not the integer it came from): users keep integers with
# pandas' nullable dtypes or its Arrow dtypes.
_NULLABLE = {
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}

EXPORTERS: dict[str, Callable[[pa.Table], object]] = {
    "pandas, nullable dtypes": lambda t: t.to_pandas(types_mapper=_NULLABLE.get),
    "pandas, Arrow dtypes": lambda t: t.to_pandas(types_mapper=pd.ArrowDtype),
    "polars": pl.from_arrow,
    "duckdb relation": _duckdb_relation,
    "record batch reader": lambda t: pa.RecordBatchReader.from_batches(
        t.schema, t.to_batches(max_chunksize=100)
    ),
    "dataset": ds.dataset,
}


def _create(lake: Lake, name: str) -> None:
    lake.create_table(name, schema=SCHEMA, partition_by="day(ts)", sort_by="user_id")


@pytest.mark.parametrize("source", sorted(EXPORTERS))
def test_a_stream_inserts_the_rows_the_arrow_path_does(connected_lake: Lake, source: str) -> None:
    # Given the same events as an Arrow table and as the source's object
    table = events(600, seed=len(source))
    _create(connected_lake, "by_arrow")
    _create(connected_lake, "by_stream")
    connected_lake.insert("by_arrow", table)

    # When the source's object is inserted
    result = connected_lake.insert("by_stream", EXPORTERS[source](table))

    # Then it committed every row in one snapshot, and the tables hold the same values
    assert (result.committed, result.rows, result.snapshot_id) == (True, 600, 1)
    assert connected_lake.query(VALUES.format(t="by_stream")) == connected_lake.query(
        VALUES.format(t="by_arrow")
    )


def test_a_stream_read_in_many_chunks_commits_once(connected_lake: Lake) -> None:
    # Given a stream of 2,000 events in batches of 100, read in chunks of about 20 KB
    table = events(2000, seed=7)
    _create(connected_lake, "t")
    _create(connected_lake, "reference")
    connected_lake.insert("reference", table)
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=100))

    # When it is inserted
    result = connected_lake.inserter().insert_arrow_stream("t", reader, chunk_bytes=20_000)

    # Then each chunk wrote files of its own, and one snapshot committed them all
    snapshots = connected_lake.snapshots("t")
    assert len(snapshots) == 1 and result.snapshot_id == snapshots[0].snapshot_id
    assert len(result.files) > 3 * 5  # several chunks, three days each
    assert connected_lake.query(VALUES.format(t="t")) == connected_lake.query(
        VALUES.format(t="reference")
    )


def _stored_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.parquet"))


def test_chunks_are_never_bigger_than_a_batch_may_be(connected_lake: Lake, tmp_path: Path) -> None:
    # Given an inserter whose batches may hold 50 KB, asked for chunks of 10 MB
    table = events(2000, seed=8)
    _create(connected_lake, "t")
    limits = InsertLimits(max_batch_bytes=50_000)
    inserter = Inserter(meta=connected_lake.meta, objects=connected_lake.objects, limits=limits)
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=100))

    # When a stream bigger than that is inserted
    try:
        result = inserter.insert_arrow_stream("t", reader, chunk_bytes=10 * 2**20)
    finally:
        inserter.close()

    # Then it is read in chunks of at most the batch limit, not refused as one big batch
    assert table.nbytes > 2 * limits.max_batch_bytes
    assert result.rows == 2000 and len(connected_lake.snapshots("t")) == 1


def test_a_bad_row_in_a_later_chunk_is_named_and_nothing_is_stored(
    connected_lake: Lake,
) -> None:
    # Given a stream whose row 1,234 is NULL in a NOT NULL column, read in small chunks
    table = events(2000, seed=3)
    ts = table.column("ts").to_pylist()
    ts[1234] = None
    table = table.set_column(0, "ts", pa.array(ts, pa.timestamp("us")))
    _create(connected_lake, "t")
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=100))

    # When it is inserted, it is refused, naming the row from the stream's start
    with pytest.raises(BatchRejectedError, match="row 1234, field 'ts'") as refused:
        connected_lake.inserter().insert_arrow_stream("t", reader, chunk_bytes=20_000)
    assert [(p.row, p.field) for p in refused.value.problems] == [(1234, "ts")]

    # And the earlier chunks' files are gone, nothing committed
    assert connected_lake.snapshots("t") == []
    assert _stored_files(Path(connected_lake.objects.root_uri)) == []


def test_a_later_chunk_with_many_bad_rows_says_how_many_more(connected_lake: Lake) -> None:
    # Given eight NULLs in a NOT NULL column, in one later chunk
    table = events(2000, seed=4)
    ts = table.column("ts").to_pylist()
    for row in range(1200, 1208):
        ts[row] = None
    table = table.set_column(0, "ts", pa.array(ts, pa.timestamp("us")))
    _create(connected_lake, "t")
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=100))

    # When it is inserted, the first few are named from the stream's start, and the rest
    # counted
    with pytest.raises(
        BatchRejectedError, match=r"row 1200, field 'ts'.*\(and 3 more\)"
    ) as refused:
        connected_lake.inserter().insert_arrow_stream("t", reader, chunk_bytes=20_000)
    assert [p.row for p in refused.value.problems][:5] == [1200, 1201, 1202, 1203, 1204]
    assert refused.value.total == 8


def test_a_stream_that_fails_midway_leaves_nothing(connected_lake: Lake) -> None:
    table = events(500, seed=5)
    _create(connected_lake, "t")

    def batches() -> Iterator[pa.RecordBatch]:
        yield from table.to_batches(max_chunksize=100)
        raise pa.ArrowInvalid("the producer broke")

    reader = pa.RecordBatchReader.from_batches(table.schema, batches())
    with pytest.raises(BatchRejectedError, match="failed after 500 rows: the producer broke"):
        connected_lake.inserter().insert_arrow_stream("t", reader, chunk_bytes=20_000)
    assert connected_lake.snapshots("t") == []
    assert _stored_files(Path(connected_lake.objects.root_uri)) == []


def test_an_empty_stream_and_an_unknown_column_are_refused(connected_lake: Lake) -> None:
    _create(connected_lake, "t")
    empty = events(0, seed=1)
    with pytest.raises(BatchRejectedError, match="holds no rows"):
        connected_lake.insert("t", empty.to_reader())
    # pandas keeps a named index as a column: it is refused by name
    frame = events(3, seed=1).to_pandas().set_index("user_id")
    with pytest.raises(InvalidInputError, match="account"):
        connected_lake.insert("t", frame.rename_axis("account"))
    assert connected_lake.snapshots("t") == []


def test_a_frame_column_arrow_cannot_read_is_named(connected_lake: Lake) -> None:
    # polars exports Int128 in a format pyarrow does not read: the refusal names the column
    connected_lake.create_table("wide", schema="n BIGINT, id HUGEINT")
    frame = pl.DataFrame({"n": [1, 2], "id": pl.Series([1, 2**100], dtype=pl.Int128)})
    with pytest.raises(
        BatchRejectedError, match=r"DataFrame did not export an Arrow stream \(its column 'id'\): "
    ):
        connected_lake.insert("wide", frame)
    assert connected_lake.table("wide").head_snapshot_id == 0


def test_a_stream_with_an_idempotency_key_commits_once(connected_lake: Lake) -> None:
    table = events(300, seed=11)
    _create(connected_lake, "t")
    first = connected_lake.insert("t", pl.from_arrow(table), idempotency_key="load-1")
    again = connected_lake.insert("t", pl.from_arrow(table), idempotency_key="load-1")
    assert first.committed and not again.committed
    assert again.snapshot_id == first.snapshot_id
    assert connected_lake.query("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 300}]
    # The same key with other rows is refused, naming the key
    with pytest.raises(InvalidInputError, match="load-1"):
        connected_lake.insert("t", pl.from_arrow(events(300, seed=12)), idempotency_key="load-1")
