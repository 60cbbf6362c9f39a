"""An explicit time window (``start <= t < end``: ``lake.relation``, ``lake.file_urls``, the
engine's ``time_range``) keeps exactly the rows whose time is in it, as instants: an aware
bound at its offset, a naive one in UTC; a TIMESTAMP column holds UTC, a DATE is compared at
its midnight, as DuckDB compares a DATE with a TIMESTAMP. The files listed and the rows kept
agree, whatever the bound's offset."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import duckdb
import pytest

from icefloe.lake import Lake
from icefloe.query import TimeRange

pytestmark = pytest.mark.integration

MINUS7 = timezone(timedelta(hours=-7))
PLUS5 = timezone(timedelta(hours=5))
PLUS1430 = timezone(timedelta(hours=14, minutes=30))

# Rows around the turn of the year, each day its own partition.
TIMES = [
    "2025-12-30T22:00:00",
    "2025-12-31T00:00:00",
    "2025-12-31T18:00:00",
    "2025-12-31T23:30:00",
    "2026-01-01T00:00:00",
    "2026-01-01T03:00:00",
    "2026-01-01T12:00:00",
    "2026-01-02T00:00:00.000001",
    "2026-01-02T23:59:59.999999",
]
DATES = ["2025-12-30", "2025-12-31", "2026-01-01", "2026-01-02", "2026-01-03"]

BOUNDS: list[datetime | date] = [
    datetime(2025, 12, 31),
    datetime(2026, 1, 1),
    datetime(2026, 1, 1, 12, 0),
    datetime(2026, 1, 1, 0, 0, 0, 1),
    datetime(2025, 12, 31, 17, 0, tzinfo=MINUS7),  # 2026-01-01 00:00 UTC
    datetime(2026, 1, 1, 0, 0, tzinfo=PLUS5),  # 2025-12-31 19:00 UTC
    datetime(2026, 1, 1, 5, 0, tzinfo=PLUS5),  # 2026-01-01 00:00 UTC
    datetime(2026, 1, 2, 14, 30, tzinfo=PLUS1430),  # 2026-01-02 00:00 UTC
    datetime(2026, 1, 2, 0, 0, tzinfo=UTC),
    datetime(2025, 12, 31, 23, 30),
    date(2026, 1, 1),
]


def _reference(
    column_type: str, values: list[str], bound_start: object, bound_end: object
) -> list[int]:
    """The ids plain DuckDB keeps, in a UTC session, comparing the column and the bounds as
    instants (a naive bound is UTC, a DATE its midnight)."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"CREATE TABLE r (id INTEGER, t {column_type})")
    con.executemany(
        "INSERT INTO r VALUES (?, CAST(? AS " + column_type + "))", list(enumerate(values))
    )

    def instant(bound: object) -> datetime:
        if not isinstance(bound, datetime):
            assert isinstance(bound, date)
            bound = datetime(bound.year, bound.month, bound.day)
        return bound if bound.tzinfo is not None else bound.replace(tzinfo=UTC)

    where = ["true"]
    params = []
    if bound_start is not None:
        where.append("CAST(t AS TIMESTAMPTZ) >= ?")
        params.append(instant(bound_start))
    if bound_end is not None:
        where.append("CAST(t AS TIMESTAMPTZ) < ?")
        params.append(instant(bound_end))
    sql = f"SELECT id FROM r WHERE {' AND '.join(where)} ORDER BY id"
    return [row[0] for row in con.execute(sql, params).fetchall()]


def _ids(lake: Lake, table: str, start: object, end: object) -> list[int]:
    relation = lake.relation(table, start=start, end=end)  # type: ignore[arg-type]
    return sorted(row[0] for row in relation.project("id").fetchall())


@pytest.mark.parametrize("column_type", ["TIMESTAMP", "TIMESTAMPTZ", "DATE"])
def test_a_window_keeps_the_rows_plain_duckdb_keeps_for_every_bound(
    connected_lake: Lake, column_type: str
) -> None:
    # Given a table partitioned by day, one file a day
    values = DATES if column_type == "DATE" else TIMES
    connected_lake.create_table("w", schema=f"id INTEGER, t {column_type}", partition_by="day(t)")
    suffix = "Z" if column_type == "TIMESTAMPTZ" else ""
    connected_lake.insert("w", [{"id": i, "t": v + suffix} for i, v in enumerate(values)])

    # When it is read through windows of naive, aware and date bounds, start, end or both
    for bound in BOUNDS:
        for start, end in ((bound, None), (None, bound)):
            # Then the rows are those plain DuckDB keeps comparing instants
            expected = _reference(column_type, values, start, end)
            assert _ids(connected_lake, "w", start, end) == expected, (column_type, start, end)
    for start in BOUNDS[::3]:
        for end in BOUNDS[1::3]:
            expected = _reference(column_type, values, start, end)
            assert _ids(connected_lake, "w", start, end) == expected, (column_type, start, end)


