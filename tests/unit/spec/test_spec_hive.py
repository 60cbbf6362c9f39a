"""Hive partition paths: escaping, the null partition, and exact inverse parsing."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from icefloe.errors import InvalidInputError
from icefloe.spec import (
    NULL_PARTITION,
    escape_path_value,
    parse_partition_by,
    parse_partition_path,
    partition_path,
    partition_start,
    unescape_path_value,
)


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("", ""),
        ("acme", "acme"),
        ("a-b_c.d", "a-b_c.d"),
        ("a/b", "a%2Fb"),
        ("a=b", "a%3Db"),
        ("100%", "100%25"),
        ("12:30", "12%3A30"),
        ("a b", "a%20b"),
        ("?#'\"\\", "%3F%23%27%22%5C"),
        ("é", "%C3%A9"),
        ("😀", "%F0%9F%98%80"),
        (".", "%2E"),
        ("..", "%2E%2E"),
        ("...", "..."),
        (NULL_PARTITION, "%5F_HIVE_DEFAULT_PARTITION__"),
    ],
)
def test_escape_keeps_only_safe_characters_literal(text: str, escaped: str) -> None:
    assert escape_path_value(text) == escaped
    assert unescape_path_value(escaped) == text


@pytest.mark.parametrize("text", ["%", "%2", "%zz", "a%G0", "%FF", "%C3"])
def test_unescape_refuses_malformed_escapes(text: str) -> None:
    with pytest.raises(InvalidInputError):
        unescape_path_value(text)


def test_unescape_accepts_lower_case_hex() -> None:
    assert unescape_path_value("a%2fb") == "a/b"


FIELDS = parse_partition_by("day(ts), tenant, bucket[4](user_id)")


def test_partition_path_formats_hive_segments() -> None:
    values = (datetime(2026, 11, 22), "a/b", 3)
    assert partition_path(FIELDS, values) == "day=2026-11-22/tenant=a%2Fb/user_id_bucket=3"


def test_unpartitioned_table_has_an_empty_path() -> None:
    assert partition_path((), ()) == ""
    assert parse_partition_path((), "") == ()


def test_null_and_the_literal_null_marker_stay_distinct() -> None:
    # Given a null tenant and a tenant literally named like the null marker
    null_path = partition_path(FIELDS, (None, None, None))
    literal_path = partition_path(FIELDS, (None, NULL_PARTITION, None))
    # Then the paths differ and parse back to what went in
    assert null_path != literal_path
    assert parse_partition_path(FIELDS, null_path) == (None, None, None)
    assert parse_partition_path(FIELDS, literal_path) == (None, NULL_PARTITION, None)


def test_identity_values_are_typed_back_only_with_source_types() -> None:
    fields = parse_partition_by("n, d, flag, s")
    values = (-12, date(2026, 1, 2), False, "7")
    path = partition_path(fields, values)
    assert path == "n=-12/d=2026-01-02/flag=false/s=7"
    assert parse_partition_path(fields, path) == ("-12", "2026-01-02", "false", "7")
    types = {"n": "INTEGER", "d": "DATE", "flag": "BOOLEAN", "s": "VARCHAR"}
    assert parse_partition_path(fields, path, source_types=types) == values


@pytest.mark.parametrize(
    "path",
    [
        "day=2026-11-22/tenant=a",  # too few segments
        "day=2026-11-22/tenant=a/user_id_bucket=1/extra=2",  # too many
        "day=2026-11-22/tenant=a/user_id_bucket=1/",  # trailing slash
        "tenant=a/day=2026-11-22/user_id_bucket=1",  # wrong order
        "day=2026-11-22/tenant/user_id_bucket=1",  # no '='
        "day=2026-11-32/tenant=a/user_id_bucket=1",  # no such day
        "day=2026-11-22/tenant=a/user_id_bucket=x",  # not a bucket number
        "day=2026-11-22/tenant=a/user_id_bucket=4",  # bucket out of range
        "day=2026-11-22/tenant=a/user_id_bucket=-1",  # bucket out of range
        "day=2026-11-22/tenant=%ZZ/user_id_bucket=1",  # bad escape
    ],
)
def test_parse_partition_path_refuses_malformed_paths(path: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_partition_path(FIELDS, path)


def test_partition_path_refuses_a_value_count_mismatch() -> None:
    with pytest.raises(InvalidInputError):
        partition_path(FIELDS, (datetime(2026, 1, 1),))


def test_partition_start_is_the_first_time_fields_period_start() -> None:
    fields = parse_partition_by("tenant, hour(ts), day(other) AS d2")
    start = datetime(2026, 11, 22, 13)
    assert partition_start(fields, ("a", start, datetime(2020, 1, 1))) == start
    assert partition_start(fields, ("a", None, datetime(2020, 1, 1))) is None
    assert partition_start(parse_partition_by("tenant"), ("a",)) is None
    assert partition_start((), ()) is None
