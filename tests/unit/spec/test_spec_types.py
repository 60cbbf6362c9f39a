"""Type normalization: DuckDB type names and their aliases map to one canonical spelling."""

from __future__ import annotations

import pytest

from icefloe.errors import SpecError
from icefloe.spec import (
    is_integer,
    is_list,
    is_numeric,
    is_orderable,
    is_string,
    is_temporal,
    is_timestamp,
    normalize_type,
)

CANONICAL = [
    "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
    "UINTEGER", "UBIGINT", "FLOAT", "DOUBLE", "VARCHAR", "BLOB", "DATE", "TIME", "TIMESTAMP",
    "TIMESTAMPTZ", "UUID", "JSON",
]  # fmt: skip

ALIASES = [
    ("bool", "BOOLEAN"),
    ("Logical", "BOOLEAN"),
    ("int1", "TINYINT"),
    ("INT2", "SMALLINT"),
    ("short", "SMALLINT"),
    ("int", "INTEGER"),
    ("int4", "INTEGER"),
    ("signed", "INTEGER"),
    ("int8", "BIGINT"),
    ("long", "BIGINT"),
    ("real", "FLOAT"),
    ("float4", "FLOAT"),
    ("float8", "DOUBLE"),
    ("double   precision", "DOUBLE"),
    ("text", "VARCHAR"),
    ("string", "VARCHAR"),
    ("char", "VARCHAR"),
    ("bpchar", "VARCHAR"),
    ("varchar(255)", "VARCHAR"),
    ("VARCHAR ( 10 )", "VARCHAR"),
    ("bytea", "BLOB"),
    ("binary", "BLOB"),
    ("varbinary", "BLOB"),
    ("datetime", "TIMESTAMP"),
    ("timestamp without time zone", "TIMESTAMP"),
    ("Timestamp With Time Zone", "TIMESTAMPTZ"),
    ("  timestamptz  ", "TIMESTAMPTZ"),
    ("decimal", "DECIMAL(18,3)"),
    ("decimal(10, 2)", "DECIMAL(10,2)"),
    ("numeric(38,0)", "DECIMAL(38,0)"),
    ("NUMERIC(5)", "DECIMAL(5,0)"),
    ("numeric", "DECIMAL(18,3)"),
    ("int[]", "INTEGER[]"),
    ("text []", "VARCHAR[]"),
    ("decimal(4,1)[]", "DECIMAL(4,1)[]"),
    ("bigint[][]", "BIGINT[][]"),
]

INVALID = [
    "",
    "   ",
    "varchar2",
    "decimal(0,0)",
    "decimal(39,2)",
    "decimal(5,6)",
    "decimal(a,b)",
    "decimal(1,2,3)",
    "int(11)",
    "varchar(0)",
    "varchar(x)",
    "map(json, int)",  # map keys: VARCHAR or integers (MAP(VARCHAR, INT) parses)
    "struct()",  # an empty struct (STRUCT(a INT) parses: tests/unit/spec/test_type_tree.py)
    "int[3]",
    "[]",
    "\u0131nt",  # dotless i upper-cases to "INT": refused, not normalized
    "int; drop table x",
]


@pytest.mark.parametrize("name", CANONICAL)
def test_canonical_types_normalize_to_themselves(name: str) -> None:
    assert normalize_type(name) == name
    assert normalize_type(name.lower()) == name


@pytest.mark.parametrize(("alias", "canonical"), ALIASES)
def test_aliases_normalize_to_the_canonical_name(alias: str, canonical: str) -> None:
    assert normalize_type(alias) == canonical


@pytest.mark.parametrize(("alias", "canonical"), ALIASES)
def test_normalization_is_idempotent(alias: str, canonical: str) -> None:
    assert normalize_type(normalize_type(alias)) == canonical


@pytest.mark.parametrize("text", INVALID)
def test_unsupported_types_raise_spec_error_naming_the_text(text: str) -> None:
    with pytest.raises(SpecError, match="type"):
        normalize_type(text)


def test_type_predicates_classify_types() -> None:
    assert is_temporal("date") and is_temporal("timestamp") and is_temporal("timestamptz")
    assert not is_temporal("time") and not is_temporal("varchar")
    assert is_timestamp("datetime") and not is_timestamp("date")
    assert is_integer("ubigint") and is_integer("hugeint") and not is_integer("double")
    assert is_string("text") and not is_string("json") and not is_string("varchar[]")
    assert is_list("int[]") and not is_list("int")
    assert is_numeric("decimal(10,2)") and is_numeric("real") and not is_numeric("varchar")
    assert is_orderable("uuid") and not is_orderable("json") and not is_orderable("int[]")