def test_offset_bounds_on_a_timestamp_column_keep_the_rows_of_their_utc_instant(
    connected_lake: Lake,
) -> None:
    # Given rows on both sides of 2026-01-01 00:00 UTC in a TIMESTAMP (UTC) column
    connected_lake.create_table("ev", schema="id INTEGER, ts TIMESTAMP", partition_by="day(ts)")
    connected_lake.insert(
        "ev",
        [
            {"id": 1, "ts": "2025-12-31T18:00:00"},
            {"id": 2, "ts": "2025-12-31T23:30:00"},
            {"id": 3, "ts": "2026-01-01T03:00:00"},
        ],
    )
    # When the window ends at 17:00-07:00 (= 00:00 UTC), the rows before midnight UTC are kept
    end = datetime(2025, 12, 31, 17, 0, tzinfo=MINUS7)
    assert _ids(connected_lake, "ev", None, end) == [1, 2]
    # And from 00:00+05:00 (= 19:00 UTC the day before), the rows from then on
    start = datetime(2026, 1, 1, 0, 0, tzinfo=PLUS5)
    assert _ids(connected_lake, "ev", start, None) == [2, 3]
    # And the engine's time_range reads the same window the same way, listing only the files
    # of the days it touches
    result = connected_lake.query_engine().query(
        "SELECT list(id ORDER BY id) AS ids FROM ev", time_range={"ev": TimeRange(start, end)}
    )
    assert result.rows.to_pylist() == [{"ids": [2]}]
    assert result.plan("ev").files_considered == 1


def test_a_date_column_is_compared_at_its_midnight(connected_lake: Lake) -> None:
    # Given a DATE column
    connected_lake.create_table("dd", schema="id INTEGER, d DATE", partition_by="day(d)")
    connected_lake.insert("dd", [{"id": 1, "d": "2025-12-31"}, {"id": 2, "d": "2026-01-01"}])
    # When the window ends at noon of 2026-01-01, that day (from its midnight) is in it
    assert _ids(connected_lake, "dd", None, datetime(2026, 1, 1, 12, 0)) == [1, 2]
    # And when it starts at noon of 2025-12-31, that day (its midnight earlier) is not
    assert _ids(connected_lake, "dd", datetime(2025, 12, 31, 12, 0), None) == [2]
    # And an aware end of 2026-01-01 04:00+05:00 (23:00 UTC the day before) leaves 2026-01-01 out
    end = datetime(2026, 1, 1, 4, 0, tzinfo=PLUS5)
    assert _ids(connected_lake, "dd", None, end) == [1]
    assert len(connected_lake.file_urls("dd", end=end)) == 1


def test_bounds_whose_utc_instant_is_past_python_s_range_keep_all_or_nothing(
    connected_lake: Lake,
) -> None:
    # Given a table with a row, and one whose time is NULL
    connected_lake.create_table("ev", schema="id INTEGER, ts TIMESTAMP", partition_by="day(ts)")
    connected_lake.insert("ev", [{"id": 1, "ts": "2026-01-01T03:00:00"}, {"id": 2, "ts": None}])
    late = datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5)))  # year 10000 UTC
    early = datetime(1, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=5)))  # year 0 UTC
    # Then a window starting after year 9999 or ending before year 1 keeps nothing, and one
    # ending after year 9999 or starting before year 1 keeps every row with a time (a NULL
    # time is in no window, as with any other bound)
    assert _ids(connected_lake, "ev", late, None) == []
    assert _ids(connected_lake, "ev", None, early) == []
    assert _ids(connected_lake, "ev", early, late) == [1]
    assert _ids(connected_lake, "ev", early, None) == [1]
    assert _ids(connected_lake, "ev", None, late) == [1]
    assert _ids(connected_lake, "ev", datetime(2026, 1, 1), None) == [1]
