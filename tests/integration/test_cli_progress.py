"""The CLI's progress on stderr for insert, merge --wait, compact and gc: drawn on a terminal,
absent on a pipe and with --format json, and never a change to what the command prints."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Literal

import pytest

from icefloe.cli import INSERT_PROGRESS_MIN_BYTES, main

pytestmark = pytest.mark.integration

SCHEMA = "ts TIMESTAMP NOT NULL, event VARCHAR, user_id VARCHAR, properties JSON"
Stderr = Literal["terminal", "pipe", "terminal+json"]
PAD_BYTES = 3_000_000  # one value each, under the 4 MiB value limit


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def cli_env(
    monkeypatch: pytest.MonkeyPatch, postgres_dsn: str, schema_name: str, tmp_path: Path
) -> str:
    monkeypatch.setenv("ICEFLOE_DATABASE_URL", postgres_dsn)
    monkeypatch.setenv("ICEFLOE_DATABASE_SCHEMA", schema_name)
    monkeypatch.setenv("ICEFLOE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ICEFLOE_WAREHOUSE", raising=False)
    assert main(["init"], out=io.StringIO()) == 0
    return schema_name


def run(monkeypatch: pytest.MonkeyPatch, stderr: Stderr, *argv: str) -> tuple[str, str]:
    """Run one command with stderr a terminal or a pipe: (stdout, what stderr received)."""
    err = io.StringIO() if stderr == "pipe" else _Terminal()
    monkeypatch.setattr("sys.stderr", err)
    out = io.StringIO()
    json_output = ("--format", "json") if stderr == "terminal+json" else ()
    assert main([*argv, *json_output], out=out) == 0, err.getvalue()
    return out.getvalue(), err.getvalue()


def create_table(name: str) -> None:
    argv = ["table", "create", name, "--schema", SCHEMA, "--partition-by", "day(ts)"]
    assert main(argv, out=io.StringIO()) == 0


def insert_small_files(name: str, tmp_path: Path, *, inserts: int) -> None:
    """Inserts of one row into each of two days: small files for a merge or a compaction,
    ``inserts`` of them in each day's partition."""
    for n in range(inserts):
        source = tmp_path / f"{name}-{n}.ndjson"
        rows = [{"ts": f"2026-03-0{day}T00:00:{n:02}", "event": "e"} for day in (1, 2)]
        source.write_text("\n".join(json.dumps(row) for row in rows))
        assert main(["insert", name, str(source)], out=io.StringIO()) == 0


def big_input(tmp_path: Path) -> Path:
    """Six rows of long strings: a file past the progress threshold that loads quickly."""
    path = tmp_path / "big.ndjson"
    rows = [{"ts": "2026-03-01T00:00:00", "event": str(n) * PAD_BYTES} for n in range(6)]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    assert path.stat().st_size >= INSERT_PROGRESS_MIN_BYTES
    return path


def same_text(a: str, b: str, *, tables: tuple[str, str]) -> bool:
    """Two commands' text output alike but for their table's name and their timings."""

    def plain(text: str, table: str) -> str:
        return re.sub(r"\d+\.\d s\b", "<t> s", text.replace(table, "<table>"))

    return plain(a, tables[0]) == plain(b, tables[1])


def test_a_large_insert_shows_its_stages_on_a_terminal_and_nothing_else_changes(
    cli_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = big_input(tmp_path)
    size = f"{source.stat().st_size / 1e6:,.1f} MB"
    for table in ("on_terminal", "on_pipe", "as_json"):
        create_table(table)

    on_terminal, drawn = run(monkeypatch, "terminal", "insert", "on_terminal", str(source))
    on_pipe, piped = run(monkeypatch, "pipe", "insert", "on_pipe", str(source))
    as_json, json_err = run(monkeypatch, "terminal+json", "insert", "as_json", str(source))

    assert f"\rinserting big.ndjson ({size}): loading, step 1/3" in drawn
    assert f"\rinserting big.ndjson ({size}): writing, step 2/3" in drawn
    assert f"\rinserting big.ndjson ({size}): committing, step 3/3" in drawn
    last = drawn.split("\r")[-1]
    assert re.fullmatch(
        rf"inserting big\.ndjson \({size}\): done in \d+\.\d s, [\d.,]+ MB/s *\n", last
    )
    assert piped == "" and json_err == ""
    assert on_terminal == "inserted 6 rows into on_terminal: snapshot 1, 1 file in 1 partition\n"
    assert same_text(on_terminal, on_pipe, tables=("on_terminal", "on_pipe"))
    assert json.loads(as_json)["rows"] == 6


def test_a_large_insert_from_stdin_counts_the_bytes_read_then_shows_the_stages(
    cli_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = big_input(tmp_path)
    size = f"{source.stat().st_size / 1e6:,.1f} MB"
    create_table("events")
    with source.open("rb") as redirected:  # `icefloe insert events - < big.ndjson`: size known
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(redirected))
        printed, drawn = run(monkeypatch, "terminal", "insert", "events", "-")
    # `cat big.ndjson | icefloe insert events -`: no size until the bytes read pass the threshold
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(source.read_bytes())))
    piped_in, drawn_for_a_pipe = run(monkeypatch, "terminal", "insert", "events", "-")

    assert printed == "inserted 6 rows into events: snapshot 1, 1 file in 1 partition\n"
    assert piped_in == "inserted 6 rows into events: snapshot 2, 1 file in 1 partition\n"
    for text in (drawn, drawn_for_a_pipe):
        assert f"\rinserting stdin ({size}): loading, step 2/4" in text
        assert f"\rinserting stdin ({size}): committing, step 4/4" in text
        assert text.split("\r")[-1].startswith(f"inserting stdin ({size}): done in ")


