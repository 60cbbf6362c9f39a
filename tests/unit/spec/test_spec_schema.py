"""Schema text: columns, types with commas inside parentheses, nullability, duplicates."""

from __future__ import annotations

import pytest

from icefloe.errors import InvalidNameError, SpecError
from icefloe.spec import Column, format_schema, parse_schema


def test_parse_schema_reads_the_events_example() -> None:
    columns = parse_schema(
        "ts TIMESTAMP NOT NULL, event VARCHAR, user_id VARCHAR, properties JSON, "
        "price DECIMAL(10, 2)"
    )
    assert columns == (
        Column("ts", "TIMESTAMP", nullable=False),
        Column("event", "VARCHAR"),
        Column("user_id", "VARCHAR"),
        Column("properties", "JSON"),
        Column("price", "DECIMAL(10,2)"),
    )


def test_parse_schema_normalizes_aliases_and_multi_word_types() -> None:
    columns = parse_schema(
        "a double precision null, b timestamp with time zone not null, c text[], d numeric"
    )
    assert [(c.type, c.nullable) for c in columns] == [
        ("DOUBLE", True),
        ("TIMESTAMPTZ", False),
        ("VARCHAR[]", True),
        ("DECIMAL(18,3)", True),
    ]


def test_format_schema_round_trips() -> None:
    columns = parse_schema("messageId VARCHAR NOT NULL, price numeric(10,2), tags text[]")
    assert format_schema(columns) == (
        "messageId VARCHAR NOT NULL, price DECIMAL(10,2), tags VARCHAR[]"
    )
    assert parse_schema(format_schema(columns)) == columns


def test_column_normalizes_its_type_on_creation() -> None:
    assert Column("n", "int8").type == "BIGINT"


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_schema_is_refused(text: str) -> None:
    with pytest.raises(SpecError, match="at least one column"):
        parse_schema(text)


@pytest.mark.parametrize("text", ["a INT, a VARCHAR", "messageId VARCHAR, MessageID VARCHAR"])
def test_duplicate_column_names_are_refused_ignoring_case(text: str) -> None:
    with pytest.raises(SpecError, match="duplicate column"):
        parse_schema(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ts", "cannot parse column 'ts'"),
        ("a INT,", "cannot parse column ''"),
        ("a DECIMAL(10, 2", "missing"),
        ("a INT)", "unbalanced"),
        ("a WIDGET", "column 'a'.*WIDGET"),
        ("a INT NOT", "column 'a'"),
    ],
)
def test_malformed_schemas_raise_spec_error_naming_the_item(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_schema(text)


@pytest.mark.parametrize(
    "text", ["_row_id BIGINT", "_x INT", "a-b INT", '"a" INT', "évent VARCHAR"]
)
def test_bad_column_names_raise_invalid_name_error(text: str) -> None:
    with pytest.raises(InvalidNameError, match="schema"):
        parse_schema(text)
