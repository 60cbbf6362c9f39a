"""Each of issue 33's spellings of a struct leaf prunes files: over a table of files whose leaf
ranges are disjoint, a predicate on one file's range, written with dots, brackets,
struct_extract, struct_extract_at or a mixture, reads only that file, and the answer is the
one plain DuckDB gives over every event."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import icefloe
from icefloe.lake import Lake
from icefloe.spec import TableSpec

pytestmark = pytest.mark.integration

SCHEMA = (
    "ts TIMESTAMP NOT NULL,"
    " context STRUCT(ip VARCHAR, page STRUCT(url VARCHAR, d DATE, n INTEGER)),"
    " attrs MAP(VARCHAR, INTEGER), items STRUCT(k VARCHAR, v BIGINT)[]"
)
FILES = 4
START = datetime(2026, 3, 1)
DAY0 = date(2026, 1, 1)


def _events(file: int) -> list[dict[str, Any]]:
    """One insert's events: leaves in ranges no other insert's overlap (urls ``/f<file>/...``,
    dates in the file's own month, n in ``[100 * file, 100 * file + 9]``), and rows with a
    NULL context, a NULL page, NULL leaves."""
    out: list[dict[str, Any]] = []
    for n in range(12):
        page: dict[str, Any] | None = {
            "url": f"/f{file}/{n % 3}",
            "d": (DAY0 + timedelta(days=31 * file + n)).isoformat(),
            "n": 100 * file + n % 10,
        }
        if n == 5:
            page = None
        if n == 7:
            page = {"url": None, "d": None, "n": None}
        context = None if n == 9 else {"ip": f"10.0.{file}.{n}", "page": page}
        out.append(
            {
                "ts": (START + timedelta(hours=n)).isoformat(),
                "context": context,
                "attrs": {"a": file} if n % 2 else None,
                "items": [{"k": f"k{file}", "v": n}] if n % 3 else [],
            }
        )
    return out


# (SQL predicate, the insert whose rows it picks): the three forms, and the others DuckDB
# accepts, on a DATE leaf, a VARCHAR leaf and an INTEGER leaf.
FORMS = [
    ("context.page.d = DATE '2026-02-03'", 1),
    ("context['page']['d'] = DATE '2026-02-03'", 1),
    ("struct_extract(struct_extract(context, 'page'), 'd') = DATE '2026-02-03'", 1),
    ("context.page.url = '/f2/1'", 2),
    ("context['page']['url'] = '/f2/1'", 2),
    ("struct_extract(struct_extract(context, 'page'), 'url') = '/f2/1'", 2),
    ("context['page'].url = '/f3/0'", 3),
    ("struct_extract(context.page, 'url') = '/f3/0'", 3),
    ("struct_extract_at(struct_extract_at(context, 2), 1) = '/f0/2'", 0),
    ("(context).page.n = 203", 2),
    ("context.page.n BETWEEN 301 AND 305", 3),
    ("context['page']['n'] IN (102, 104)", 1),
    ("context.page.url = '/f1/0' OR context['page']['url'] = '/f1/2'", 1),
    ("context.page.d > DATE '2026-03-31'", 3),
    ("context.page.n >= 300 AND ts < TIMESTAMP '2026-03-02'", 3),
]


@pytest.fixture
def lake(tmp_path: Path, postgres_dsn: str, schema_name: str) -> Iterator[Lake]:
    with icefloe.connect(
        home=tmp_path / "home", database_url=postgres_dsn, database_schema=schema_name
    ) as opened:
        opened.create_table("ev", schema=SCHEMA)
        for file in range(FILES):
            opened.insert("ev", _events(file))
        yield opened


def _reference(sql: str) -> list[str]:
    """Plain DuckDB's answer over every event, as sorted row reprs."""
    spec = TableSpec.create(name="ev", schema=SCHEMA)
    nulls = ", ".join(f"CAST(NULL AS {c.type}) AS {c.name}" for c in spec.columns)
    schema = duckdb.sql(f"SELECT {nulls}").to_arrow_table().schema
    rows = [
        {**e, "ts": datetime.fromisoformat(e["ts"])} | _dated(e)
        for file in range(FILES)
        for e in _events(file)
    ]
    con = duckdb.connect()
    # (A DuckDB table, not the Arrow table itself: DuckDB's Arrow scan fails on a pushed-down
    # struct_extract_at, a reference-side limitation.)
    con.register("events", pa.Table.from_pylist(rows, schema=schema))
    con.execute("CREATE TABLE ev AS SELECT * FROM events")
    return _rows(con.execute(sql).to_arrow_table())


def _dated(event: dict[str, Any]) -> dict[str, Any]:
    context = event["context"]
    if context is None or context["page"] is None or context["page"]["d"] is None:
        return {}
    page = {**context["page"], "d": date.fromisoformat(context["page"]["d"])}
    return {"context": {**context, "page": page}}


def _rows(table: pa.Table) -> list[str]:
    return sorted(repr(row) for row in table.to_pylist(maps_as_pydicts="strict"))


@pytest.mark.parametrize(("predicate", "file"), FORMS)
def test_each_spelling_of_a_struct_leaf_prunes_to_its_file(
    lake: Lake, predicate: str, file: int
) -> None:
    # Given four files whose struct leaves hold disjoint ranges
    assert len(lake.meta.files("ev")) == FILES

    # When a query selects rows by one leaf
    sql = f"SELECT ts, context, attrs, items FROM ev WHERE {predicate}"
    result = lake.query_result(sql)

    # Then only the file holding them is read, and the answer is plain DuckDB's
    (stats,) = result.stats
    assert (stats.files_considered, stats.files_scanned) == (FILES, 1)
    got = _rows(result.rows)
    assert got == _reference(sql)
    assert got and all(f"10.0.{file}." in row for row in got)


@pytest.mark.parametrize(
    "predicate",
    [
        "attrs['a'] = 2",
        "items[1].k = 'k2'",
        "list_contains(list_transform(items, lambda e: e.k), 'k2')",
        "context IS NULL",
        "context.page IS NULL",
        "context.page IS NOT NULL",
        "context.page = {'url': '/f2/1', 'd': DATE '2026-03-05', 'n': 201}",
        "CAST(context.page.n AS VARCHAR) = '203'",
    ],
)
def test_map_list_and_whole_struct_predicates_read_every_file(lake: Lake, predicate: str) -> None:
    # When a query selects by a map value, a list element or a whole struct (no leaf range)
    sql = f"SELECT ts, context, attrs, items FROM ev WHERE {predicate}"
    result = lake.query_result(sql)

    # Then every file is read, and the answer is plain DuckDB's
    (stats,) = result.stats
    assert (stats.files_considered, stats.files_scanned) == (FILES, FILES)
    got = _rows(result.rows)
    assert got == _reference(sql)
    assert got
