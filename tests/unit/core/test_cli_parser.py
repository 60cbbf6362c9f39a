"""The command line's grammar: a fault of the command line itself (an option value of the wrong
form or out of range, options that conflict or need each other) exits 2 with one line naming
the option, before any setting is read; what the options take is parsed as documented."""

from __future__ import annotations

import io
from typing import NoReturn

import pytest

from icefloe.cli import EXIT_USAGE, build_parser, main, parse_command_line

WHOLE = "expected a whole number of at least 1"
FULL_WIDTH_ONE = "\uff11"  # int() and the janitor's parse_duration take it
SNAPSHOT = "expected a snapshot id (a whole number, 0 or more)"
PARTITION = "is not a partition path: expected NAME=VALUE segments joined by '/'"
EMR = "--engine emr writes its result as Parquet under the results location"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # Numbers: ASCII digits, in range (as argparse says of "abc", so of 0)
        (["gc", "--max-files", "abc"], f"argument --max-files: {WHOLE}, got 'abc'"),
        (["gc", "--max-files", "0"], f"argument --max-files: {WHOLE}, got '0'"),
        (["gc", "--max-files", FULL_WIDTH_ONE], f"--max-files: {WHOLE}, got '{FULL_WIDTH_ONE}'"),
        (["table", "paths", "t", "--files", "0"], f"argument --files: {WHOLE}, got '0'"),
        (["table", "paths", "t", "--rows", "-3"], f"argument --rows: {WHOLE}, got '-3'"),
        (["demo", "--events", "0"], f"argument --events: {WHOLE}, got '0'"),
        (["demo", "--batch-size", "0"], f"argument --batch-size: {WHOLE}, got '0'"),
        (["demo", "--days", "1_000"], f"argument --days: {WHOLE}, got '1_000'"),
        (["files", "t", "--snapshot", "-1"], f"argument --snapshot: {SNAPSHOT}, got '-1'"),
        (["query", "SELECT 1", "--snapshot", "x"], f"argument --snapshot: {SNAPSHOT}, got 'x'"),
        (["changes", "t", "--since", "-1"], f"argument --since: {SNAPSHOT}, got '-1'"),
        (["rollback", "t", "--to-snapshot", "-2"], f"argument --to-snapshot: {SNAPSHOT}"),
        (["changes", "t", "--since", "3", "--until", "1"], "--until 1 is before --since 3"),
        # Durations: ASCII digits and a unit, named by the option (whether written -1d or =-1d)
        (["gc", "--retention", "bogus"], "argument --retention: 'bogus' is not a duration"),
        (["gc", "--retention", "-1d"], "argument --retention: expected one argument"),
        (["gc", "--retention=-1d"], "argument --retention: '-1d' is not a duration"),
        (["gc", "--retention", f"{FULL_WIDTH_ONE}d"], f"'{FULL_WIDTH_ONE}d' is not a duration"),
        (["gc", "--retention", "99999999999w"], "argument --retention: duration '99999999999w'"),
        (["gc", "--retention", "3000000d"], "--retention: duration '3000000d' is too long"),
        (["gc", "--orphan-grace", "800000d"], "--orphan-grace: duration '800000d' is too long"),
        (["gc", "--orphan-grace", "59m"], "argument --orphan-grace: 59m is shorter than 1h"),
        (["gc", "--orphan-grace", "1 h"], "argument --orphan-grace: '1 h' is not a duration"),
        (["publish", "iceberg", "t", "--retention", "x"], "argument --retention: 'x' is not a"),
        # Paths: never empty (Path("") is the current directory)
        (["insert", "t", ""], "argument source: the path is empty"),
        (["query", "-f", ""], "argument -f/--file: the path is empty"),
        (["query", "SELECT 1", "--format", "csv", "--output", ""], "argument --output: the path"),
        (["changes", "t", "--since", "0", "--output", ""], "argument --output: the path is empty"),
        (["compact", "t", "--partition", ""], f"argument --partition: '' {PARTITION}"),
        (["compact", "t", "--partition", "../../etc"], f"--partition: '../../etc' {PARTITION}"),
        (["compact", "t", "--partition", "day=1/"], f"argument --partition: 'day=1/' {PARTITION}"),
        (["insert", "t", "-", "--idempotency-key", ""], "argument --idempotency-key: idempotency"),
        # Options that conflict or need each other
        (["query"], "give the SELECT as an argument, or with -f FILE"),
        (["query", "SELECT 1", "-f", "q.sql"], "give the SELECT as an argument or with -f FILE"),
        (["query", "SELECT 1", "--format", "parquet"], "--format parquet needs --output FILE"),
        (
            ["changes", "t", "--since", "0", "--format", "parquet"],
            "--format parquet needs --output",
        ),
        (["query", "SELECT 1", "--engine", "spark", "--stats"], "--stats needs the duckdb engine"),
        (["query", "SELECT 1", "--engine", "spark", "--tenant", "a"], "--tenant needs the duckdb"),
        (["query", "SELECT 1", "--engine", "emr", "--format", "csv"], EMR),
        (["query", "SELECT 1", "--engine", "emr", "--output", "r.parquet"], EMR),
        (["table", "create", "t"], "table create needs --schema (or --preset)"),
        (["table", "create", "t", "--schema", ""], "table create needs --schema (or --preset)"),
        (
            ["table", "create", "t", "--schema", "a INTEGER", "--preset", "segment"],
            "give --schema or --preset, not both",
        ),
        (
            ["table", "create", "t", "--preset", "segment", "--partition-by", "day(ts)"],
            "--preset segment sets the whole spec: --partition-by cannot be given",
        ),
        (
            ["table", "create", "t", "--preset", "segment", "--sort-by", "", "--merge", "append"],
            "--preset segment sets the whole spec: --sort-by, --merge cannot be given",
        ),
        (["table", "alter", "t"], "table alter: give at least one of --add-column"),
        (["publish", "iceberg"], "publish iceberg: give a table, or --all"),
        (["publish", "iceberg", "t", "--all"], "publish iceberg: give a table, or --all"),
        (["publish", "iceberg", "--all", "--unpublish"], "--unpublish takes a table only"),
        (["publish", "iceberg", "t", "--unpublish", "--retention", "1d"], "takes a table only"),
    ],
)
def test_a_fault_of_the_command_line_exits_2_naming_it_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    def no_settings_read() -> NoReturn:
        raise AssertionError("the command ran")

    monkeypatch.setattr("icefloe.cli.load_settings", no_settings_read)
    with pytest.raises(SystemExit) as exited:
        main(argv, out=io.StringIO())
    err = capsys.readouterr().err
    assert exited.value.code == EXIT_USAGE
    assert err.startswith("icefloe: error: ") and err.count("\n") == 1
    assert message in err, err


