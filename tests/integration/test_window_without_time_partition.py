"""A time window (``start``/``end``, an engine ``time_range``) is on a table's time partition
column. A table with no year/month/day/hour partition (none at all, or an identity partition,
even on a DATE column) has no such column, so a window on it is refused naming the table, as
Spark's ``read_table`` refuses it, never ignored to answer with every row."""

from __future__ import annotations

from datetime import datetime

import pytest

from icefloe.errors import InvalidInputError
from icefloe.lake import Lake
from icefloe.query import TimeRange

pytestmark = pytest.mark.integration

START, END = datetime(2026, 1, 2), datetime(2026, 1, 3)
# Both bounds, and each open-ended window.
WINDOWS = [(START, END), (START, None), (None, END)]


def _tables(lake: Lake) -> None:
    """Three days of rows in a table without partitions, one partitioned by identity on its
    DATE column, and one partitioned by day (the control)."""
    lake.create_table("np", schema="ts TIMESTAMP NOT NULL, k VARCHAR")
    lake.create_table("dp", schema="d DATE NOT NULL, k VARCHAR", partition_by="d")
    lake.create_table("tp", schema="ts TIMESTAMP NOT NULL, k VARCHAR", partition_by="day(ts)")
    days = (1, 2, 3)
    lake.insert("np", [{"ts": f"2026-01-0{d}T00:00:00", "k": f"d{d}"} for d in days])
    lake.insert("dp", [{"d": f"2026-01-0{d}", "k": f"d{d}"} for d in days])
    lake.insert("tp", [{"ts": f"2026-01-0{d}T00:00:00", "k": f"d{d}"} for d in days])


def _refusal(table: str) -> str:
    return f"table '{table}' has no time partition: start/end do not apply"


@pytest.mark.parametrize(("start", "end"), WINDOWS)
@pytest.mark.parametrize("table", ["np", "dp"])
def test_a_window_on_a_table_without_a_time_partition_is_refused(
    connected_lake: Lake, table: str, start: datetime | None, end: datetime | None
) -> None:
    # Given tables with no time partition, holding 2026-01-01 to 2026-01-03
    _tables(connected_lake)
    engine = connected_lake.query_engine()
    window = TimeRange(start, end)

    # When a window is given through any read path, Then it is refused naming the table,
    # rather than every row coming back as if the window held them
    with pytest.raises(InvalidInputError, match=_refusal(table)):
        connected_lake.relation(table, start=start, end=end)
    with pytest.raises(InvalidInputError, match=_refusal(table)):
        connected_lake.file_urls(table, start=start, end=end)
    with pytest.raises(InvalidInputError, match=_refusal(table)):
        engine.query(f"SELECT k FROM {table}", time_range={table: window})
    with pytest.raises(InvalidInputError, match=_refusal(table)):
        engine.plan(table, time_range=window)
    # And a join with a time-partitioned table is refused for the window on the other one
    with pytest.raises(InvalidInputError, match=_refusal(table)):
        engine.query(
            f"SELECT a.k FROM tp a JOIN {table} b USING (k)",
            time_range={"tp": window, table: window},
        )


def test_without_a_window_such_tables_read_every_row_and_windows_still_apply_elsewhere(
    connected_lake: Lake,
) -> None:
    # Given the same tables
    _tables(connected_lake)
    engine = connected_lake.query_engine()
    every = ["d1", "d2", "d3"]

    # Then, with no window (or one with neither bound), a table without a time partition
    # reads every row
    for table in ("np", "dp"):
        rows = connected_lake.relation(table).project("k").fetchall()
        assert sorted(r[0] for r in rows) == every
        assert len(connected_lake.file_urls(table)) >= 1
        result = engine.query(f"SELECT k FROM {table}", time_range={table: TimeRange()})
        assert sorted(result.rows.column("k").to_pylist()) == every
        # And a window on another table does not touch it
        result = engine.query(
            f"SELECT b.k FROM tp a JOIN {table} b USING (k)",
            time_range={"tp": TimeRange(START, END)},
        )
        assert result.rows.column("k").to_pylist() == ["d2"]
    # And a table partitioned by day keeps only the window's rows
    rows = connected_lake.relation("tp", start=START, end=END).project("k").fetchall()
    assert [r[0] for r in rows] == ["d2"]
    assert len(connected_lake.file_urls("tp", start=START, end=END)) == 1


def test_a_window_on_a_table_the_query_does_not_read_is_refused(connected_lake: Lake) -> None:
    # Given a day-partitioned table and a window meant for another one
    _tables(connected_lake)
    engine = connected_lake.query_engine()
    window = TimeRange(START, END)

    # When the window names a table the SQL does not read (a typo, or the wrong query),
    # Then the query is refused naming it, rather than answering without the window
    with pytest.raises(InvalidInputError, match=r"time_range names table 'TP'.* reads 'tp'"):
        engine.query("SELECT k FROM tp", time_range={"TP": window})
    with pytest.raises(InvalidInputError, match="time_range names table 'np'"):
        engine.query("SELECT k FROM tp", time_range={"tp": window, "np": window})
