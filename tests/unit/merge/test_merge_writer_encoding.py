"""A merge writes its files with insert's encoding choices, decided on the first row group it
writes: unique ids plain, columns of few values with a dictionary."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from icefloe.ingest.row_ids import ROW_ID_COLUMN, new_row_ids
from icefloe.merge.writer import stage_rows
from icefloe.spec import TableSpec

ROWS = 6_000
SPEC = TableSpec.create(name="t", schema="id VARCHAR, event VARCHAR")


def test_merged_files_keep_unique_ids_plain_and_few_values_in_a_dictionary(
    tmp_path: Path,
) -> None:
    # Given sorted rows with a unique id and an event of seven values, in batches
    table = pa.table(
        {
            "id": [f"m-{i:08d}" for i in range(ROWS)],
            "event": [f"e{i % 7}" for i in range(ROWS)],
            ROW_ID_COLUMN: new_row_ids(ROWS),
        }
    )

    # When the merge writer stages them
    staged = stage_rows(SPEC, table.to_batches(max_chunksize=1000), tmp_path, bytes_per_row=20)

    # Then every file's ids are plain and its events have a dictionary
    assert staged
    for item in staged:
        metadata = pq.read_metadata(item.path)
        for g in range(metadata.num_row_groups):
            encodings = {
                metadata.row_group(g).column(i).path_in_schema: metadata.row_group(g)
                .column(i)
                .encodings
                for i in range(metadata.num_columns)
            }
            assert "RLE_DICTIONARY" not in encodings["id"]
            assert "RLE_DICTIONARY" in encodings["event"]
    # And the rows read back as written
    read = pa.concat_tables(pq.read_table(item.path) for item in staged)
    assert read.select(["id", "event"]).equals(table.select(["id", "event"]))
