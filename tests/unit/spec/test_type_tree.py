"""Nested type grammar: STRUCT, MAP and lists of them, parsed to a tree and spelled canonically."""

from __future__ import annotations

import random

import duckdb
import pytest
from tests.support.type_trees import random_type

from icefloe.errors import SpecError
from icefloe.spec import TableSpec
from icefloe.spec._keywords import DUCKDB_KEYWORDS
from icefloe.spec.schema import parse_schema
from icefloe.spec.type_tree import MAX_LEAVES, MAX_TYPE_DEPTH, walk_leaves
from icefloe.spec.type_tree import parse_type as parse_tree
from icefloe.spec.types import is_nested, is_orderable, normalize_type, struct_field_type


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("struct(a int, b struct(c text))", "STRUCT(a INTEGER, b STRUCT(c VARCHAR))"),
        ("ROW(a INT)", "STRUCT(a INTEGER)"),
        ("map(text, int)", "MAP(VARCHAR, INTEGER)"),
        ("MAP(BIGINT, STRUCT(x DOUBLE)[])", "MAP(BIGINT, STRUCT(x DOUBLE)[])"),
        ("STRUCT(x VARCHAR, y INT)[]", "STRUCT(x VARCHAR, y INTEGER)[]"),
        ("STRUCT(userAgent text)[][]", "STRUCT(userAgent VARCHAR)[][]"),
        (
            "struct( t timestamp with time zone , d decimal(10, 2), j json, v varchar(9) )",
            "STRUCT(t TIMESTAMPTZ, d DECIMAL(10,2), j JSON, v VARCHAR)",
        ),
        ("int[]", "INTEGER[]"),
    ],
)
def test_nested_types_normalize_to_one_spelling(text: str, canonical: str) -> None:
    assert normalize_type(text) == canonical
    assert normalize_type(canonical) == canonical
    assert is_nested(canonical) and not is_orderable(canonical)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("STRUCT()", "a STRUCT needs at least one field"),
        ("STRUCT(a INT,)", "a trailing ','"),
        ("STRUCT(a INT, A INT)", "field 'A': the STRUCT already has a field 'a'"),
        ("STRUCT(a INT[3])", "field 'a': fixed-size arrays (T[n]) are not supported"),
        ("STRUCT(a STRUCT(b FOO))", "field 'a.b': type 'FOO' is not a supported DuckDB type"),
        ("MAP(JSON, INT)", "field 'key': map keys must be VARCHAR or an integer type"),
        ("MAP(INT)", "MAP takes (key type, value type)"),
        ("STRUCT(a INT NOT NULL)", "field 'a': fields inside a STRUCT cannot be NOT NULL"),
        ("STRUCT(_a INT)", "field '_a': column name '_a' must not start with '_'"),
        ("STRUCT(a UNION(x INT))", "field 'a': type 'UNION(x INT)' is not a supported"),
        ("STRUCT(a INT", "expected ',' or ')'"),
        ("STRUCT(a INT) x", "unexpected 'x'"),
        ("STRUCT(a " + "STRUCT(a " * MAX_TYPE_DEPTH + "INT" + ")" * (MAX_TYPE_DEPTH + 1), "deeper"),
        ("STRUCT(a INT)" + "[]" * MAX_TYPE_DEPTH, "deeper"),
        (
            "STRUCT(" + ", ".join(f"f{n} INT" for n in range(MAX_LEAVES + 1)) + ")",
            f"more than {MAX_LEAVES}",
        ),
    ],
)
def test_a_refused_nested_type_names_the_type_and_the_spot(text: str, message: str) -> None:
    with pytest.raises(SpecError, match="type ") as refused:
        normalize_type(text)
    assert message in str(refused.value)


def test_leaves_are_walked_with_their_paths_and_whether_they_repeat() -> None:
    tree = parse_tree(
        normalize_type(
            "STRUCT(ip VARCHAR, page STRUCT(url VARCHAR), tags STRUCT(k INT)[], m MAP(VARCHAR, DOUBLE))"
        ),
        leaf=normalize_type,
    )
    assert list(walk_leaves(tree)) == [
        (("ip",), "VARCHAR", False),
        (("page", "url"), "VARCHAR", False),
        (("tags", "element", "k"), "INTEGER", True),
        (("m", "key"), "VARCHAR", True),
        (("m", "value"), "DOUBLE", True),
    ]


def test_the_canonical_text_is_duckdbs_own_spelling_of_the_type() -> None:
    rng = random.Random(33)
    for _ in range(500):
        canonical = normalize_type(random_type(rng))
        assert normalize_type(canonical) == canonical
        # DuckDB parses it to the same type; it spells TIMESTAMPTZ out and JSON as an alias
        duck = str(duckdb.sqltype(canonical)).replace("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ")
        assert duck == canonical, canonical


def test_a_schema_with_nested_columns_makes_a_spec() -> None:
    columns = parse_schema(
        "ts TIMESTAMP NOT NULL, context STRUCT(ip VARCHAR, page STRUCT(url VARCHAR)),"
        " m MAP(VARCHAR, INTEGER)"
    )
    assert [c.type for c in columns] == [
        "TIMESTAMP",
        "STRUCT(ip VARCHAR, page STRUCT(url VARCHAR))",
        "MAP(VARCHAR, INTEGER)",
    ]
    assert TableSpec(name="ev", columns=columns).column_names == ("ts", "context", "m")


def test_struct_field_type_follows_struct_fields_only() -> None:
    context = "STRUCT(ip VARCHAR, page STRUCT(url VARCHAR, n INT), tags STRUCT(k VARCHAR)[])"
    assert struct_field_type(context, ("page", "url")) == "VARCHAR"
    assert struct_field_type(context, ("page", "n")) == "INTEGER"
    assert struct_field_type(context, ("page",)) == "STRUCT(url VARCHAR, n INTEGER)"
    assert struct_field_type(context, ()) == normalize_type(context)
    # not there, another case, or under a list: no one value per row
    assert struct_field_type(context, ("missing",)) is None
    assert struct_field_type(context, ("Page", "url")) is None
    assert struct_field_type(context, ("tags", "k")) is None
    assert struct_field_type("MAP(VARCHAR, INTEGER)", ("key",)) is None
    assert struct_field_type("INTEGER", ("x",)) is None


def test_a_keyword_field_name_is_spelled_quoted_as_duckdb_spells_it() -> None:
    text = 'struct("order" int, name text, Value struct("from" date), ok int)'
    canonical = normalize_type(text)
    assert (
        canonical
        == 'STRUCT("order" INTEGER, "name" VARCHAR, "Value" STRUCT("from" DATE), ok INTEGER)'
    )
    assert str(duckdb.sqltype(canonical)) == canonical
    assert normalize_type(canonical) == canonical
    with pytest.raises(SpecError, match="expected a field name"):
        normalize_type('STRUCT("a b" INT)')


def test_the_keyword_list_is_the_installed_duckdb_s_and_each_keyword_works_as_a_field() -> None:
    installed = {k for (k,) in duckdb.sql("SELECT keyword_name FROM duckdb_keywords()").fetchall()}
    assert installed == DUCKDB_KEYWORDS
    for keyword in sorted(installed):
        canonical = normalize_type(f'STRUCT("{keyword}" INTEGER, plain_field VARCHAR)')
        assert str(duckdb.sqltype(canonical)) == canonical, keyword
