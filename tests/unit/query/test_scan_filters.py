"""The scans DuckDB's bound plan reports for each reference to a table, and their filters."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from icefloe.query.scan_filters import (
    AnyOf,
    Compare,
    InList,
    ScanPlanner,
    TableScans,
    shared_scan_planner,
)
from icefloe.query.views import standin_source, view_sql
from icefloe.spec import TableSpec

SPEC = TableSpec.create(
    name="t", schema="ts TIMESTAMP NOT NULL, v INTEGER, s VARCHAR", partition_by="day(ts)"
)


def micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1)) // timedelta(microseconds=1)


@pytest.fixture(scope="module")
def planner() -> ScanPlanner:
    planner = ScanPlanner()
    planner.prepare(SPEC)
    return planner


def scans(planner: ScanPlanner, sql: str) -> TableScans:
    view = view_sql(SPEC, standin_source("t"), None, replace=True)
    return planner.scans(sql, {"t": view})["t"]


def test_a_cast_constant_arrives_with_the_casts_type(planner: ScanPlanner) -> None:
    found = scans(planner, "SELECT count(*) FROM t WHERE v = CAST(2.4 AS INTEGER)")
    assert found.scans == ({"v": Compare("=", 2)},)


def test_a_date_against_a_timestamp_column_is_midnight(planner: ScanPlanner) -> None:
    found = scans(planner, "SELECT * FROM t WHERE ts >= CAST('2026-11-02 01:30' AS DATE)")
    assert found.scans == ({"ts": Compare(">=", micros(datetime(2026, 11, 2)))},)


def test_each_reference_is_a_scan_of_its_own(planner: ScanPlanner) -> None:
    found = scans(planner, "SELECT (SELECT count(*) FROM t) FROM t WHERE ts >= '2026-11-03'")
    assert found.scans is not None and len(found.scans) == 2
    assert {} in found.scans and found.reads_everything
    joined = scans(planner, "SELECT 1 FROM t a, t b WHERE a.v = 1 AND b.v = 4")
    assert sorted(map(repr, joined.scans or ())) == [
        repr({"v": Compare("=", 1)}),
        repr({"v": Compare("=", 4)}),
    ]


def test_in_lists_and_ors_keep_every_branch(planner: ScanPlanner) -> None:
    found = scans(planner, "SELECT 1 FROM t WHERE s IN ('a', 'c', 'z', 'q')")
    assert found.scans == ({"s": InList(("a", "c", "z", "q"))},)
    ored = scans(planner, "SELECT 1 FROM t WHERE v = 3 OR v = 8")
    assert ored.scans == ({"v": AnyOf((Compare("=", 3), Compare("=", 8)))},)
    # DuckDB pushes no filter for "IN (...) OR IS NULL": the scan reads everything.
    either = scans(planner, "SELECT 1 FROM t WHERE s IN ('a', 'c') OR s IS NULL")
    assert either.reads_everything


def test_what_cannot_be_planned_reads_everything(planner: ScanPlanner) -> None:
    assert scans(planner, "SELECT nope FROM t").scans is None
    assert scans(planner, "SELECT 1 FROM t WHERE v * v > 4").reads_everything
    assert scans(planner, "SELECT 1").scans is None  # the table is named nowhere in the plan


def test_engines_share_one_planner_and_same_named_tables_keep_their_own_columns() -> None:
    # Given the process's planner, and two lakes' tables named alike with another type of v
    assert shared_scan_planner() is shared_scan_planner()
    planner = ScanPlanner()
    wide = TableSpec.create(name="u", schema="ts TIMESTAMP NOT NULL, v BIGINT, s VARCHAR")
    text = TableSpec.create(name="u", schema="ts TIMESTAMP NOT NULL, s VARCHAR, v VARCHAR")
    # When their queries are planned in turn, each stand-in set up by the same call
    for spec, literal, want in [(wide, "7", 7), (text, "'7'", "7"), (wide, "8", 8)]:
        view = view_sql(spec, standin_source("u"), None, replace=True)
        found = planner.scans(f"SELECT 1 FROM u WHERE v = {literal}", {"u": view}, specs=[spec])
        # Then each plan reads v with its own table's type
        assert found["u"].scans == ({"v": Compare("=", want)},)
