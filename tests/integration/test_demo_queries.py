"""The questions ``make demo`` asks (``examples/queries/*.sql``) answer over icefloe as they
do in plain DuckDB over the same Parquet files."""

from __future__ import annotations

from pathlib import Path

import pytest

from icefloe import duck
from icefloe.cli.reads import query_text
from icefloe.lake import Lake
from icefloe.query.views import parquet_source, view_sql
from icefloe.sample_events import sample_events, sample_events_spec
from icefloe.spec import SizeTargets

pytestmark = pytest.mark.integration

QUERIES = sorted((Path(__file__).resolve().parents[2] / "examples" / "queries").glob("*.sql"))


@pytest.fixture
def demo_lake(connected_lake: Lake) -> Lake:
    """The demo's table and events (fewer of them), some days merged."""
    connected_lake.meta.create_table(
        sample_events_spec("events", sizes=SizeTargets(min_files_to_merge=2))
    )
    events = sample_events(6000, days=7)
    for offset in range(0, len(events), 1000):
        connected_lake.insert("events", events[offset : offset + 1000])
    connected_lake.merge("events")
    return connected_lake


def test_the_demo_asks_three_questions() -> None:
    assert [q.stem for q in QUERIES] == ["events_per_day", "funnel", "top_users"]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.stem)
def test_a_demo_query_answers_as_plain_duckdb_over_the_same_files(
    demo_lake: Lake, query: Path
) -> None:
    sql = query_text(sql=None, sql_file=str(query))
    got = demo_lake.query(sql)

    spec = demo_lake.meta.get_table("events").spec
    files = [demo_lake.objects.uri(f.path) for f in demo_lake.meta.files("events")]
    con = duck.connect()
    con.execute(view_sql(spec, parquet_source(files), None))
    want = con.execute(sql).to_arrow_table()
    con.close()

    assert got.column_names == want.column_names
    assert got.num_rows > 0
    rows = [tuple(r.values()) for r in got.to_pylist()]
    expected = [tuple(r.values()) for r in want.to_pylist()]
    # Each query orders its rows completely: compared in order
    assert rows == expected


def test_the_funnel_narrows_at_each_step(demo_lake: Lake) -> None:
    funnel = demo_lake.query(query_text(sql=None, sql_file=str(QUERIES[1]))).to_pylist()
    users = [row["users"] for row in funnel]
    assert [row["step"] for row in funnel] == [
        "1. loaded a page",
        "2. then signed up",
        "3. then purchased",
    ]
    assert users[0] > users[1] > users[2] > 0 and funnel[0]["pct"] == 100.0
