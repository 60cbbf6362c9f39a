"""Generated columns under schema changes: a new spec version keeps what each generated column
reads (the same column and struct field ids under the names its expression uses, at the same
types), since its stored values were computed from them. Swapping two names, dropping and
adding a column of the same name, or widening a column in one alter is refused, naming the
generated column and the column it reads, and nothing changes. A computed value no reader can
hold (a TIME of 24:00:00) is refused by name at insert and at an alter adding the column."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from test_cli import cli_env, run  # noqa: F401  (cli_env is a fixture)

from icefloe.errors import BatchRejectedError, InvalidInputError, SpecError
from icefloe.ingest import generated_values
from icefloe.ingest.columns import value_checks
from icefloe.lake import Lake
from icefloe.lifecycle import alter_table
from icefloe.lifecycle.alter import add_column, drop_column, rename_column, widen_column
from icefloe.spec.evolution import SchemaChange

pytestmark = pytest.mark.integration

SCHEMA = (
    "ts TIMESTAMP NOT NULL, a VARCHAR, b VARCHAR, f FLOAT, n INTEGER,"
    " s STRUCT(x VARCHAR, y VARCHAR, m INTEGER),"
    " ua VARCHAR AS (upper(a)), ftxt VARCHAR AS (CAST(f AS VARCHAR)),"
    " sx VARCHAR AS (upper(s.x)), sm VARCHAR AS (CAST(g.s.m AS VARCHAR))"
)
ROWS = [
    {
        "ts": "2026-01-01T00:00:00",
        "a": "apple",
        "b": "banana",
        "f": 0.1,
        "n": 1,
        "s": {"x": "xylo", "y": "yarn", "m": 7},
    },
    {"ts": "2026-01-02T00:00:00", "a": "avocado", "b": None, "f": 2.5, "n": 2, "s": None},
]
READ = "SELECT * EXCLUDE (_row_id) FROM g ORDER BY ts"
RULE = (
    ". Its stored values were computed from what its expression reads now, so a column or"
    " struct field it reads may not be renamed, dropped or widened, nor its name given to"
    " another (drop the generated column and add it again to compute it afresh)"
)


@pytest.fixture
def lake(connected_lake: Lake) -> Lake:
    connected_lake.create_table("g", schema=SCHEMA)
    connected_lake.insert("g", ROWS)
    return connected_lake


@dataclass(frozen=True)
class _State:
    version: int
    head: int
    files: list[str]
    rows: list[dict[str, Any]]


def _state(lake: Lake) -> _State:
    info = lake.table("g")
    assert info.head_snapshot_id is not None
    return _State(
        version=info.spec.version,
        head=info.head_snapshot_id,
        files=sorted(f.path for f in lake.meta.files("g")),
        rows=lake.query(READ).to_pylist(),
    )


def _alter(lake: Lake, changes: Sequence[SchemaChange]) -> Any:
    """The alter the CLI makes: the changes in the order given, in one spec version."""
    return alter_table(
        meta=lake.meta,
        table="g",
        changes=changes,
        objects=lake.objects,
        configure=lake.duckdb_configure,
    )


def _refused(lake: Lake, changes: Sequence[SchemaChange], message: str) -> None:
    """``changes`` are refused with exactly ``message`` and leave everything as it was."""
    before = _state(lake)
    with pytest.raises(InvalidInputError) as refused:
        _alter(lake, changes)
    assert str(refused.value) == message + RULE
    assert _state(lake) == before


def test_swapping_the_names_of_a_column_an_expression_reads_is_refused(lake: Lake) -> None:
    swap = [rename_column("a=tmp"), rename_column("b=a"), rename_column("tmp=b")]
    _refused(
        lake,
        swap,
        "generated column 'ua' of 'g': column 'a' it reads would be renamed 'b', and 'a' would"
        " name another column: the one that is 'b' now",
    )
    # through the lake's own front door too
    before = _state(lake)
    with pytest.raises(InvalidInputError, match=r"generated column 'ua' of 'g': column 'a'"):
        lake.alter_table("g", rename_columns={"a": "tmp", "b": "a", "tmp": "b"})
    assert _state(lake) == before
    # a single rename or drop keeps being refused, now saying what became of the column
    _refused(
        lake,
        [rename_column("a=z")],
        "generated column 'ua' of 'g': column 'a' it reads would be renamed 'z'",
    )
    _refused(
        lake,
        [drop_column("a")],
        "generated column 'ua' of 'g': column 'a' it reads would be dropped",
    )


def test_dropping_and_adding_again_a_column_an_expression_reads_is_refused(lake: Lake) -> None:
    _refused(
        lake,
        [drop_column("a"), add_column("a VARCHAR")],
        "generated column 'ua' of 'g': column 'a' it reads would be dropped, and 'a' would name"
        " another column: one this change adds",
    )
    # renaming it away and another column to its name
    _refused(
        lake,
        [rename_column("a=old_a"), rename_column("b=a")],
        "generated column 'ua' of 'g': column 'a' it reads would be renamed 'old_a', and 'a'"
        " would name another column: the one that is 'b' now",
    )


def test_the_cli_refuses_a_drop_and_add_of_what_an_expression_reads(
    cli_env: str,  # noqa: F811  (the fixture imported above)
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
) -> None:
    assert run("init")[0] == 0
    schema = "ts TIMESTAMP NOT NULL, a VARCHAR, ua VARCHAR AS (upper(a))"
    assert run("table", "create", "g", "--schema", schema)[0] == 0
    batch = tmp_path / "b.ndjson"
    batch.write_text('{"ts": "2026-01-01T00:00:00", "a": "apple"}\n')
    assert run("insert", "g", str(batch))[0] == 0
    capsys.readouterr()
    code, _ = run("table", "alter", "g", "--drop-column", "a", "--add-column", "a VARCHAR")
    assert code == 1
    assert capsys.readouterr().err.strip() == (
        "icefloe: error: generated column 'ua' of 'g': column 'a' it reads would be dropped,"
        " and 'a' would name another column: one this change adds" + RULE
    )
    assert json.loads(run("table", "show", "g", "--format", "json")[1])["spec"]["version"] == 1
    assert [s["operation"] for s in json.loads(run("snapshots", "g", "--format", "json")[1])] == [
        "append"
    ]
    code, out = run("query", "SELECT a, ua FROM g", "--format", "json")
    assert code == 0 and json.loads(out) == [{"a": "apple", "ua": "APPLE"}]


def test_struct_fields_an_expression_reads_keep_their_ids(lake: Lake) -> None:
    _refused(
        lake,
        [rename_column("s.x=tmp"), rename_column("s.y=x"), rename_column("s.tmp=y")],
        "generated column 'sx' of 'g': field 's.x' it reads would be renamed 's.y', and 's.x'"
        " would name another field: the one that is 's.y' now",
    )
    _refused(
        lake,
        [drop_column("s.x"), add_column("s.x VARCHAR")],
        "generated column 'sx' of 'g': field 's.x' it reads would be dropped, and 's.x' would"
        " name another field: one this change adds",
    )
    # read through the table's name (g.s.m): the same rule
    _refused(
        lake,
        [drop_column("s.m"), add_column("s.m INTEGER")],
        "generated column 'sm' of 'g': field 's.m' it reads would be dropped, and 's.m' would"
        " name another field: one this change adds",
    )
    _refused(
        lake,
        [rename_column("s=t")],
        "generated column 'sx' of 'g': column 's' it reads would be renamed 't'",
    )


def test_widening_a_column_an_expression_reads_is_refused(lake: Lake) -> None:
    _refused(
        lake,
        [widen_column("f DOUBLE")],
        "generated column 'ftxt' of 'g': column 'f' it reads would be widened from FLOAT to DOUBLE",
    )
    _refused(
        lake,
        [widen_column("s.m BIGINT")],
        "generated column 'sm' of 'g': field 's.m' it reads would be widened from INTEGER to"
        " BIGINT",
    )
    assert lake.query("SELECT ftxt, CAST(f AS VARCHAR) AS e FROM g ORDER BY ts").to_pylist() == [
        {"ftxt": "0.1", "e": "0.1"},
        {"ftxt": "2.5", "e": "2.5"},
    ]
    # a column no expression reads widens; so does the generated column itself
    altered = _alter(lake, [widen_column("n BIGINT")])
    assert altered.spec.column("n").type == "BIGINT"


def test_changes_beside_what_an_expression_reads_are_allowed(lake: Lake) -> None:
    altered = _alter(
        lake,
        [
            rename_column("s.y=z"),  # a field beside the one read
            add_column("s.w INTEGER"),
            rename_column("b=c"),  # a column no expression reads
            rename_column("ua=upper_a"),  # the generated column itself
            rename_column("a=A"),  # the same column, as DuckDB binds it
        ],
    )
    assert altered.spec.version == 2
    answer = lake.query("SELECT A, upper_a, upper(A) AS e, sx, s.x AS x FROM g ORDER BY ts")
    assert answer.to_pylist() == [
        {"A": "apple", "upper_a": "APPLE", "e": "APPLE", "sx": "XYLO", "x": "xylo"},
        {"A": "avocado", "upper_a": "AVOCADO", "e": "AVOCADO", "sx": None, "x": None},
    ]


def test_a_generated_column_dropped_and_added_again_is_computed_afresh(lake: Lake) -> None:
    # the same swap, with the generated column dropped and added again in the same alter:
    # a new column, computed from its expression for every row the table holds
    altered = _alter(
        lake,
        [
            drop_column("ua"),
            rename_column("a=tmp"),
            rename_column("b=a"),
            rename_column("tmp=b"),
            add_column("ua VARCHAR AS (upper(a))"),
        ],
    )
    assert altered.spec.version == 2
    answer = lake.query("SELECT a, ua, upper(a) AS e FROM g ORDER BY ts").to_pylist()
    assert answer == [
        {"a": "banana", "ua": "BANANA", "e": "BANANA"},
        {"a": None, "ua": None, "e": None},
    ]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("upper(COLUMNS('^a$'))", "no *, COLUMNS(...) or #n"),
        ("upper(#2)", "no *, COLUMNS(...) or #n"),
        ("to_json(h)", "h is the whole row"),
        ("CAST(h AS VARCHAR)", "h is the whole row"),
        ("upper(ua)", "does not bind over the table's input columns"),  # another generated one
    ],
)
def test_an_expression_names_each_column_it_reads(
    connected_lake: Lake, expression: str, message: str
) -> None:
    """What an expression reads is known from its names, so that the rule above holds."""
    schema = (
        f"ts TIMESTAMP NOT NULL, a VARCHAR, ua VARCHAR AS (upper(a)), v VARCHAR AS ({expression})"
    )
    with pytest.raises(InvalidInputError, match=r"^generated column 'v' of 'h': ") as refused:
        connected_lake.create_table("h", schema=schema)
    assert message in str(refused.value)
    assert [t.name for t in connected_lake.tables()] == []
    # a lambda's parameter named like the table is no row
    connected_lake.create_table(
        "h",
        schema="ts TIMESTAMP NOT NULL, l INTEGER[],"
        " v VARCHAR AS (CAST(list_transform(l, h -> h + 1) AS VARCHAR))",
    )


def test_a_generated_time_of_24_00_is_refused_by_name(connected_lake: Lake) -> None:
    lake = connected_lake
    lake.create_table(
        "t24",
        schema="ts TIMESTAMP NOT NULL, v VARCHAR,"
        " x TIME AS (CASE WHEN v = 'late' THEN TIME '24:00:00' ELSE TIME '12:00:00' END)",
    )
    rows = [{"ts": "2026-01-01T00:00:00", "v": "early"}, {"ts": "2026-01-01T00:00:00", "v": "late"}]
    with pytest.raises(BatchRejectedError) as refused:
        lake.insert("t24", rows)
    assert [str(p) for p in refused.value.problems] == [
        "row 1, field 'x': generated from its expression, its value is not one its type may"
        " hold (a TIME is before 24:00:00)"
    ]
    assert lake.query("SELECT count(*) AS n FROM t24").to_pylist() == [{"n": 0}]
    lake.insert("t24", rows[:1])
    assert lake.query("SELECT CAST(x AS VARCHAR) AS x FROM t24").to_pylist() == [{"x": "12:00:00"}]


def test_adding_a_generated_time_of_24_00_to_a_table_with_rows_is_refused_by_name(
    connected_lake: Lake,
) -> None:
    lake = connected_lake
    lake.create_table("held", schema="ts TIMESTAMP NOT NULL, v VARCHAR")
    lake.insert("held", [{"ts": "2026-01-01T00:00:00", "v": "a"}])
    version, head = lake.table("held").spec.version, lake.table("held").head_snapshot_id
    (held,) = lake.meta.files("held")
    with pytest.raises(SpecError) as alter_refused:
        lake.alter_table("held", add_columns=["x TIME AS (TIME '24:00:00')"])
    assert str(alter_refused.value) == (
        f"alter 'held': cannot add generated column 'x': a row of {lake.objects.uri(held.path)},"
        " written before it, cannot take its value: its value is not one its type may hold (a"
        " TIME is before 24:00:00). Nothing changed; make the expression hold for every row"
        " (TRY_CAST gives NULL where a CAST fails)"
    )
    assert (lake.table("held").spec.version, lake.table("held").head_snapshot_id) == (version, head)


TYPES = [
    "VARCHAR", "JSON", "BLOB", "BOOLEAN", "TINYINT", "BIGINT", "HUGEINT", "UBIGINT", "FLOAT",
    "DOUBLE", "DECIMAL(10,2)", "DATE", "TIME", "TIMESTAMP", "TIMESTAMPTZ", "UUID", "INTEGER[]",
    "TIME[]", "DOUBLE[][]", "VARCHAR[]", "TIMESTAMP[]", "STRUCT(a INTEGER)", "MAP(VARCHAR, TIME)",
]  # fmt: skip


def test_every_check_code_of_a_value_has_words() -> None:
    codes = {
        code
        for kind in TYPES
        for partition in (False, True)
        for _, code in value_checks(kind, "v", max_value_bytes=10, partition_source=partition)
    }
    assert codes == {"range", "finite", "type", "nul", "json", "size"}
    assert codes <= set(generated_values._PROBLEMS)
