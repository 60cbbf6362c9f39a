"""Pruning is safe: a row that passes a scan's filters always lies in a listed period and in a
file that is read."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from icefloe.metastore.models import ColumnStats, DataFile
from icefloe.query.pruning import (
    ColumnRange,
    file_may_match,
    listing_window,
    needed_files,
    stat_value,
    time_range,
)
from icefloe.query.scan_filters import (
    AllOf,
    AnyOf,
    Compare,
    InList,
    IsNotNull,
    IsNull,
    ScanFilter,
    TableScans,
    float_key,
)
from icefloe.spec import TableSpec

SPECS = {
    transform: TableSpec.create(
        name="t",
        schema="ts TIMESTAMP NOT NULL, n BIGINT, d DOUBLE",
        partition_by=f"{transform}(ts)",
    )
    for transform in ("hour", "day", "month", "year")
}
EPOCH = datetime(1970, 1, 1)
moments = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1))
ops = st.sampled_from([">", ">=", "<", "<=", "=", "!="])


def micros(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)


def passes(value: object, condition: ScanFilter) -> bool:
    """SQL semantics of a scan filter on one value (None is NULL)."""
    if isinstance(condition, IsNull):
        return value is None
    if isinstance(condition, IsNotNull):
        return value is not None
    if isinstance(condition, AllOf):
        return all(passes(value, c) for c in condition.children)
    if isinstance(condition, AnyOf):
        return any(passes(value, c) for c in condition.children)
    if value is None:
        return False
    if isinstance(condition, InList):
        return value in condition.values
    assert isinstance(condition, Compare)
    v, b = value, condition.value
    return {
        ">": v > b,  # type: ignore[operator]
        ">=": v >= b,  # type: ignore[operator]
        "<": v < b,  # type: ignore[operator]
        "<=": v <= b,  # type: ignore[operator]
        "=": v == b,
        "!=": v != b,
    }[condition.op]


def filters(values: st.SearchStrategy[object]) -> st.SearchStrategy[ScanFilter]:
    leaf = st.one_of(
        st.builds(Compare, ops, values),
        st.builds(InList, st.lists(values, min_size=1, max_size=4).map(tuple)),
        st.just(IsNull()),
        st.just(IsNotNull()),
    )
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.builds(AllOf, st.lists(inner, min_size=1, max_size=3).map(tuple)),
            st.builds(AnyOf, st.lists(inner, min_size=1, max_size=3).map(tuple)),
        ),
        max_leaves=6,
    )


def data_file(stats: dict[str, ColumnStats], rows: int) -> DataFile:
    return DataFile(1, "p", "", {}, None, 1, rows, 1, stats, 1, None)


@settings(max_examples=400, derandomize=True)
@given(
    transform=st.sampled_from(sorted(SPECS)),
    value=moments,
    condition=filters(moments.map(micros)),
)
def test_a_matching_row_is_always_in_a_listed_period(
    transform: str, value: datetime, condition: ScanFilter
) -> None:
    spec = SPECS[transform]
    if not passes(micros(value), condition):
        return
    scans = TableScans("t", ({"ts": condition},))
    start_from, start_before = listing_window(spec, {"ts": time_range(scans, spec)})
    period_start = spec.partition_by[0].apply(value)
    assert isinstance(period_start, datetime)
    assert start_from is None or start_from <= period_start
    assert start_before is None or period_start < start_before


@settings(max_examples=600, derandomize=True)
@given(
    values=st.lists(st.one_of(st.none(), st.integers(-50, 50)), min_size=1, max_size=12),
    scans=st.lists(filters(st.integers(-60, 60)), min_size=1, max_size=3),
)
def test_a_file_holding_a_matching_value_is_never_pruned(
    values: list[int | None], scans: list[ScanFilter]
) -> None:
    spec = SPECS["day"]
    present = [v for v in values if v is not None]
    stats = ColumnStats(
        min=min(present) if present else None,
        max=max(present) if present else None,
        null_count=len(values) - len(present),
    )
    f = data_file({"n": stats}, len(values))
    table_scans = TableScans("t", tuple({"n": s} for s in scans))
    if any(passes(v, s) for v in values for s in scans):
        assert needed_files([f], table_scans, spec) == [f]


def test_a_nan_above_the_recorded_maximum_keeps_the_file() -> None:
    # Parquet statistics leave NaN out; DuckDB orders NaN above every number.
    spec = SPECS["day"]
    f = data_file({"d": ColumnStats(min=1.0, max=2.0, null_count=0)}, 3)
    assert file_may_match(f, {"d": Compare(">", float_key(5.0))}, spec)
    assert file_may_match(f, {"d": Compare("=", float_key(float("nan")))}, spec)
    assert not file_may_match(f, {"d": Compare("<", float_key(0.5))}, spec)


def test_an_all_null_column_fails_every_comparison() -> None:
    spec = SPECS["day"]
    f = data_file({"n": ColumnStats(min=None, max=None, null_count=4)}, 4)
    assert not file_may_match(f, {"n": Compare("!=", 3)}, spec)
    assert file_may_match(f, {"n": IsNull()}, spec)


def test_a_scan_without_filters_reads_every_file() -> None:
    spec = SPECS["day"]
    f = data_file({"n": ColumnStats(min=1, max=2, null_count=0)}, 2)
    narrow = {"n": Compare(">", 10)}
    assert needed_files([f], TableScans("t", (narrow,)), spec) == []
    assert needed_files([f], TableScans("t", (narrow, {})), spec) == [f]
    assert needed_files([f], TableScans("t", None), spec) == [f]


def test_statistics_in_the_comparison_domain() -> None:
    assert stat_value("2026-11-02T01:30:00", "TIMESTAMP") == micros(datetime(2026, 11, 2, 1, 30))
    assert stat_value("2026-11-02T06:30:00+05:00", "TIMESTAMPTZ") == micros(
        datetime(2026, 11, 2, 1, 30)
    )
    assert stat_value("1970-01-11", "DATE") == 10
    assert stat_value("inf", "DOUBLE") is None
    assert stat_value("12.50", "DECIMAL(10,2)") is not None
    assert stat_value(True, "BIGINT") is None


def test_day_window_of_a_half_open_range() -> None:
    spec = SPECS["day"]
    ranges = {"ts": ColumnRange(datetime(2026, 2, 1, 5), True, datetime(2026, 3, 1), False)}
    assert listing_window(spec, ranges) == (datetime(2026, 2, 1), datetime(2026, 3, 1))
    ranges = {"ts": ColumnRange(None, True, datetime(2026, 3, 1), True)}
    assert listing_window(spec, ranges) == (None, datetime(2026, 3, 1) + timedelta(days=1))
