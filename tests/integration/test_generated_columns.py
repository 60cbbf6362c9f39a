"""Generated columns: JSON paths (and other expressions over a row) declared once as typed
columns, computed at insert on every input path, equal to DuckDB's own evaluation of the
expression over the same rows, refused when they cannot be computed, and pruned by their
statistics like any column."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_cli import cli_env, run  # noqa: F401  (cli_env is a fixture)

from icefloe.duck import string_literal
from icefloe.errors import BatchRejectedError, InvalidInputError
from icefloe.lake import Lake
from icefloe.lifecycle import AlterResult

pytestmark = pytest.mark.integration

INPUTS = "ts TIMESTAMP NOT NULL, event VARCHAR, properties JSON, ctx STRUCT(url VARCHAR, n INTEGER)"
GENERATED = [
    ("numtime", "BIGINT", "TRY_CAST(properties->>'numtime' AS BIGINT)"),
    ("plan", "VARCHAR", "properties->>'$.user.plan'"),
    ("score", "DOUBLE", "CAST(properties->'score' AS DOUBLE)"),
    ("on_day", "DATE", "CAST(ts AS DATE)"),
    ("kind", "VARCHAR", "coalesce(lower(event), 'none') || ':' || coalesce(ctx.url, '-')"),
    ("tags", "JSON", "properties->'tags'"),
    ("has_n", "BOOLEAN", "ctx.n IS NOT NULL AND json_exists(properties, '$.numtime')"),
]
SCHEMA = INPUTS + ", " + ", ".join(f"{n} {t} AS ({e})" for n, t, e in GENERATED)
INPUT_TYPES = {
    "ts": "TIMESTAMP",
    "event": "VARCHAR",
    "properties": "JSON",
    "ctx": "STRUCT(url VARCHAR, n INTEGER)",
}


def events(seed: int, count: int) -> list[dict[str, Any]]:
    """Events whose properties hold each path as a number, text, nothing or null."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        properties: dict[str, Any] = {}
        numtime = rng.choice([rng.randrange(10**6), str(rng.randrange(100)), "x", None, "absent"])
        if numtime != "absent":
            properties["numtime"] = numtime
        if rng.random() < 0.7:
            properties["user"] = {"plan": rng.choice(["free", "pro", None])}
        if rng.random() < 0.6:
            properties["score"] = rng.choice([rng.random() * 100, rng.randrange(5), None])
        if rng.random() < 0.4:
            properties["tags"] = rng.choice([[], ["a"], ["a", {"b": 1}], None])
        event: dict[str, Any] = {
            "ts": f"2026-05-{1 + rng.randrange(3):02d}T{rng.randrange(24):02d}:00:{n % 60:02d}",
            "event": rng.choice(["View", "CLICK", None]),
        }
        if rng.random() < 0.9:
            event["properties"] = properties if rng.random() < 0.95 else None
        if rng.random() < 0.7:
            event["ctx"] = {"url": rng.choice(["/a", "/b", None]), "n": rng.choice([1, None])}
        out.append(event)
    return out


def expected(rows: list[dict[str, Any]], tmp_path: Path) -> list[tuple[Any, ...]]:
    """What plain DuckDB computes: each expression over the rows read with their types."""
    path = tmp_path / "expected.ndjson"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    columns = ", ".join(f"{string_literal(k)}: {string_literal(v)}" for k, v in INPUT_TYPES.items())
    computed = ", ".join(f"CAST(({e}) AS {t}) AS {n}" for n, t, e in GENERATED)
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        found = con.execute(
            f"SELECT ts, event, properties, ctx, {computed} FROM read_json(?,"
            f" format='newline_delimited', columns={{{columns}}})",
            [str(path)],
        ).fetchall()
    return sorted(found, key=repr)


def stored(lake: Lake, table: str = "ev", *, snapshot_id: int | None = None) -> list[Any]:
    names = ", ".join(["ts", "event", "properties", "ctx", *(n for n, _, _ in GENERATED)])
    answer = lake.query(f"SELECT {names} FROM {table}", snapshot_id=snapshot_id)
    return sorted((tuple(r.values()) for r in answer.to_pylist()), key=repr)


@pytest.fixture
def lake(connected_lake: Lake) -> Lake:
    return connected_lake


