"""Nested values in query results: a MAP is an object keyed by its keys' text in JSON, CSV and
the text table (as DuckDB writes a MAP as JSON); structs and lists nest as they are."""

from __future__ import annotations

import io
import json

import duckdb
import pytest

from icefloe.query.output import json_rows, python_rows, write_result

SQL = (
    "SELECT MAP {'a': 1, 'b': NULL} AS m, MAP {1: 'x'} AS by_int,"
    " {'x': [1, 2], 'y': MAP {}} AS s, NULL::MAP(VARCHAR, INTEGER) AS none"
)


def test_a_map_is_a_dict_in_python_and_an_object_in_json_as_duckdb_writes_it() -> None:
    table = duckdb.sql(SQL).to_arrow_table()
    assert python_rows(table) == [[{"a": 1, "b": None}, {1: "x"}, {"x": [1, 2], "y": {}}, None]]
    (duck,) = duckdb.sql(f"SELECT to_json(COLUMNS(*)) FROM ({SQL})").fetchall()
    assert json_rows(table) == [
        {
            name: None if text is None else json.loads(text)
            for name, text in zip(table.column_names, duck, strict=True)
        }
    ]


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("csv", '"{""a"": 1, ""b"": null}","{""1"": ""x""}","{""x"": [1, 2], ""y"": {}}",'),
        ("text", '{"a": 1, "b": null}  {"1": "x"}  {"x": [1, 2], "y": {}}  NULL'),
    ],
)
def test_csv_and_the_text_table_write_a_map_as_a_json_object(fmt: str, expected: str) -> None:
    out = io.StringIO()
    write_result(duckdb.sql(SQL).to_arrow_table(), fmt=fmt, out=out)
    assert out.getvalue().splitlines()[1].rstrip() == expected