def test_an_insert_under_the_threshold_draws_nothing_even_on_a_terminal(
    cli_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_table("events")
    source = tmp_path / "small.ndjson"
    source.write_text(json.dumps({"ts": "2026-03-01T00:00:00", "event": "e"}))
    printed, drawn = run(monkeypatch, "terminal", "insert", "events", str(source))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(source.read_bytes())))
    from_stdin, drawn_for_stdin = run(monkeypatch, "terminal", "insert", "events", "-")

    assert printed.startswith("inserted 1 rows into events: snapshot 1")
    assert from_stdin.startswith("inserted 1 rows into events: snapshot 2")
    assert drawn == "" and drawn_for_stdin == ""


def test_merge_wait_shows_groups_done_of_planned_per_round_on_a_terminal_only(
    cli_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for table in ("on_terminal", "on_pipe", "as_json"):
        create_table(table)
        insert_small_files(table, tmp_path, inserts=4)  # a merge takes 4 files or more

    on_terminal, drawn = run(monkeypatch, "terminal", "merge", "on_terminal", "--wait")
    on_pipe, piped = run(monkeypatch, "pipe", "merge", "on_pipe", "--wait")
    as_json, json_err = run(monkeypatch, "terminal+json", "merge", "as_json", "--wait")

    assert re.search(r"\rmerging \(round 1\) \[#+\] 100% 2/2 groups [\d,]+ groups/s ETA 0s", drawn)
    assert drawn.endswith("\n") and "\n" not in drawn[:-1]  # one round merged all: one bar
    assert piped == "" and json_err == ""
    assert on_terminal.startswith("2 merges in ")
    assert same_text(on_terminal, on_pipe, tables=("on_terminal", "on_pipe"))
    assert json.loads(as_json)["merges"] == 2


def test_compact_shows_partitions_done_on_a_terminal_only(
    cli_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for table in ("on_terminal", "on_pipe", "as_json"):
        create_table(table)
        insert_small_files(table, tmp_path, inserts=2)

    argv = ("--engine", "duckdb")
    on_terminal, drawn = run(monkeypatch, "terminal", "compact", "on_terminal", *argv)
    on_pipe, piped = run(monkeypatch, "pipe", "compact", "on_pipe", *argv)
    as_json, json_err = run(monkeypatch, "terminal+json", "compact", "as_json", *argv)

    assert "\rcompacting (duckdb) [" in drawn and "100% 2/2 partitions" in drawn
    assert "partitions/s ETA 0s" in drawn and drawn.endswith("\n")
    assert piped == "" and json_err == ""
    assert "committed, 2 files -> 1" in on_terminal
    assert same_text(on_terminal, on_pipe, tables=("on_terminal", "on_pipe"))
    assert len(json.loads(as_json)["partitions"]) == 2


def test_gc_shows_tables_collected_and_files_deleted_on_a_terminal_only(
    cli_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for table in ("on_terminal", "on_pipe", "as_json"):
        create_table(table)
        insert_small_files(table, tmp_path, inserts=4)  # a merge takes 4 or more
        assert main(["merge", table, "--wait"], out=io.StringIO()) == 0  # 8 files now dead

    argv = ("--retention", "0s")
    on_terminal, drawn = run(monkeypatch, "terminal", "gc", "on_terminal", *argv)
    on_pipe, piped = run(monkeypatch, "pipe", "gc", "on_pipe", *argv)
    as_json, json_err = run(monkeypatch, "terminal+json", "gc", "as_json", *argv)

    last = drawn.split("\r")[-1]
    assert re.fullmatch(
        r"collecting \[#+\] 100% 1/1 tables [\d,]+ tables/s ETA 0s 8 files deleted \n", last
    )
    assert piped == "" and json_err == ""
    assert "deleted 8 dead files" in on_terminal
    assert same_text(on_terminal, on_pipe, tables=("on_terminal", "on_pipe"))
    assert json.loads(as_json)["tables"][0]["files_deleted"] == 8