def _arrow(rows: list[dict[str, Any]], tmp_path: Path) -> pa.Table:
    """The rows as typed Arrow input: the input columns only."""
    path = tmp_path / "arrow.ndjson"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    columns = ", ".join(f"{string_literal(k)}: {string_literal(v)}" for k, v in INPUT_TYPES.items())
    with duckdb.connect() as con:
        return con.execute(
            f"SELECT * FROM read_json(?, format='newline_delimited', columns={{{columns}}})",
            [str(path)],
        ).to_arrow_table()


def test_generated_values_equal_duckdbs_evaluation_on_every_input_path(
    lake: Lake, tmp_path: Path
) -> None:
    lake.create_table("ev", schema=SCHEMA, partition_by="day(ts)", sort_by="numtime")
    batches = [events(seed, 50) for seed in range(6)]
    lake.insert("ev", batches[0])  # Python rows
    ndjson = tmp_path / "b.ndjson"
    ndjson.write_text("".join(json.dumps(r) + "\n" for r in batches[1]))
    lake.insert("ev", ndjson)
    array = tmp_path / "b.json"
    array.write_text(json.dumps(batches[2]))
    lake.insert("ev", array)
    lake.insert("ev", _arrow(batches[3], tmp_path))
    parquet = tmp_path / "b.parquet"
    pq.write_table(_arrow(batches[4], tmp_path), parquet)
    lake.insert("ev", parquet)
    csv = tmp_path / "b.csv"
    with duckdb.connect() as con:
        con.register("rows", _arrow(batches[5], tmp_path))
        con.execute(f"COPY (SELECT * EXCLUDE (ctx) FROM rows) TO '{csv}' (HEADER)")
    lake.create_table(
        "flat",
        schema="ts TIMESTAMP NOT NULL, event VARCHAR, properties JSON,"
        " numtime BIGINT AS (TRY_CAST(properties->>'numtime' AS BIGINT))",
    )
    lake.insert("flat", csv)

    assert stored(lake) == expected([r for b in batches[:5] for r in b], tmp_path)
    flat = lake.query("SELECT ts, numtime FROM flat").to_pylist()
    plain = expected(batches[5], tmp_path)
    assert sorted((r["ts"], r["numtime"]) for r in flat) == sorted((r[0], r[4]) for r in plain)
    # (each path was exercised with values present, absent and unconvertible)
    values = [r[4] for r in plain]
    assert None in values and any(v is not None for v in values)

    # A merge keeps every value; a pinned snapshot reads what it read
    before = lake.table("ev").head_snapshot_id
    assert lake.merge("ev").count("committed") > 0
    assert stored(lake) == stored(lake, snapshot_id=before)


def test_a_selective_filter_on_a_generated_column_prunes_by_its_statistics(lake: Lake) -> None:
    lake.create_table("ev", schema=SCHEMA, partition_by="day(ts)", sort_by="numtime")
    for batch in range(4):
        rows = events(batch, 40)
        for n, row in enumerate(rows):
            row["ts"] = "2026-05-01T00:00:00"
            row["properties"] = {"numtime": batch * 1000 + n}
        lake.insert("ev", rows)
    result = lake.query_result("SELECT count(*) AS n FROM ev WHERE numtime BETWEEN 2000 AND 2010")
    assert result.rows.to_pylist() == [{"n": 11}]
    (scan,) = result.stats
    assert (scan.files_considered, scan.files_scanned) == (4, 1)


def test_a_value_given_for_a_generated_column_is_refused_naming_the_row(
    lake: Lake, tmp_path: Path
) -> None:
    lake.create_table("ev", schema=SCHEMA, partition_by="day(ts)")
    rows = events(1, 5)
    rows[3]["numtime"] = 12
    with pytest.raises(BatchRejectedError, match=r"row 3, field 'numtime': a generated column"):
        lake.insert("ev", rows)
    ndjson = tmp_path / "given.ndjson"
    ndjson.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(BatchRejectedError, match=r"row 3, field 'numtime': a generated column"):
        lake.insert("ev", ndjson)
    arrow = _arrow(rows, tmp_path).append_column("plan", pa.array([None, "x", None, None, None]))
    with pytest.raises(BatchRejectedError, match=r"row 1, field 'plan': a generated column"):
        lake.insert("ev", arrow)
    # (a table keeping unknown fields refuses it too: the field is a column, not unknown)
    lake.create_table(
        "keep",
        schema="ts TIMESTAMP NOT NULL, properties JSON, extra JSON,"
        " n BIGINT AS (TRY_CAST(properties->>'n' AS BIGINT))",
        extra_fields="keep",
        overflow_column="extra",
    )
    with pytest.raises(BatchRejectedError, match=r"row 0, field 'n': a generated column"):
        lake.insert("keep", [{"ts": "2026-05-01T00:00:00", "n": 4, "other": 1}])
    assert lake.query("SELECT count(*) AS n FROM ev").to_pylist() == [{"n": 0}]
    assert lake.query("SELECT count(*) AS n FROM keep").to_pylist() == [{"n": 0}]


