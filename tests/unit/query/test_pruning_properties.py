"""Pruning is safe: a row that satisfies the bounds always lies in a listed period and file."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from icefloe.metastore.models import ColumnStats, DataFile
from icefloe.query.pruning import ColumnRange, column_ranges, file_may_match, listing_window
from icefloe.query.sql_refs import Bound, analyze
from icefloe.spec import TableSpec

SPECS = {
    transform: TableSpec.create(
        name="t", schema="ts TIMESTAMP NOT NULL, n BIGINT", partition_by=f"{transform}(ts)"
    )
    for transform in ("hour", "day", "month", "year")
}
moments = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1))
ops = st.sampled_from([">", ">=", "<", "<=", "="])


def identity(value: object, _type: str) -> object:
    return value


def satisfies(value: object, op: str, bound: object) -> bool:
    return {
        ">": value > bound,  # type: ignore[operator]
        ">=": value >= bound,  # type: ignore[operator]
        "<": value < bound,  # type: ignore[operator]
        "<=": value <= bound,  # type: ignore[operator]
        "=": value == bound,
    }[op]


@settings(max_examples=400, derandomize=True)
@given(
    transform=st.sampled_from(sorted(SPECS)),
    value=moments,
    bounds=st.lists(st.tuples(ops, moments), min_size=1, max_size=3),
)
def test_a_matching_row_is_always_in_a_listed_period(
    transform: str, value: datetime, bounds: list[tuple[str, datetime]]
) -> None:
    spec = SPECS[transform]
    if not all(satisfies(value, op, b) for op, b in bounds):
        return
    ranges = column_ranges(spec, [Bound("ts", op, b) for op, b in bounds], identity)  # type: ignore[arg-type]
    start_from, start_before = listing_window(spec, ranges)
    period_start = spec.partition_by[0].apply(value)
    assert isinstance(period_start, datetime)
    assert start_from is None or start_from <= period_start
    assert start_before is None or period_start < start_before


@settings(max_examples=400, derandomize=True)
@given(
    values=st.lists(st.integers(-1000, 1000), min_size=1, max_size=20),
    bounds=st.lists(st.tuples(ops, st.integers(-1000, 1000)), min_size=1, max_size=3),
)
def test_a_file_holding_a_matching_value_is_never_pruned(
    values: list[int], bounds: list[tuple[str, int]]
) -> None:
    spec = SPECS["day"]
    ranges = column_ranges(spec, [Bound("n", op, b) for op, b in bounds], identity)  # type: ignore[arg-type]
    stats = ColumnStats(min=min(values), max=max(values), null_count=0)
    f = DataFile(1, "p", "", {}, None, 1, len(values), 1, {"n": stats}, 1, None)
    if any(all(satisfies(v, op, b) for op, b in bounds) for v in values):
        assert file_may_match(f, ranges, spec)


def test_day_window_of_a_half_open_range() -> None:
    spec = SPECS["day"]
    ranges = {"ts": ColumnRange(datetime(2026, 2, 1, 5), True, datetime(2026, 3, 1), False)}
    assert listing_window(spec, ranges) == (datetime(2026, 2, 1), datetime(2026, 3, 1))
    ranges = {"ts": ColumnRange(None, True, datetime(2026, 3, 1), True)}
    assert listing_window(spec, ranges) == (None, datetime(2026, 3, 1) + timedelta(days=1))


def test_only_single_table_conjunctions_give_bounds() -> None:
    assert analyze("SELECT * FROM t WHERE ts > '2026-01-01' OR n = 1").bounds == {}
    assert analyze("SELECT * FROM t JOIN u USING (k) WHERE ts > '2026-01-01'").bounds == {}
    assert analyze("SELECT * FROM t x WHERE x.n BETWEEN 1 AND 2").bounds == {
        "t": (Bound("n", ">=", 1), Bound("n", "<=", 2))
    }
    assert analyze("SELECT * FROM t WHERE 5 > n").bounds == {"t": (Bound("n", "<", 5),)}
