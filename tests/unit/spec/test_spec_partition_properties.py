"""Property tests of the partition math: ranges contain their values, paths round-trip."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone, tzinfo

from hypothesis import given, settings
from hypothesis import strategies as st

from icefloe.spec import (
    NULL_PARTITION,
    PartitionField,
    PartitionValue,
    escape_path_value,
    parse_partition_by,
    parse_partition_path,
    partition_path,
    partition_start,
    unescape_path_value,
)

PROPERTY = settings(derandomize=True, max_examples=300, deadline=None)

TIME_FIELDS = [PartitionField.create("ts", transform=t) for t in ("year", "month", "day", "hour")]
AWARE_ZONES: st.SearchStrategy[tzinfo] = st.one_of(
    st.just(UTC),
    st.builds(
        lambda minutes: timezone(timedelta(minutes=minutes)),
        st.integers(min_value=-23 * 60, max_value=23 * 60),
    ),
)
FIRST, LAST = datetime(1900, 1, 1), datetime(2200, 12, 31, 23, 59, 59, 999999)
DATETIMES = st.datetimes(FIRST, LAST) | st.datetimes(FIRST, LAST, timezones=AWARE_ZONES)


@PROPERTY
@given(field=st.sampled_from(TIME_FIELDS), ts=DATETIMES)
def test_time_partition_range_contains_the_value_and_its_path_round_trips(
    field: PartitionField, ts: datetime
) -> None:
    # Given any timestamp (naive or aware) and a time transform
    value = field.apply(ts)
    # Then its period contains it
    value_range = field.value_range(value)
    assert value_range is not None and value_range.contains(ts)
    # And the partition value survives a trip through a path
    assert field.from_path_value(field.to_path_value(value)) == value
    assert parse_partition_path([field], partition_path([field], [value])) == (value,)


@PROPERTY
@given(field=st.sampled_from(TIME_FIELDS), ts=DATETIMES)
def test_time_partition_values_sort_like_their_timestamps(
    field: PartitionField, ts: datetime
) -> None:
    later = ts + timedelta(minutes=61)
    earlier_value, later_value = field.apply(ts), field.apply(later)
    assert isinstance(earlier_value, datetime) and isinstance(later_value, datetime)
    assert earlier_value <= later_value
    assert field.to_path_value(earlier_value) <= field.to_path_value(later_value)


@PROPERTY
@given(width=st.integers(min_value=1, max_value=10**6), value=st.integers(-(2**70), 2**70))
def test_truncate_int_lands_at_or_below_the_value_within_one_width(width: int, value: int) -> None:
    field = PartitionField.create("n", transform="truncate", param=width)
    truncated = field.apply(value)
    assert isinstance(truncated, int)
    assert truncated <= value < truncated + width
    assert truncated % width == 0
    value_range = field.value_range(truncated)
    assert value_range is not None and value_range.contains(value)


@PROPERTY
@given(buckets=st.integers(min_value=1, max_value=2**16), value=st.integers() | st.text())
def test_bucket_is_in_range(buckets: int, value: int | str) -> None:
    result = PartitionField.create("x", transform="bucket", param=buckets).apply(value)
    assert isinstance(result, int) and 0 <= result < buckets


@PROPERTY
@given(text=st.text())
def test_escape_round_trips_any_text_and_yields_a_safe_segment(text: str) -> None:
    escaped = escape_path_value(text)
    assert unescape_path_value(escaped) == text
    assert "/" not in escaped and "\\" not in escaped and "=" not in escaped
    assert escaped not in (".", "..")
    assert escaped.isascii()
    assert escaped != NULL_PARTITION


@PROPERTY
@given(text=st.text(alphabet=st.sampled_from("._-/%=a_HIVEDFAULTPRN"), max_size=30))
def test_escape_round_trips_text_made_of_special_characters(text: str) -> None:
    assert unescape_path_value(escape_path_value(text)) == text


MIXED_FIELDS = parse_partition_by(
    "hour(ts), tenant, bucket[16](user_id), truncate[4](event), truncate[10](amount), "
    "flag, day(d) AS dd, identity(n) AS ident_n"
)
SOURCE_TYPES = {
    "ts": "TIMESTAMPTZ",
    "tenant": "VARCHAR",
    "user_id": "VARCHAR",
    "event": "VARCHAR",
    "amount": "BIGINT",
    "flag": "BOOLEAN",
    "d": "DATE",
    "n": "HUGEINT",
}
RAW_VALUES = st.tuples(
    st.none() | DATETIMES,
    st.none() | st.text() | st.just(NULL_PARTITION),
    st.none() | st.text(),
    st.none() | st.text(),
    st.none() | st.integers(),
    st.none() | st.booleans(),
    st.none() | st.dates(),
    st.none() | st.integers(),
)


@PROPERTY
@given(raw=RAW_VALUES)
def test_partition_path_round_trips_mixed_fields_including_nulls(raw: tuple[object, ...]) -> None:
    # Given a row's source values, when partitioned and written as a path
    values: tuple[PartitionValue, ...] = tuple(
        f.apply(v) for f, v in zip(MIXED_FIELDS, raw, strict=True)
    )
    path = partition_path(MIXED_FIELDS, values)
    # Then parsing the path gives back exactly the values, with their types
    parsed = parse_partition_path(MIXED_FIELDS, path, source_types=SOURCE_TYPES)
    assert parsed == values
    assert [type(v) for v in parsed] == [type(v) for v in values]
    # And no segment can escape its directory
    segments = path.split("/")
    assert len(segments) == len(MIXED_FIELDS)
    assert all(s not in ("", ".", "..") and "=" in s for s in segments)
    # And the indexed period start is the hour field's value
    assert partition_start(MIXED_FIELDS, values) == values[0]
