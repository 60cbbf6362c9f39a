"""Generated columns in the spec: DuckDB's syntax read and written back, kept in the stored
spec, and refused where a generated column cannot stand."""

from __future__ import annotations

import re

import pytest

from icefloe.errors import SpecError
from icefloe.spec import TableSpec, format_schema, parse_schema
from icefloe.spec.evolution import AddColumn, evolve
from icefloe.spec.reading import scan_groups, versions_lacking_generated
from icefloe.spec.schema import Column

BASE = "ts TIMESTAMP NOT NULL, properties JSON, "


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("n BIGINT AS (CAST(properties->>'n' AS BIGINT))", "CAST(properties->>'n' AS BIGINT)"),
        ("n BIGINT GENERATED ALWAYS AS (len(properties)) VIRTUAL", "len(properties)"),
        ("n bigint generated always as ( 1 + 2 ) stored", "1 + 2"),
        (
            "u VARCHAR AS (coalesce(properties->>'$.a,b', ')'))",
            "coalesce(properties->>'$.a,b', ')')",
        ),
        ("d DATE AS(CAST(ts AS DATE))", "CAST(ts AS DATE)"),
    ],
)
def test_a_generated_column_is_read_in_duckdbs_syntax_and_written_back(
    text: str, expression: str
) -> None:
    columns = parse_schema(BASE + text)
    generated = columns[-1]
    assert generated.expression == expression
    assert generated.generated and generated.nullable
    assert not any(c.generated for c in columns[:-1])
    assert parse_schema(format_schema(columns)) == columns


def test_the_stored_spec_keeps_the_expression_and_a_plain_column_stores_none() -> None:
    spec = TableSpec.create(
        name="ev", schema=BASE + "n BIGINT AS (CAST(properties->>'n' AS BIGINT))", sort_by="n"
    )
    stored = spec.to_dict()
    assert [c.get("expression") for c in stored["columns"]] == [  # type: ignore[union-attr]
        None,
        None,
        "CAST(properties->>'n' AS BIGINT)",
    ]
    assert "expression" not in stored["columns"][0]  # type: ignore[index]
    assert TableSpec.from_dict(stored) == spec


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (BASE + "n BIGINT NOT NULL AS (1)", "cannot be NOT NULL"),
        (BASE + "n BIGINT AS (1) NOT NULL", "is not a supported DuckDB type"),
        (BASE + "n BIGINT AS ()", "its expression is empty"),
        (BASE + "n BIGINT AS ((1)", "missing ')'"),
        (BASE + "n STRUCT(a INTEGER) AS (NULL)", "holds fields"),
        (BASE + "n INTEGER[] AS (NULL)", "holds fields"),
    ],
)
def test_a_generated_column_that_cannot_be_one_is_refused_by_name(
    schema: str, message: str
) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        TableSpec.create(name="ev", schema=schema)


def test_a_generated_column_is_never_required() -> None:
    with pytest.raises(SpecError, match="cannot be NOT NULL"):
        Column("n", "BIGINT", nullable=False, expression="1")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"extra_fields": "keep", "overflow_column": "g"}, "overflow_column: 'g' is a generated"),
        ({"partition_by": "g", "tenant_column": "g"}, "tenant_column: 'g' is a generated"),
        ({"merge": "aggregate(ts; properties:any, g:any)"}, "merges aggregate rows"),
        ({"merge": "sql:SELECT * FROM rows"}, "merges aggregate rows"),
    ],
)
def test_a_generated_column_is_refused_where_its_value_would_not_be_its_expressions(
    options: dict[str, str], message: str
) -> None:
    kind = "JSON" if "overflow_column" in options else "VARCHAR"
    with pytest.raises(SpecError, match=message):
        TableSpec.create(name="ev", schema=BASE + f"g {kind} AS (properties->>'g')", **options)  # type: ignore[arg-type]


def test_generated_columns_may_partition_sort_and_key_replaces() -> None:
    spec = TableSpec.create(
        name="ev",
        schema=BASE + "d DATE AS (CAST(ts AS DATE)), k VARCHAR AS (properties->>'k')",
        partition_by="d",
        sort_by="k",
        row_group_by="k",
        merge="replace(k)",
    )
    assert [c.name for c in spec.columns if c.generated] == ["d", "k"]


def test_a_generated_column_added_later_is_new_to_every_older_layout() -> None:
    spec = TableSpec.create(name="ev", schema=BASE.rstrip(", "))
    added = evolve(spec, [AddColumn(Column("n", "BIGINT", expression="len(properties)"))])
    assert added.column("n").expression == "len(properties)"
    new_id = added.column_id("n")
    assert new_id not in {c.id for c in added.layout_at(spec.version).columns}
    assert new_id not in spec.column_ids
    # readers compute it for the files of before, and merges are to rewrite those
    old, new = scan_groups(added, [("old.parquet", spec.version), ("new.parquet", added.version)])
    assert (old.uris, old.computed) == (("old.parquet",), frozenset({"n"}))
    assert (new.uris, new.computed) == (("new.parquet",), frozenset())
    assert versions_lacking_generated(added) == {spec.version}
    assert versions_lacking_generated(spec) == frozenset()
    # and it keeps the rules of a generated column where it stands
    with pytest.raises(SpecError, match=r"generated column 'n'.*aggregate"):
        evolve(
            TableSpec.create(
                name="ev", schema=BASE.rstrip(", "), merge="aggregate(ts; properties:any)"
            ),
            [AddColumn(Column("n", "BIGINT", expression="len(properties)"))],
        )
