"""Which columns of a data file are dictionary-encoded: every leaf but times, the row id and
string columns whose first rows are nearly all distinct (a dictionary would only be filled and
dropped); and which get min/max statistics: every leaf but JSON text, which nothing prunes by."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.datafiles import DISTINCT_SAMPLE_ROWS, encode_parquet, mostly_distinct_columns
from icefloe.ingest.row_ids import ROW_ID_COLUMN, new_row_ids
from icefloe.spec import TableSpec

ROWS = 5_000
SPEC = TableSpec.create(
    name="t",
    schema="ts TIMESTAMP, zoned TIMESTAMPTZ, at TIME, event VARCHAR, n BIGINT, day DATE,"
    " tags VARCHAR[], props JSON",
)


def _encodings(data: bytes) -> dict[str, set[str]]:
    metadata = pq.read_metadata(pa.BufferReader(data))
    group = metadata.row_group(0)
    return {
        group.column(i).path_in_schema: set(group.column(i).encodings)
        for i in range(metadata.num_columns)
    }


def test_times_and_row_ids_are_plain_and_every_other_leaf_has_a_dictionary() -> None:
    # Given a batch with a column of each kind, few distinct values in each but the times
    n = range(ROWS)
    table = pa.table(
        {
            "ts": pa.array([datetime(2026, 1, 1, 0, 0, i % 60) for i in n], pa.timestamp("us")),
            "zoned": pa.array(
                [datetime(2026, 1, 1, tzinfo=UTC)] * ROWS, pa.timestamp("us", tz="UTC")
            ),
            "at": pa.array([time(i % 24) for i in n], pa.time64("us")),
            "event": pa.array([f"e{i % 7}" for i in n]),
            "n": pa.array([i % 5 for i in n], pa.int64()),
            "day": pa.array([date(2026, 1, 1 + i % 3) for i in n]),
            "tags": pa.array([["a", "b"][: i % 3] for i in n], pa.list_(pa.string())),
            "props": pa.array(['{"a": 1}'] * ROWS, pa.json_(pa.string())),
            ROW_ID_COLUMN: new_row_ids(ROWS),
        }
    )

    # When it is encoded as a data file
    encoded = encode_parquet(table, spec=SPEC, row_group_sizes=ROWS)

    # Then each leaf is dictionary-encoded exactly when it is not a time or the row id
    dictionary = {
        path for path, kinds in _encodings(encoded.data).items() if "RLE_DICTIONARY" in kinds
    }
    assert dictionary == {"event", "n", "day", "tags.list.element", "props"}
    # And each leaf but the JSON text has statistics
    metadata = pq.read_metadata(pa.BufferReader(encoded.data))
    group = metadata.row_group(0)
    bounded = {
        group.column(i).path_in_schema
        for i in range(metadata.num_columns)
        if group.column(i).statistics is not None and group.column(i).statistics.has_min_max
    }
    assert bounded == set(_encodings(encoded.data)) - {"props"}
    # And the file reads back as written
    assert pq.read_table(pa.BufferReader(encoded.data)).equals(table)


ID_SPEC = TableSpec.create(
    name="t", schema="id VARCHAR, users VARCHAR, doc JSON, sparse VARCHAR, event VARCHAR"
)


def _id_columns(rows: int) -> pa.Table:
    """Unique ids, users drawn at random from 20,000, unique JSON documents, a column nearly
    all null, and a handful of events."""
    n = range(rows)
    draw = random.Random(7)
    return pa.table(
        {
            "id": [f"m-{i:08d}-{(i * 7919) % 104729:06d}" for i in n],
            "users": [f"u{draw.randrange(20_000)}" for _ in n],
            "doc": pa.array([f'{{"n": {i}}}' for i in n], pa.json_(pa.string())),
            "sparse": [f"s{i}" if i % 100 == 0 else None for i in n],
            "event": [f"e{i % 7}" for i in n],
        }
    )


def test_only_columns_of_nearly_all_distinct_strings_are_written_without_a_dictionary() -> None:
    # Given unique ids and JSON documents beside columns of few values, 20,000 users (more
    # distinct values than the sample has rows, yet repeating in the file) and a sparse column
    table = _id_columns(3 * DISTINCT_SAMPLE_ROWS)

    # When it is encoded as a data file
    encoded = encode_parquet(table, spec=ID_SPEC, row_group_sizes=table.num_rows)

    # Then the ids and the documents are plain, and every other column keeps its dictionary
    assert mostly_distinct_columns(table) == {"id", "doc"}
    dictionary = {
        path for path, kinds in _encodings(encoded.data).items() if "RLE_DICTIONARY" in kinds
    }
    assert dictionary == {"users", "sparse", "event"}
    # And the file reads back as written
    assert pq.read_table(pa.BufferReader(encoded.data)).equals(table)


@pytest.mark.parametrize("rows", [0, 1, 255])
def test_a_sample_of_too_few_values_keeps_every_dictionary(rows: int) -> None:
    assert mostly_distinct_columns(_id_columns(rows)) == frozenset()
