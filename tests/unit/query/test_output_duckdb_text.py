"""Values DuckDB returns that Python or CSV cannot hold as they are (a date past year 9999,
infinity, TIME '24:00:00', INTERVAL, VARINT, a MAP keyed by lists, unnamed struct fields)
are written as DuckDB's text of them, in every output, never a traceback."""

from __future__ import annotations

import io
import json

import duckdb
import pytest

from icefloe.query.output import json_values, write_result


@pytest.mark.parametrize(
    ("sql", "values"),
    [
        (
            "SELECT DATE '9999-12-31' + 1 AS d, DATE '2020-01-02' AS ok",
            [["10000-01-01", "2020-01-02"]],
        ),
        (
            "SELECT 'infinity'::TIMESTAMP AS x UNION ALL SELECT TIMESTAMP '2020-01-01 10:00:00'",
            [["infinity"], ["2020-01-01T10:00:00"]],
        ),
        ("SELECT '-infinity'::TIMESTAMPTZ AS x", [["-infinity"]]),
        ("SELECT 'infinity'::DATE AS x", [["infinity"]]),
        ("SELECT MAP {[1]: 2} AS x", [["{[1]=2}"]]),
        ("SELECT INTERVAL 1 MONTH AS x, [INTERVAL 2 DAY] AS l", [["1 month", "[2 days]"]]),
        (
            "SELECT 123456789012345678901234567890::VARINT AS x",
            [["123456789012345678901234567890"]],
        ),
        ("SELECT row(1, 'a') AS x", [["(1, a)"]]),
        (
            "SELECT TIME '24:00:00' AS t UNION ALL SELECT TIME '00:00:00' UNION ALL SELECT NULL",
            [["24:00:00"], ["00:00:00"], [None]],
        ),
        (
            "SELECT {'d': 'infinity'::DATE, 'n': 1} AS s"
            " UNION ALL SELECT {'d': DATE '2020-01-01', 'n': 2}",
            [[{"d": "infinity", "n": 1}], [{"d": "2020-01-01", "n": 2}]],
        ),
        (  # TIME '24:00:00' at any depth (Python's time would make it 00:00:00)
            "SELECT * FROM (VALUES"
            " (1, {'x': TIME '24:00:00'}, [TIME '01:00:00', TIME '24:00:00'],"
            "  MAP {'k': TIME '24:00:00'}, [[TIME '24:00:00']]),"
            " (2, {'x': TIME '00:00:00'}, [TIME '00:00:00'], MAP {'k': TIME '02:00:00'},"
            "  [[TIME '00:00:00']])) v(n, s, l, m, ll) ORDER BY n",
            [
                [1, {"x": "24:00:00"}, ["01:00:00", "24:00:00"], {"k": "24:00:00"}, [["24:00:00"]]],
                [2, {"x": "00:00:00"}, ["00:00:00"], {"k": "02:00:00"}, [["00:00:00"]]],
            ],
        ),
    ],
)
def test_json_values_are_duckdbs_text_where_python_cannot_hold_them(
    sql: str, values: list[list[object]]
) -> None:
    table = duckdb.sql(sql).to_arrow_table()
    assert json_values(table) == values
    out = io.StringIO()
    write_result(table, fmt="json", out=out)
    assert [list(row.values()) for row in json.loads(out.getvalue())] == values


@pytest.mark.parametrize(
    ("sql", "table", "csv"),
    [
        (
            "SELECT DATE '9999-12-31' + 1 AS d, 'infinity'::TIMESTAMP AS ts",
            "d            ts\n10000-01-01  infinity\n(1 rows)\n",
            '"d","ts"\n"10000-01-01","infinity"\n',
        ),
        ("SELECT MAP {[1]: 2} AS x", "x\n{[1]=2}\n(1 rows)\n", '"x"\n"{[1]=2}"\n'),
        ("SELECT INTERVAL 1 MONTH AS x", "x\n1 month\n(1 rows)\n", '"x"\n"1 month"\n'),
        (
            "SELECT 12345678901234567890123::VARINT AS x",
            "x\n12345678901234567890123\n(1 rows)\n",
            '"x"\n"12345678901234567890123"\n',
        ),
        ("SELECT row(1, 'a') AS x", "x\n(1, a)\n(1 rows)\n", '"x"\n"(1, a)"\n'),
        ("SELECT TIME '24:00:00' AS t", "t\n24:00:00\n(1 rows)\n", '"t"\n"24:00:00"\n'),
    ],
)
def test_text_table_and_csv_write_duckdbs_text(sql: str, table: str, csv: str) -> None:
    result = duckdb.sql(sql).to_arrow_table()
    for fmt, expected in (("table", table), ("csv", csv)):
        out = io.StringIO()
        write_result(result, fmt=fmt, out=out)
        assert out.getvalue() == expected


def test_ordinary_columns_keep_their_python_form() -> None:
    table = duckdb.sql(
        "SELECT TIMESTAMP '2020-01-01 10:00:00' AS ts, DATE '2020-01-02' AS d, 1.5::DECIMAL(4, 2)"
        " AS n, TIME '23:59:59' AS t"
    ).to_arrow_table()
    assert json_values(table) == [["2020-01-01T10:00:00", "2020-01-02", "1.50", "23:59:59"]]