def test_a_row_whose_expression_fails_is_refused_naming_it(lake: Lake) -> None:
    lake.create_table(
        "ev",
        schema="ts TIMESTAMP NOT NULL, properties JSON,"
        " n BIGINT AS (CAST(properties->>'n' AS BIGINT)),"
        " ratio DOUBLE AS (CAST(properties->>'a' AS DOUBLE) / CAST(properties->>'b' AS DOUBLE))",
    )
    good = [{"ts": "2026-05-01T00:00:00", "properties": {"n": k, "a": 1, "b": 2}} for k in range(9)]
    bad_cast = [*good[:6], {"ts": "2026-05-01T00:00:00", "properties": {"n": "six"}}, *good[6:]]
    with pytest.raises(
        BatchRejectedError, match=r"row 6, field 'n': its expression fails: Conversion Error"
    ):
        lake.insert("ev", bad_cast)
    infinite = [*good, {"ts": "2026-05-01T00:00:00", "properties": {"n": 1, "a": 1, "b": 0}}]
    with pytest.raises(
        BatchRejectedError,
        match=r"row 9, field 'ratio': generated from its expression, its value"
        r" is not a finite number",
    ):
        lake.insert("ev", infinite)
    assert lake.query("SELECT count(*) AS n FROM ev").to_pylist() == [{"n": 0}]
    lake.insert("ev", good)
    assert lake.query("SELECT sum(n) AS s FROM ev").to_pylist() == [{"s": sum(range(9))}]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("random()", "random() is not deterministic"),
        ("epoch(now())", "now() is not deterministic"),
        ("CAST(epoch(current_timestamp) AS BIGINT)", "current_timestamp is not one of"),
        ("count(*)", "count_star() is an aggregate"),
        ("row_number() OVER ()", "a window is not allowed"),
        ("(SELECT 1)", "reads one row's columns only"),
        ("len(getenv('HOME'))", "function getenv() is not allowed"),
        ("missing + 1", 'Referenced column "missing" not found'),
        ("numtime + 1", 'Referenced column "numtime" not found'),  # another generated column
    ],
)
def test_an_expression_breaking_a_rule_is_refused_at_create_naming_the_column(
    lake: Lake, expression: str, message: str
) -> None:
    schema = (
        "ts TIMESTAMP NOT NULL, properties JSON,"
        f" numtime BIGINT AS (TRY_CAST(properties->>'numtime' AS BIGINT)), g BIGINT AS ({expression})"
    )
    with pytest.raises(InvalidInputError, match=r"generated column 'g' of 'ev'") as refused:
        lake.create_table("ev", schema=schema)
    assert message in str(refused.value)
    assert [t.name for t in lake.tables()] == []


def test_renaming_or_dropping_what_an_expression_reads_is_refused(lake: Lake) -> None:
    lake.create_table(
        "ev",
        schema="ts TIMESTAMP NOT NULL, properties JSON,"
        " n INTEGER AS (CAST(json_array_length(properties) AS INTEGER))",
    )
    for change in ({"rename_columns": {"properties": "props"}}, {"drop_columns": ["properties"]}):
        with pytest.raises(InvalidInputError, match="generated column 'n' of 'ev'"):
            lake.alter_table("ev", **change)  # type: ignore[arg-type]
    assert lake.table("ev").spec.version == 1
    # the generated column itself may be renamed, widened or dropped
    lake.alter_table("ev", rename_columns={"n": "length"})
    lake.insert("ev", [{"ts": "2026-05-01T00:00:00", "properties": [1, 2, 3]}])
    assert lake.query("SELECT length FROM ev").to_pylist() == [{"length": 3}]
    widened = lake.alter_table("ev", widen=["length BIGINT"])
    assert isinstance(widened, AlterResult)
    assert widened.spec.column("length").expression == (
        "CAST(json_array_length(properties) AS INTEGER)"
    )
    lake.insert("ev", [{"ts": "2026-05-02T00:00:00", "properties": [1]}])
    answer = lake.query("SELECT typeof(length) AS t, length FROM ev ORDER BY ts").to_pylist()
    assert answer == [{"t": "BIGINT", "length": 3}, {"t": "BIGINT", "length": 1}]
    lake.alter_table("ev", drop_columns=["length"])
    assert lake.query("SELECT * EXCLUDE (_row_id) FROM ev").column_names == ["ts", "properties"]


