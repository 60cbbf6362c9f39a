"""Pruning is safe: a row that passes a scan's filters always lies in a listed period (the files'
statistics are checked in the meta store: ``tests/integration/test_file_filter.py``)."""

from __future__ import annotations

from datetime import date, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from icefloe.query.pruning import ColumnRange, listing_window, stat_constant, time_range
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
from support.scan_filter_semantics import passes

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


def test_constants_in_the_meta_store_comparison_form() -> None:
    assert stat_constant(micros(datetime(2026, 11, 2, 1, 30)), "timestamp") == datetime(
        2026, 11, 2, 1, 30
    )
    assert stat_constant(10, "date") == date(1970, 1, 11)
    assert stat_constant(float_key(float("nan")), "float") != stat_constant(float_key(1.0), "float")
    assert stat_constant(86_400_000_000, "time") is None  # 24:00:00 has no Python time
    assert stat_constant(2**62, "timestamp") is None  # beyond Python's datetime


def test_day_window_of_a_half_open_range() -> None:
    spec = SPECS["day"]
    ranges = {"ts": ColumnRange(datetime(2026, 2, 1, 5), True, datetime(2026, 3, 1), False)}
    assert listing_window(spec, ranges) == (datetime(2026, 2, 1), datetime(2026, 3, 1))
    ranges = {"ts": ColumnRange(None, True, datetime(2026, 3, 1), True)}
    assert listing_window(spec, ranges) == (None, datetime(2026, 3, 1) + timedelta(days=1))
