"""The query service's inline answer keeps every column of a result, by position, when
columns share a name (a self-join, ``SELECT 1 AS a, 2 AS b, 3 AS a``)."""

from __future__ import annotations

import pytest

from icefloe.lake import Lake
from icefloe.query.service import QueryRequest, answer_query


@pytest.mark.parametrize(
    ("sql", "columns", "rows"),
    [
        ("SELECT 1 AS a, 2 AS b, 3 AS a", ["a", "b", "a"], [[1, 2, 3]]),
        (
            "SELECT a.id, a.v, b.v FROM c a JOIN c b ON a.id = b.id ORDER BY a.id",
            ["id", "v", "v"],
            [[1, "x", "x"], [2, "y", "y"]],
        ),
    ],
)
def test_inline_json_rows_keep_columns_of_one_name(
    connected_lake: Lake, sql: str, columns: list[str], rows: list[list[object]]
) -> None:
    connected_lake.create_table("c", schema="id INTEGER, v VARCHAR")
    connected_lake.insert("c", [{"id": 1, "v": "x"}, {"id": 2, "v": "y"}])
    answer = answer_query(
        connected_lake.query_engine(), QueryRequest(sql=sql), results=connected_lake.objects
    )
    assert (answer.columns, answer.rows, answer.row_count) == (columns, rows, len(rows))


def test_inline_csv_keeps_columns_of_one_name(connected_lake: Lake) -> None:
    answer = answer_query(
        connected_lake.query_engine(),
        QueryRequest(sql="SELECT 1 AS a, 2 AS a", format="csv"),
        results=connected_lake.objects,
    )
    assert (answer.columns, answer.text) == (["a", "a"], '"a","a"\n1,2\n')