def test_the_cli_creates_shows_and_fills_a_table_with_a_generated_column(
    cli_env: str,  # noqa: F811  (the fixture imported above)
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    schema = "ts TIMESTAMP NOT NULL, properties JSON, numtime BIGINT AS (CAST(properties->>'numtime' AS BIGINT))"
    assert run("init")[0] == 0
    assert run("table", "create", "ev", "--schema", schema)[0] == 0
    code, shown = run("table", "show", "ev", "--format", "json")
    assert code == 0
    assert json.loads(shown)["spec"]["columns"][2] == {
        "name": "numtime",
        "type": "BIGINT",
        "nullable": True,
        "expression": "CAST(properties->>'numtime' AS BIGINT)",
    }
    code, shown = run("table", "show", "ev")
    assert code == 0 and f"schema              {schema}\n" in shown
    batch = tmp_path / "b.ndjson"
    batch.write_text('{"ts": "2026-05-01T00:00:00", "properties": {"numtime": "41"}}\n')
    assert run("insert", "ev", str(batch))[0] == 0
    code, out = run("query", "SELECT numtime + 1 AS n FROM ev", "--format", "json")
    assert code == 0 and json.loads(out) == [{"n": 42}]
    code, out = run("table", "paths", "ev", "--format", "json")
    assert code == 0 and json.loads(out) == [
        {
            "path": "$.numtime",
            "rows": 1,
            "share": 1.0,
            "types": {"VARCHAR": 1},
            "type": "VARCHAR",
            "declaration": "numtime VARCHAR AS (properties->>'$.numtime')",
        }
    ]
    code, out = run("table", "paths", "ev")
    assert code == 0 and out.splitlines()[0] == "ev.properties: 1 rows of the newest 1 files"
    # a path declared later, as the paths listing suggested, reads the old row too
    code, out = run(
        "table", "alter", "ev", "--add-column", "numtext VARCHAR AS (properties->>'$.numtime')"
    )
    assert code == 0, out
    code, out = run("query", "SELECT numtext FROM ev", "--format", "json")
    assert code == 0 and json.loads(out) == [{"numtext": "41"}]
    code, out = run(
        "table",
        "alter",
        "ev",
        "--add-column",
        "bad BIGINT AS (CAST((properties->>'numtime') || 'x' AS BIGINT))",
    )
    error = capsys.readouterr().err
    assert code != 0 and "generated column 'bad'" in error and "'41x'" in error


def test_table_paths_lists_each_path_with_its_type_and_a_declaration(lake: Lake) -> None:
    lake.create_table("raw", schema="ts TIMESTAMP NOT NULL, properties JSON, note VARCHAR")
    lake.insert("raw", [{"ts": "2026-05-01T00:00:00", "properties": {"old_path": 1}}])
    rows: list[dict[str, Any]] = [
        {
            "ts": "2026-05-02T00:00:00",
            "properties": {
                "numtime": n,
                "ratio": n / 4 if n % 4 else n // 4,
                "ok": n % 2 == 0,
                "mixed": n if n % 2 else str(n),
                "user": {"plan": ["free", "pro"][n % 2]} if n < 15 else None,
                "items": [{"sku": f"s{n}"}],
            },
        }
        for n in range(20)
    ]
    lake.insert("raw", [*rows, {"ts": "2026-05-02T00:00:00", "properties": None}])

    # The newest file: 20 rows with a value; the older file's path is not in it
    report = lake.json_paths("raw", max_files=1)
    assert (report.column, report.files_read, report.rows_read) == ("properties", 1, 20)
    found = {p.path: (p.rows, p.type, p.declaration) for p in report.paths}
    assert found == {
        "$.numtime": (
            20,
            "BIGINT",
            "numtime BIGINT AS (TRY_CAST(properties->>'$.numtime' AS BIGINT))",
        ),
        "$.ratio": (20, "DOUBLE", "ratio DOUBLE AS (TRY_CAST(properties->>'$.ratio' AS DOUBLE))"),
        "$.ok": (20, "BOOLEAN", "ok BOOLEAN AS (TRY_CAST(properties->>'$.ok' AS BOOLEAN))"),
        "$.mixed": (20, "JSON", "mixed JSON AS (properties->'$.mixed')"),
        "$.user": (20, "JSON", "user JSON AS (properties->'$.user')"),
        "$.user.plan": (15, "VARCHAR", "user_plan VARCHAR AS (properties->>'$.user.plan')"),
        "$.items": (20, "JSON", "items JSON AS (properties->'$.items')"),
        "$.items[*]": (20, "JSON", None),
        "$.items[*].sku": (20, "VARCHAR", None),
    }
    assert {p.path: p.types for p in report.paths}["$.ratio"] == {"UBIGINT": 5, "DOUBLE": 15}
    assert "$.old_path" in {p.path for p in lake.json_paths("raw").paths}

    # Its declarations make a table that computes each path
    declared = ", ".join(p.declaration for p in report.paths if p.declaration)
    lake.create_table("typed", schema=f"ts TIMESTAMP NOT NULL, properties JSON, {declared}")
    lake.insert("typed", rows)
    (answer,) = lake.query(
        "SELECT sum(numtime) AS n, sum(ratio) AS r, count(*) FILTER (WHERE ok) AS k,"
        " count(DISTINCT user_plan) AS p FROM typed"
    ).to_pylist()
    assert answer == {"n": sum(range(20)), "r": sum(range(20)) / 4, "k": 10, "p": 2}

    with pytest.raises(InvalidInputError, match="'note' is not a JSON column"):
        lake.json_paths("raw", column="note")


def test_table_paths_quote_keys_that_are_not_plain_names(lake: Lake) -> None:
    # Given keys a bare JSON path would misread: a dot, a space, a quote, a backslash, the
    # empty key, and a plain nested path spelled like the dotted key
    lake.create_table("odd", schema="ts TIMESTAMP NOT NULL, properties JSON")
    rows: list[dict[str, Any]] = [
        {
            "ts": "2026-05-02T00:00:00",
            "properties": {
                "a.b": n,
                "a": {"b": "nested"},
                "x y": [{"k-1": n}],
                'q"': True,
                "back\\slash": n / 2,
                "": {"inner": n},
            },
        }
        for n in range(3)
    ]
    lake.insert("odd", rows)
    # Then each path names its own keys, quoted where they are not plain names
    found = {p.path: (p.type, p.declaration) for p in lake.json_paths("odd").paths}
    assert found == {
        '$."a.b"': ("BIGINT", """a_b BIGINT AS (TRY_CAST(properties->>'$."a.b"' AS BIGINT))"""),
        "$.a": ("JSON", "a JSON AS (properties->'$.a')"),
        "$.a.b": ("VARCHAR", "a_b VARCHAR AS (properties->>'$.a.b')"),
        '$."x y"': ("JSON", """x_y JSON AS (properties->'$."x y"')"""),
        '$."x y"[*]': ("JSON", None),
        '$."x y"[*]."k-1"': ("BIGINT", None),
        '$."q\\""': ("BOOLEAN", """q BOOLEAN AS (TRY_CAST(properties->>'$."q\\""' AS BOOLEAN))"""),
        '$."back\\\\slash"': (
            "DOUBLE",
            """back_slash DOUBLE AS (TRY_CAST(properties->>'$."back\\\\slash"' AS DOUBLE))""",
        ),
        # The empty key: reported, but no JSON path can declare it
        '$.""': ("JSON", None),
        '$."".inner': ("BIGINT", None),
    }
    # And each declaration reads its own path's values
    declared = [d for _, d in found.values() if d is not None and not d.startswith("a_b VARCHAR")]
    lake.create_table(
        "odd_typed", schema=f"ts TIMESTAMP NOT NULL, properties JSON, {', '.join(declared)}"
    )
    lake.insert("odd_typed", rows)
    answer = lake.query("SELECT a_b, x_y, q, back_slash FROM odd_typed ORDER BY a_b").to_pylist()
    assert answer == [
        {"a_b": n, "x_y": f'[{{"k-1":{n}}}]', "q": True, "back_slash": n / 2} for n in range(3)
    ]