def parse(*argv: str) -> dict[str, object]:
    args = vars(parse_command_line(build_parser(), list(argv)))
    args.pop("_check", None)
    return args


def test_what_the_options_take() -> None:
    # Whole numbers from 1; snapshot ids from 0
    assert parse("gc", "--max-files", "1")["max_files"] == 1
    assert parse("demo", "--events", "10", "--batch-size", "5", "--days", "2")["days"] == 2
    assert parse("changes", "t", "--since", "0", "--until", "0")["until"] == 0
    assert parse("rollback", "t", "--to-snapshot", "0")["to_snapshot"] == 0
    # Durations as written (the command reads them), a unit in either case
    gc = parse("gc", "--retention", "3D", "--orphan-grace", "1h30m")
    assert (gc["retention"], gc["orphan_grace"]) == ("3D", "1h30m")
    assert parse("gc", "--retention", "0s", "--orphan-grace", "1h")["retention"] == "0s"
    assert parse("publish", "iceberg", "t", "--retention", "0s")["retention"] == "0s"
    # Partition paths as status lists them: several segments, escapes, an empty value
    partitions = ["day=2026-11-02/tenant=a%2Fb", "tenant=", "day=__HIVE_DEFAULT_PARTITION__"]
    argv = [arg for p in partitions for arg in ("--partition", p)]
    assert parse("compact", "t", *argv)["partition"] == partitions
    # A preset alone (or with --publish), or a schema with its layout
    create = parse("table", "create", "t", "--preset", "segment", "--publish", "iceberg")
    assert (create["preset"], create["partition_by"], create["merge"]) == ("segment", None, None)
    create = parse("table", "create", "t", "--schema", "a INTEGER", "--merge", "append")
    assert (create["schema"], create["merge"]) == ("a INTEGER", "append")
    # The SELECT from one place; parquet to a file; --publish alone is an alteration
    assert parse("query", "-f", "q.sql")["sql_file"] == "q.sql"
    query = parse("query", "SELECT 1", "--format", "parquet", "--output", "r.parquet")
    assert query["output"] == "r.parquet"
    assert parse("query", "SELECT 1", "--engine", "emr", "--format", "json")["engine"] == "emr"
    assert parse("table", "alter", "t", "--publish", "none")["publish"] == "none"
    assert parse("publish", "iceberg", "--all")["all"] is True
    assert parse("insert", "t", "-", "--idempotency-key", "k1")["idempotency_key"] == "k1"
    # An empty table name is the lake's to refuse (no table has it), not the parser's
    assert parse("status", "")["name"] == ""
