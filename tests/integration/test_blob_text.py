"""Text meant for a BLOB is base64 whatever carries it: a JSON field, an NDJSON line, a CSV
field or an Arrow string. CSV and Arrow text went through DuckDB's cast, which kept base64
text as its own characters and read ``\\xff`` as one byte: one input, two stored values."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from icefloe.errors import BatchRejectedError
from icefloe.lake import Lake

SCHEMA = "id BIGINT, b BLOB, s STRUCT(x BLOB), l BLOB[]"


@pytest.fixture
def blobs(connected_lake: Lake) -> Lake:
    connected_lake.create_table("bl", schema=SCHEMA)
    return connected_lake


def stored(lake: Lake) -> list[dict[str, object]]:
    return lake.query("SELECT id, b, s, l FROM bl ORDER BY id").to_pylist()


def test_base64_text_is_the_same_bytes_from_every_input(blobs: Lake, tmp_path: Path) -> None:
    lake = blobs
    row = {"b": "/w==", "s": {"x": "AAE="}, "l": ["/w==", "AA=="]}
    lake.insert("bl", [{"id": 1, **row}])
    ndjson = tmp_path / "rows.ndjson"
    ndjson.write_text(json.dumps({"id": 2, **row}) + "\n")
    lake.insert("bl", ndjson)
    csv = tmp_path / "rows.csv"
    csv.write_text("id,b\n3,/w==\n")
    lake.insert("bl", csv)
    lake.insert("bl", pa.table({"id": [4], "b": ["/w=="], "s": [{"x": "AAE="}], "l": [row["l"]]}))
    # Bytes in Arrow are bytes, not text
    lake.insert("bl", pa.table({"id": [5], "b": pa.array([b"\xff"], pa.binary())}))
    whole = {"b": b"\xff", "s": {"x": b"\x00\x01"}, "l": [b"\xff", b"\x00"]}
    only_b = {"b": b"\xff", "s": None, "l": None}
    assert stored(lake) == [
        {"id": 1, **whole},
        {"id": 2, **whole},
        {"id": 3, **only_b},
        {"id": 4, **whole},
        {"id": 5, **only_b},
    ]


@pytest.mark.parametrize("text", ["\\xff", "not base64!", "/w="])
def test_text_that_is_not_base64_is_refused_from_csv_and_arrow(
    blobs: Lake, tmp_path: Path, text: str
) -> None:
    lake = blobs
    csv = tmp_path / "bad.csv"
    csv.write_text(f"id,b\n1,/w==\n2,{text}\n")
    with pytest.raises(BatchRejectedError, match="row 1, field 'b': expected a base64 string"):
        lake.insert("bl", csv)
    with pytest.raises(BatchRejectedError, match=r"row 0, field 's\.x': expected a base64 string"):
        lake.insert("bl", pa.table({"id": [1], "s": [{"x": text}]}))
    assert lake.table("bl").head_snapshot_id == 0
