"""Results whose columns share a name (``SELECT 1 AS a, 2 AS b, 3 AS a``, a self-join's
``a.v, b.v``) keep every column, by position, in every output."""

from __future__ import annotations

import io
import json

import duckdb
import pytest

from icefloe.query.output import (
    json_rows,
    json_values,
    python_rows,
    unique_names,
    write_result,
)

SQL = "SELECT 1 AS a, 2 AS b, 3 AS a UNION ALL SELECT 4, 5, 6"


def test_python_rows_are_lists_in_column_order() -> None:
    assert python_rows(duckdb.sql(SQL).to_arrow_table()) == [[1, 2, 3], [4, 5, 6]]


def test_json_values_keep_every_column() -> None:
    assert json_values(duckdb.sql(SQL).to_arrow_table()) == [[1, 2, 3], [4, 5, 6]]


def test_json_objects_key_a_repeated_name_as_duckdb_names_it_in_a_subquery() -> None:
    table = duckdb.sql("SELECT 1 AS a, 2 AS a, 3 AS a, 4 AS a_1, 5 AS A").to_arrow_table()
    assert json_rows(table) == [{"a": 1, "a_1": 2, "a_2": 3, "a_1_1": 4, "A": 5}]
    # DuckDB's own names for the same columns read through a subquery (it also folds case).
    names = [
        d[0]
        for d in duckdb.sql("SELECT * FROM (SELECT 1 AS a, 2 AS a, 3 AS a, 4 AS a_1)").description
    ]
    assert unique_names(["a", "a", "a", "a_1"]) == names == ["a", "a_1", "a_2", "a_1_1"]


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("table", "a  b  a\n1  2  3\n4  5  6\n(2 rows)\n"),
        ("csv", '"a","b","a"\n1,2,3\n4,5,6\n'),
    ],
)
def test_text_table_and_csv_keep_every_column(fmt: str, expected: str) -> None:
    out = io.StringIO()
    write_result(duckdb.sql(SQL).to_arrow_table(), fmt=fmt, out=out)
    assert out.getvalue() == expected


def test_json_output_keeps_every_column() -> None:
    out = io.StringIO()
    write_result(duckdb.sql(SQL).to_arrow_table(), fmt="json", out=out)
    assert json.loads(out.getvalue()) == [{"a": 1, "b": 2, "a_1": 3}, {"a": 4, "b": 5, "a_1": 6}]
