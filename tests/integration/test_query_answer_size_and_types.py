"""What the query service answers is what the Lambda can send and what a reader can read: an
inline answer is measured as the Lambda sends it (JSON, escaped), not by the length of the CSV
text; a HUGEINT past 38 digits is never exported as an invalid decimal128(38, 0); a MAP keyed
by BLOB keys its object by the key's hex, as a BLOB value is written."""

from __future__ import annotations

import csv
import io
import json
import urllib.request

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.errors import InvalidInputError
from icefloe.lake import Lake
from icefloe.query.output import text_table
from icefloe.query.service import MAX_INLINE_BYTES, QueryRequest, answer_query

pytestmark = pytest.mark.integration


def read_url(url: str) -> bytes:
    with urllib.request.urlopen(url) as response:
        data: bytes = response.read()
    return data


# --- the inline answer's size ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "repeat"),
    [
        # 4,003,004 characters of CSV (each quote doubled), 8 MB once each quote is escaped.
        ('"', 2000),
        # 1.1 million characters of CSV, 4.4 MB as UTF-8, 13 MB escaped (12 bytes an emoji).
        ("\N{GRINNING FACE}", 1100),
    ],
)
def test_a_csv_answer_too_big_to_send_is_a_link_though_its_text_is_short(
    connected_lake: Lake, value: str, repeat: int
) -> None:
    sql = f"SELECT repeat('{value}', {repeat}) AS s FROM range(1000)"
    answer = answer_query(
        connected_lake.query_engine(),
        QueryRequest(sql=sql, format="csv"),
        results=connected_lake.objects,
    )

    assert answer.text is None and answer.url is not None
    assert len(json.dumps(answer.to_json())) <= MAX_INLINE_BYTES
    rows = list(csv.reader(io.StringIO(read_url(answer.url).decode("utf-8"))))
    assert rows == [["s"]] + [[value * repeat]] * 1000


def test_a_csv_answer_that_fits_stays_inline_and_within_the_cap(connected_lake: Lake) -> None:
    sql = "SELECT repeat('\N{GRINNING FACE}', 300) AS s FROM range(1000)"
    answer = answer_query(
        connected_lake.query_engine(),
        QueryRequest(sql=sql, format="csv"),
        results=connected_lake.objects,
    )

    assert answer.url is None and answer.text is not None
    assert answer.text.splitlines()[1:] == ['"' + "\N{GRINNING FACE}" * 300 + '"'] * 1000
    assert len(json.dumps(answer.to_json())) <= MAX_INLINE_BYTES


# --- HUGEINT past 38 digits -----------------------------------------------------------------

MAX_HUGEINT = 2**127 - 1
PAST = (
    "SELECT x, 5::HUGEINT AS fits FROM (VALUES"
    f" ({MAX_HUGEINT}::HUGEINT), ((-{MAX_HUGEINT} - 1)::HUGEINT), ({10**38}::HUGEINT), (NULL))"
    " AS v(x)"
)
PAST_TEXT = [str(MAX_HUGEINT), str(-(2**127)), str(10**38), None]


def test_a_hugeint_column_past_38_digits_is_its_text(connected_lake: Lake) -> None:
    table = connected_lake.query(PAST)

    table.validate(full=True)
    assert table.schema.types == [pa.string(), pa.decimal128(38, 0)]
    assert table.column("x").to_pylist() == PAST_TEXT
    assert table.column("fits").to_pylist() == [5] * 4


def test_a_hugeint_past_38_digits_inside_a_list_or_struct_is_its_text(
    connected_lake: Lake,
) -> None:
    table = connected_lake.query(
        f"SELECT [{MAX_HUGEINT}::HUGEINT, 1] AS l, {{'a': {10**38}::HUGEINT}} AS s,"
        " [1::HUGEINT] AS fits"
    )

    table.validate(full=True)
    assert table.schema.types == [
        pa.list_(pa.string()),
        pa.struct([("a", pa.string())]),
        pa.list_(pa.decimal128(38, 0)),
    ]
    assert table.to_pylist() == [
        {"l": [str(MAX_HUGEINT), "1"], "s": {"a": str(10**38)}, "fits": [1]}
    ]


def test_a_hugeint_that_fits_38_digits_stays_a_number(connected_lake: Lake) -> None:
    table = connected_lake.query(
        f"SELECT sum(range) AS total, {10**38 - 1}::HUGEINT AS widest FROM range(10)"
    )

    assert table.schema.types == [pa.decimal128(38, 0), pa.decimal128(38, 0)]
    assert table.column("total").to_pylist() == [45]
    assert table.column("widest").to_pylist() == [10**38 - 1]


def test_a_parquet_answer_of_a_hugeint_past_38_digits_reads_back(connected_lake: Lake) -> None:
    answer = answer_query(
        connected_lake.query_engine(),
        QueryRequest(sql=PAST, format="parquet"),
        results=connected_lake.objects,
    )
    assert answer.url is not None
    data = read_url(answer.url)

    table = pq.read_table(pa.BufferReader(data))
    table.validate(full=True)
    assert table.column("x").to_pylist() == PAST_TEXT
    with duckdb.connect() as con:
        con.register("answer", table)
        assert con.execute("SELECT x::HUGEINT FROM answer").fetchall() == [
            (MAX_HUGEINT,),
            (-(2**127),),
            (10**38,),
            (None,),
        ]


# --- a MAP keyed by BLOB --------------------------------------------------------------------

BLOB_MAP = "SELECT MAP {'\\xAA\\x01'::BLOB: '\\xAA\\x01'::BLOB} AS m"


def test_a_map_keyed_by_blob_keys_its_object_by_the_hex(connected_lake: Lake) -> None:
    engine = connected_lake.query_engine()
    inline = answer_query(engine, QueryRequest(sql=BLOB_MAP), results=connected_lake.objects)
    as_csv = answer_query(
        engine, QueryRequest(sql=BLOB_MAP, format="csv"), results=connected_lake.objects
    )

    assert inline.rows == [[{"aa01": "aa01"}]]
    assert as_csv.text == '"m"\n"{""aa01"": ""aa01""}"\n'
    assert text_table(connected_lake.query(BLOB_MAP)).splitlines()[1] == '{"aa01": "aa01"}'


@pytest.mark.parametrize("nesting", ["{}", "[{}]", "{{'a': [{}]}}", "MAP {{1: {}}}"])
def test_the_hugeint_minimum_alone_is_its_text_at_any_depth(
    connected_lake: Lake, nesting: str
) -> None:
    # -2^127 alone: pyarrow's validation of decimal128(38, 0) lets it through
    value = nesting.format(f"(-{MAX_HUGEINT} - 1)::HUGEINT")
    table = connected_lake.query(f"SELECT {value} AS x")

    table.validate(full=True)
    assert str(-(2**127)) in str(table.to_pylist())
    assert "decimal" not in str(table.schema.field("x").type)


def test_a_result_nested_deeper_than_arrow_holds_is_refused_saying_so(
    connected_lake: Lake,
) -> None:
    # DuckDB builds a 63-level list; pyarrow's schema import stops short of it
    def nested(depth: int) -> str:
        return "SELECT " + "[" * depth + "1" + "]" * depth + " AS v"

    assert connected_lake.query(nested(62)).num_rows == 1
    with pytest.raises(InvalidInputError, match="result's type nests deeper than Arrow holds"):
        connected_lake.query(nested(63))
    # and the query process that answered is still there for the next query
    assert connected_lake.query("SELECT 1 AS one").to_pylist() == [{"one": 1}]
