"""Values of a query result that each output format must keep apart or still write: NaN and the
infinities are never NULL (JSON writes them as the strings "NaN", "Infinity", "-Infinity"; the
text table and CSV as DuckDB spells them), and a column Parquet cannot hold (an INTERVAL, a
UNION, anything holding one) is written as DuckDB's text of it, as CSV and JSON write it."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.cli import main
from icefloe.lake import Lake
from icefloe.query.service import QueryRequest, answer_query

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(
    monkeypatch: pytest.MonkeyPatch, postgres_dsn: str, schema_name: str, tmp_path: Path
) -> None:
    monkeypatch.setenv("ICEFLOE_DATABASE_URL", postgres_dsn)
    monkeypatch.setenv("ICEFLOE_DATABASE_SCHEMA", schema_name)
    monkeypatch.setenv("ICEFLOE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ICEFLOE_WAREHOUSE", raising=False)
    assert run("init")[0] == 0


def run(*argv: str) -> tuple[int, str]:
    """The exit code (a usage error's too) and stdout of one command."""
    out = io.StringIO()
    try:
        code = main(list(argv), out=out)
    except SystemExit as e:  # argparse's refusal of the command line
        code = int(e.code or 0)
    return code, out.getvalue()


# --- NaN and the infinities ---------------------------------------------------------------

# Top level (DOUBLE and FLOAT), next to a real NULL, in a list, a struct (beside an infinite
# date, which Python cannot hold: that struct comes through DuckDB's JSON) and a map.
NON_FINITE = (
    "SELECT 'nan'::DOUBLE AS a, 'inf'::DOUBLE AS b, '-inf'::FLOAT AS c, NULL::DOUBLE AS n,"
    " ['-inf'::DOUBLE, NULL, 1.5] AS l, {'x': 'nan'::DOUBLE, 'd': 'infinity'::DATE} AS s,"
    " MAP {'k': 'inf'::DOUBLE} AS m"
)


def test_json_writes_nan_and_infinities_as_strings_never_null(cli_env: None) -> None:
    code, out = run("query", NON_FINITE, "--format", "json")

    assert code == 0
    assert json.loads(out) == [
        {
            "a": "NaN",
            "b": "Infinity",
            "c": "-Infinity",
            "n": None,
            "l": ["-Infinity", None, 1.5],
            "s": {"x": "NaN", "d": "infinity"},
            "m": {"k": "Infinity"},
        }
    ]
    assert "null, null" not in out and out.count("null") == 2  # n and l[1] only


def test_text_table_spells_nan_and_infinities_as_duckdb_at_any_depth(cli_env: None) -> None:
    code, out = run("query", NON_FINITE)

    assert code == 0
    assert out.splitlines() == [
        "a    b    c     n     l                  s                            m",
        'nan  inf  -inf  NULL  [-inf, null, 1.5]  {"x": nan, "d": "infinity"}  {"k": inf}',
        "(1 rows)",
    ]


def test_csv_writes_nan_and_infinities_never_as_an_empty_field_or_null(cli_env: None) -> None:
    """A top-level value as DuckDB spells it; a nested value is its JSON, as --format json
    writes it."""
    code, out = run("query", NON_FINITE, "--format", "csv")

    assert code == 0
    assert out.splitlines() == [
        '"a","b","c","n","l","s","m"',
        'nan,inf,-inf,,"[""-Infinity"", null, 1.5]",'
        '"{""x"": ""NaN"", ""d"": ""infinity""}","{""k"": ""Infinity""}"',
    ]


def test_the_query_service_inline_rows_keep_nan_and_infinities(connected_lake: Lake) -> None:
    answer = answer_query(
        connected_lake.query_engine(),
        QueryRequest(sql="SELECT 'nan'::DOUBLE, ['-inf'::DOUBLE], NULL::DOUBLE"),
        results=connected_lake.objects,
    )
    assert answer.rows == [["NaN", ["-Infinity"], None]]


def test_lake_query_gives_nan_and_infinities_as_floats(connected_lake: Lake) -> None:
    """The pyarrow Table of ``lake.query`` is not output: its values stay floats."""
    table = connected_lake.query(
        "SELECT 'nan'::DOUBLE AS a, 'inf'::DOUBLE AS b, NULL::DOUBLE AS n, ['-inf'::DOUBLE] AS l"
    )
    assert table.schema.types == [pa.float64(), pa.float64(), pa.float64(), pa.list_(pa.float64())]
    [row] = table.to_pylist()
    assert math.isnan(row["a"]) and row["b"] == math.inf and row["n"] is None
    assert row["l"] == [-math.inf]


# --- columns Parquet cannot hold ------------------------------------------------------------


@pytest.mark.parametrize(
    ("select", "texts"),
    [
        ("SELECT INTERVAL 1 HOUR AS v, 7 AS n", ["01:00:00"]),
        (
            "SELECT v, 7 AS n FROM (VALUES (INTERVAL 2 MONTH), (NULL)) AS t(v) ORDER BY v",
            ["2 months", None],
        ),
        ("SELECT {'a': INTERVAL 1 DAY} AS v, 7 AS n", ["{'a': 1 day}"]),
        ("SELECT MAP {'k': INTERVAL 90 MINUTE} AS v, 7 AS n", ["{k='01:30:00'}"]),
        ("SELECT union_value(k := 1) AS v, 7 AS n", ["1"]),
        ("SELECT [union_value(k := 2)] AS v, 7 AS n", ["[2]"]),
    ],
)
def test_parquet_writes_a_column_it_cannot_hold_as_duckdb_text(
    cli_env: None, tmp_path: Path, select: str, texts: list[str | None]
) -> None:
    target = tmp_path / "result.parquet"

    code, out = run("query", select, "--format", "parquet", "--output", str(target))

    assert (code, out) == (0, "")
    table = pq.read_table(target)
    assert table.schema.names == ["v", "n"]
    assert table.schema.types == [pa.string(), pa.int32()]  # the other column as it is
    assert table.column("v").to_pylist() == texts
    assert table.column("n").to_pylist() == [7] * len(texts)
    # The text CSV writes of the same values (its empty field: NULL).
    code, out = run("query", select, "--format", "csv")
    assert code == 0
    assert [row["v"] or None for row in csv.DictReader(io.StringIO(out))] == texts
    assert [p.name for p in tmp_path.iterdir() if p.name != "home"] == ["result.parquet"]


# --- the format from the name of --output -------------------------------------------------


@pytest.mark.parametrize(
    ("name", "argv", "expected"),
    [
        ("r.csv", [], '"x"\n7\n'),
        ("r.json", [], '[{"x": 7}]\n'),
        ("R.JSON", [], '[{"x": 7}]\n'),
        ("r.txt", [], "x\n7\n(1 rows)\n"),
        ("r", [], "x\n7\n(1 rows)\n"),
        # An explicit --format wins over the name.
        ("r.json", ["--format", "table"], "x\n7\n(1 rows)\n"),
        ("r.parquet", ["--format", "csv"], '"x"\n7\n'),
    ],
)
def test_output_without_format_takes_it_from_the_file_name(
    cli_env: None, tmp_path: Path, name: str, argv: list[str], expected: str
) -> None:
    target = tmp_path / name

    code, out = run("query", "SELECT 7 AS x", "--output", str(target), *argv)

    assert (code, out) == (0, "")
    assert target.read_text() == expected


def test_output_named_parquet_without_format_is_parquet(cli_env: None, tmp_path: Path) -> None:
    target = tmp_path / "r.parquet"

    assert run("query", "SELECT 7 AS x", "--output", str(target)) == (0, "")

    assert pq.read_table(target).to_pylist() == [{"x": 7}]


def test_changes_to_a_csv_file_without_format_is_csv(cli_env: None, tmp_path: Path) -> None:
    source = tmp_path / "rows.ndjson"
    source.write_text('{"ts": "2026-03-01T00:00:00Z", "event": "a"}\n')
    assert run("table", "create", "ev", "--schema", "ts TIMESTAMP NOT NULL, event VARCHAR")[0] == 0
    assert run("insert", "ev", str(source))[0] == 0
    target = tmp_path / "changes.csv"

    assert run("changes", "ev", "--since", "0", "--output", str(target)) == (0, "")

    header, row = target.read_text().splitlines()
    assert header == '"ts","event","_row_id","_change","_snapshot"'
    assert row.startswith('2026-03-01 00:00:00.000000,"a",') and row.endswith(',"insert",1')


@pytest.mark.parametrize("name", ["r.ndjson", "r.jsonl"])
def test_output_named_ndjson_without_format_is_refused_naming_format(
    cli_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    target = tmp_path / name
    capsys.readouterr()

    code, out = run("query", "SELECT 7 AS x", "--output", str(target))

    err = capsys.readouterr().err
    assert (code, out) == (2, "")
    assert err == (
        f"icefloe: error: --output {str(target)!r}: no NDJSON output; give --format"
        " (json writes one array)\n"
    )
    assert not target.exists()
