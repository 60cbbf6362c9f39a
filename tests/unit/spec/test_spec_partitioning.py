"""Partition transforms: parsing ``partition_by``, applying transforms, ranges and type rules."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from uuid import UUID

import pytest

from icefloe.errors import InvalidInputError, InvalidNameError, SpecError
from icefloe.spec import (
    PartitionField,
    ValueRange,
    bucket_of,
    format_partition_by,
    parse_partition_by,
)

TS = datetime(2026, 11, 22, 13, 45, 12, 345678)


def field(text: str) -> PartitionField:
    (only,) = parse_partition_by(text)
    return only


def test_parse_partition_by_reads_every_transform_with_default_names() -> None:
    fields = parse_partition_by(
        "year(ts), month(ts) AS m, day(ts) AS d, hour(ts) AS h, bucket[16](user_id), "
        "truncate[4](event), identity(tenant), region"
    )
    assert fields == (
        PartitionField("ts", "year", None, "year"),
        PartitionField("ts", "month", None, "m"),
        PartitionField("ts", "day", None, "d"),
        PartitionField("ts", "hour", None, "h"),
        PartitionField("user_id", "bucket", 16, "user_id_bucket"),
        PartitionField("event", "truncate", 4, "event_trunc"),
        PartitionField("tenant", "identity", None, "tenant"),
        PartitionField("region", "identity", None, "region"),
    )


def test_parse_partition_by_tolerates_case_and_spaces() -> None:
    assert parse_partition_by("  DAY ( ts )  as  d ,Bucket [ 4 ] (id) ") == (
        PartitionField("ts", "day", None, "d"),
        PartitionField("id", "bucket", 4, "id_bucket"),
    )


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_blank_partition_by_means_unpartitioned(text: str) -> None:
    assert parse_partition_by(text) == ()


def test_format_partition_by_round_trips() -> None:
    text = "day(ts), bucket[16](user_id) AS ub, truncate[2](event), tenant AS t, identity(region)"
    fields = parse_partition_by(text)
    assert parse_partition_by(format_partition_by(fields)) == fields
    assert format_partition_by(fields) == (
        "day(ts), bucket[16](user_id) AS ub, truncate[2](event), identity(tenant) AS t, "
        "identity(region)"
    )


def test_duplicate_field_names_are_refused_with_a_hint_to_rename() -> None:
    with pytest.raises(SpecError, match="AS"):
        parse_partition_by("day(ts), day(created_at)")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("week(ts)", "unknown transform 'week'"),
        ("bucket(ts)", "needs a parameter"),
        ("truncate(ts)", "needs a parameter"),
        ("bucket[0](id)", "bucket count"),
        ("bucket[65537](id)", "bucket count"),
        ("truncate[0](id)", "truncate width"),
        ("truncate[-3](id)", "truncate width"),
        ("day[3](ts)", "takes no parameter"),
        ("day(ts) AS", "cannot parse"),
        ("day(ts) extra", "cannot parse"),
        ("day(ts", "missing"),
        ("day(a, b)", "cannot parse"),
        ("day((ts))", "cannot parse"),
        ("a, , b", "cannot parse"),
    ],
)
def test_malformed_partition_items_raise_spec_error_naming_the_problem(
    text: str, message: str
) -> None:
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_partition_by(text)


@pytest.mark.parametrize(
    "text", ["day(../x)", "day(ts) AS _row_id", "identity(a-b)", "day(ts) AS é"]
)
def test_bad_names_in_partition_by_raise_invalid_name_error(text: str) -> None:
    with pytest.raises(InvalidNameError, match="partition_by"):
        parse_partition_by(text)


@pytest.mark.parametrize(
    ("transform", "expected"),
    [
        ("year", datetime(2026, 1, 1)),
        ("month", datetime(2026, 11, 1)),
        ("day", datetime(2026, 11, 22)),
        ("hour", datetime(2026, 11, 22, 13)),
    ],
)
def test_time_transforms_give_the_start_of_the_period(transform: str, expected: datetime) -> None:
    assert field(f"{transform}(ts)").apply(TS) == expected


def test_aware_timestamps_are_converted_to_utc_before_truncating() -> None:
    # Given 2026-11-22 23:30 at UTC-05:00, which is 2026-11-23 04:30 UTC
    ts = datetime(2026, 11, 22, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
    assert field("day(ts)").apply(ts) == datetime(2026, 11, 23)
    assert field("hour(ts)").apply(ts) == datetime(2026, 11, 23, 4)


def test_dates_work_with_day_month_year_but_not_hour() -> None:
    assert field("day(d)").apply(date(2026, 2, 3)) == datetime(2026, 2, 3)
    assert field("month(d)").apply(date(2026, 2, 3)) == datetime(2026, 2, 1)
    with pytest.raises(InvalidInputError, match="hour"):
        field("hour(d)").apply(date(2026, 2, 3))


@pytest.mark.parametrize("text", ["day(ts)", "bucket[4](id)", "truncate[3](id)", "identity(id)"])
def test_none_goes_to_the_null_partition(text: str) -> None:
    assert field(text).apply(None) is None
    assert field(text).value_range(None) is None


@pytest.mark.parametrize(("value", "expected"), [(7, 5), (5, 5), (0, 0), (-1, -5), (-5, -5)])
def test_truncate_of_integers_floors_to_a_multiple_of_the_width(value: int, expected: int) -> None:
    assert field("truncate[5](n)").apply(value) == expected


def test_truncate_of_strings_keeps_the_first_code_points() -> None:
    assert field("truncate[3](s)").apply("éventail") == "éve"
    assert field("truncate[3](s)").apply("ab") == "ab"


def test_bucket_uses_the_iceberg_hash() -> None:
    assert field("bucket[16](id)").apply(34) == bucket_of(34, buckets=16)
    assert 0 <= field("bucket[3](id)").apply("user-1") < 3  # type: ignore[operator]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("bucket[4](id)", True),
        ("bucket[4](id)", 1.5),
        ("truncate[4](id)", 1.5),
        ("truncate[4](id)", False),
        ("day(ts)", "2026-11-22"),
        ("day(ts)", 1700000000),
        ("identity(x)", 1.5),
        ("identity(x)", {"a": 1}),
    ],
)
def test_values_of_the_wrong_type_are_refused_naming_the_value(text: str, value: object) -> None:
    with pytest.raises(InvalidInputError, match="cannot use value"):
        field(text).apply(value)


@pytest.mark.parametrize(
    "value",
    ["acme", 42, True, Decimal("1.50"), date(2026, 1, 2), time(3, 4), UUID(int=5)],
)
def test_identity_keeps_the_value(value: object) -> None:
    assert field("identity(x)").apply(value) == value


def test_identity_of_an_aware_timestamp_is_naive_utc() -> None:
    ts = datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=2)))
    assert field("identity(x)").apply(ts) == datetime(2025, 12, 31, 23)


@pytest.mark.parametrize(
    ("transform", "start", "end"),
    [
        ("year", datetime(2026, 1, 1), datetime(2027, 1, 1)),
        ("month", datetime(2026, 12, 1), datetime(2027, 1, 1)),
        ("month", datetime(2026, 2, 1), datetime(2026, 3, 1)),
        ("day", datetime(2026, 12, 31), datetime(2027, 1, 1)),
        ("hour", datetime(2026, 12, 31, 23), datetime(2027, 1, 1)),
    ],
)
def test_time_value_range_is_the_half_open_period(
    transform: str, start: datetime, end: datetime
) -> None:
    assert field(f"{transform}(ts)").value_range(start) == ValueRange(start, end, False)


def test_last_period_before_year_10000_ends_inclusively_at_datetime_max() -> None:
    assert field("year(ts)").value_range(datetime(9999, 1, 1)) == ValueRange(
        datetime(9999, 1, 1), datetime.max, True
    )


def test_value_ranges_of_other_transforms() -> None:
    assert field("truncate[10](n)").value_range(-10) == ValueRange(-10, 0, False)
    assert field("truncate[3](s)").value_range("abc") is None
    assert field("bucket[3](s)").value_range(1) is None
    assert field("identity(s)").value_range("a") == ValueRange("a", "a", True)


def test_value_range_contains_compares_dates_and_aware_datetimes_in_utc() -> None:
    day = field("day(ts)").value_range(datetime(2026, 11, 22))
    assert day is not None
    assert day.contains(date(2026, 11, 22))
    assert day.contains(datetime(2026, 11, 22, 23, 59, 59, 999999))
    assert not day.contains(datetime(2026, 11, 23))
    assert day.contains(datetime(2026, 11, 23, 0, 30, tzinfo=timezone(timedelta(hours=1))))
    assert not day.contains("2026-11-22")
    assert not day.contains(None)


@pytest.mark.parametrize(
    ("text", "ok", "bad"),
    [
        ("day(c)", ["DATE", "TIMESTAMP", "TIMESTAMPTZ"], ["VARCHAR", "BIGINT", "TIME"]),
        ("month(c)", ["date", "datetime"], ["JSON"]),
        ("hour(c)", ["TIMESTAMP", "TIMESTAMPTZ"], ["DATE"]),
        (
            "bucket[8](c)",
            ["INTEGER", "UBIGINT", "VARCHAR", "DATE", "TIMESTAMP", "TIMESTAMPTZ", "UUID"],
            ["BOOLEAN", "DOUBLE", "BLOB", "DECIMAL(10,2)", "JSON", "VARCHAR[]", "HUGEINT"],
        ),
        ("truncate[8](c)", ["BIGINT", "TEXT"], ["DATE", "DOUBLE", "UUID"]),
        (
            "identity(c)",
            ["VARCHAR", "BOOLEAN", "DATE", "DECIMAL(5,1)", "UUID", "TIME"],
            ["JSON", "BLOB", "INTEGER[]", "FLOAT", "DOUBLE"],
        ),
    ],
)
def test_source_types_must_fit_the_transform(text: str, ok: list[str], bad: list[str]) -> None:
    for t in ok:
        field(text).validate_source_type(t)
    for t in bad:
        with pytest.raises(SpecError, match="'c'"):
            field(text).validate_source_type(t)


@pytest.mark.parametrize(
    ("transform", "value", "text"),
    [
        ("year", datetime(2026, 1, 1), "2026"),
        ("month", datetime(2026, 11, 1), "2026-11"),
        ("day", datetime(2026, 11, 22), "2026-11-22"),
        ("hour", datetime(2026, 11, 22, 13), "2026-11-22-13"),
        ("day", datetime(987, 1, 2), "0987-01-02"),
    ],
)
def test_time_values_format_and_parse_as_path_text(
    transform: str, value: datetime, text: str
) -> None:
    f = field(f"{transform}(ts)")
    assert f.to_path_value(value) == text
    assert f.from_path_value(text) == value


def test_a_time_value_that_is_not_a_period_start_cannot_become_a_path() -> None:
    with pytest.raises(InvalidInputError):
        field("day(ts)").to_path_value(datetime(2026, 11, 22, 13))


@pytest.mark.parametrize(
    "text", ["2026-1-22", "26-11-22", "2026-11-22-13", "2026-13-01", "२०२६-११-२२"]
)
def test_malformed_day_path_text_is_refused(text: str) -> None:
    with pytest.raises(InvalidInputError, match="day"):
        field("day(ts)").from_path_value(text)


def test_partition_field_construction_validates_its_parameter() -> None:
    with pytest.raises(SpecError):
        PartitionField("id", "bucket", None, "b")
    with pytest.raises(SpecError):
        PartitionField("id", "bucket", True, "b")  # a bool is not a bucket count
    with pytest.raises(SpecError):
        PartitionField("id", "week", None, "w")  # type: ignore[arg-type]
    assert PartitionField.create("id", transform="bucket", param=2).name == "id_bucket"
