"""Snapshot ids and times given to the Python API are checked before the meta store sees them:
a text id was answered as if it were a number, a float or bool reached Postgres or Python's
comparison, and a date or a text as a time gave Postgres' own error or no snapshot."""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any

import pytest

from icefloe.errors import InvalidInputError
from icefloe.lake import Lake


@pytest.fixture
def two_snapshots(connected_lake: Lake) -> Lake:
    connected_lake.create_table("t", schema="n INTEGER")
    connected_lake.insert("t", [{"n": 1}])
    connected_lake.insert("t", [{"n": 2}])
    return connected_lake


@pytest.mark.parametrize(
    ("value", "shown"), [("1", "'1' (str)"), (1.0, "1.0 (float)"), (True, "True (bool)")]
)
def test_a_snapshot_id_that_is_not_an_integer_is_refused_naming_the_argument(
    two_snapshots: Lake, value: Any, shown: str
) -> None:
    lake = two_snapshots
    head = lake.table("t").head_snapshot_id
    calls = {
        "snapshot_id": [
            lambda: lake.query("SELECT * FROM t", snapshot_id=value),
            lambda: lake.file_urls("t", snapshot_id=value),
            lambda: lake.duckdb(snapshots={"t": value}),
        ],
        "to_snapshot": [lambda: lake.rollback("t", to_snapshot=value)],
        "since_snapshot": [lambda: lake.changes("t", since_snapshot=value)],
    }
    for name, attempts in calls.items():
        for attempt in attempts:
            with pytest.raises(
                InvalidInputError, match=f"^{name} must be an integer, not {re.escape(shown)}"
            ):
                attempt()
    # And nothing was rolled back
    assert lake.table("t").head_snapshot_id == head
    assert sorted(lake.query("SELECT n FROM t").column("n").to_pylist()) == [1, 2]


@pytest.mark.parametrize(
    ("value", "shown"),
    [("2026-01-01", "'2026-01-01' (str)"), (5, "5 (int)"), (date(2026, 1, 1), "(date)")],
)
def test_an_as_of_that_is_not_a_datetime_is_refused_naming_the_argument(
    two_snapshots: Lake, value: Any, shown: str
) -> None:
    lake = two_snapshots
    for attempt in (
        lambda: lake.query("SELECT * FROM t", as_of=value),
        lambda: lake.file_urls("t", as_of=value),
        lambda: lake.duckdb(as_of=value),
    ):
        with pytest.raises(
            InvalidInputError, match=r"^as_of must be a datetime, not .*" + re.escape(shown)
        ):
            attempt()


def test_integers_and_datetimes_still_pin(two_snapshots: Lake) -> None:
    lake = two_snapshots
    assert lake.query("SELECT count(*) AS c FROM t", snapshot_id=1).to_pylist() == [{"c": 1}]
    first = lake.snapshots("t")[0].committed_at
    assert lake.query("SELECT count(*) AS c FROM t", as_of=first).to_pylist() == [{"c": 1}]
    assert lake.query("SELECT count(*) AS c FROM t", as_of=datetime.now()).to_pylist() == [{"c": 2}]
    assert lake.rollback("t", to_snapshot=1).snapshot_id == 3
    assert lake.query("SELECT n FROM t").column("n").to_pylist() == [1]
