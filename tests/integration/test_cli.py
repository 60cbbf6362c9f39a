"""The `icefloe` command line against a real Postgres: output shapes and one-line errors."""

from __future__ import annotations

import io
import json
import logging
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq
import pytest
from moto import mock_aws

from icefloe.cli import EXIT_ERROR, EXIT_USAGE, build_parser, long_options, main, subcommands
from icefloe.cli.reads import query_text
from icefloe.errors import InvalidInputError, SnapshotNotFoundError
from icefloe.metastore.store import MetaStore
from icefloe.settings import VARIABLES
from support.aws import FAKE_AWS_ENVIRONMENT, REGION, UNSET_AWS_VARIABLES
from support.files import new_file

pytestmark = pytest.mark.integration

SCHEMA = "ts TIMESTAMP NOT NULL, event VARCHAR, user_id VARCHAR, properties JSON"


@pytest.fixture
def cli_env(
    monkeypatch: pytest.MonkeyPatch, postgres_dsn: str, schema_name: str, tmp_path: Path
) -> str:
    monkeypatch.setenv("ICEFLOE_DATABASE_URL", postgres_dsn)
    monkeypatch.setenv("ICEFLOE_DATABASE_SCHEMA", schema_name)
    monkeypatch.setenv("ICEFLOE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ICEFLOE_WAREHOUSE", raising=False)
    return schema_name


def run(*argv: str) -> tuple[int, str]:
    """The exit code and what the command printed: argparse exits (SystemExit) on a command
    line it refuses, as in the shell."""
    out = io.StringIO()
    try:
        code = main(list(argv), out=out)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else EXIT_ERROR
    return code, out.getvalue()


def create_events(*extra: str) -> None:
    code, _ = run(
        "table", "create", "events", "--schema", SCHEMA, "--partition-by", "day(ts)",
        "--sort-by", "event, ts", "--row-group-by", "user_id", *extra,
    )  # fmt: skip
    assert code == 0


def insert_batches(tmp_path: Path, *, batches: int, days: tuple[int, ...]) -> None:
    """``batches`` NDJSON inserts into ``events``, batch n holding one row at hour n of each
    of ``days`` (of March 2026)."""
    for n in range(batches):
        source = tmp_path / f"batch{n}.ndjson"
        source.write_text(
            "\n".join(
                json.dumps({"ts": f"2026-03-0{day}T0{n}:00:00", "event": "e", "user_id": "u"})
                for day in days
            )
        )
        assert run("insert", "events", str(source))[0] == 0


def test_init_create_list_show_and_status(cli_env: str) -> None:
    assert run("init")[0] == 0
    create_events()

    code, listing = run("table", "list", "--format", "json")
    assert code == 0
    (table,) = json.loads(listing)
    assert table["name"] == "events" and table["head_snapshot_id"] == 0
    assert table["spec"]["sort_by"] == ["event", "ts"]
    assert table["spec"]["row_group_by"] == "user_id"

    code, shown = run("table", "show", "events")
    assert code == 0 and "partition by" in shown and "day(ts)" in shown

    code, status = run("status", "--format", "json")
    assert code == 0
    assert json.loads(status) == [
        {
            "table": "events",
            "head_snapshot_id": 0,
            "live_files": 0,
            "partitions": 0,
            "rows": 0,
            "bytes": 0,
            "claimed_files": 0,
            "claimed_until": None,
            "published": [],
        }
    ]


def test_snapshots_and_status_reflect_commits(cli_env: str, postgres_dsn: str) -> None:
    run("init")
    create_events()
    with MetaStore(postgres_dsn, schema=cli_env) as meta:
        meta.commit_append("events", files=[new_file("a", rows=3, size=30)])
        meta.commit_append("events", files=[new_file("b", rows=4, size=40)], idempotency_key="k")

    code, out = run("snapshots", "events", "--format", "json")
    assert code == 0
    snaps = json.loads(out)
    assert [s["snapshot_id"] for s in snaps] == [1, 2]
    assert [s["operation"] for s in snaps] == ["append", "append"]
    assert all(isinstance(s["committed_at"], str) for s in snaps)
    assert snaps[1]["idempotency_key"] == "k"

    code, out = run("status", "events", "--format", "json")
    (status,) = json.loads(out)
    assert (status["live_files"], status["partitions"], status["rows"], status["bytes"]) == (
        2,
        1,
        7,
        70,
    )


def test_create_if_not_exists_keeps_the_existing_table(cli_env: str) -> None:
    run("init")
    create_events()
    create_events("--if-not-exists")
    code, out = run("table", "list", "--format", "json")
    assert code == 0
    assert len(json.loads(out)) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["table", "create", "../x", "--schema", "a INTEGER"], "table name '../x'"),
        (["table", "create", "x;drop", "--schema", "a INTEGER"], "table name 'x;drop'"),
        (["table", "create", "x", "--schema", "a INTT"], "'INTT'"),
        (["table", "create", "x", "--schema", "a INTEGER", "--sort-by", "b"], "sort_by"),
        (["table", "create", "x", "--schema", "a INTEGER", "--partition-by", "day(a)"], "day"),
        (["table", "create", "x", "--schema", "a INTEGER", "--merge", "upsert"], "upsert"),
        (["table", "create", "events", "--schema", "a INTEGER"], "exists already"),
        (["table", "create", "x"], "needs --schema (or --preset)"),
        (["table", "create", "x", "--preset", "segment", "--schema", "a INTEGER"], "not both"),
        (["table", "show", "nope"], "no table named 'nope'"),
        (["insert", "nope", "-"], "no table named 'nope'"),
        (["insert", "events", "/no/such/file.ndjson"], "cannot read input file"),
        (["snapshots", "nope"], "no table named 'nope'"),
        (["status", "nope"], "no table named 'nope'"),
    ],
)
def test_bad_input_exits_non_zero_with_one_line_naming_the_fault(
    cli_env: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    run("init")
    create_events()
    capsys.readouterr()
    code, out = run(*argv)
    err = capsys.readouterr().err
    assert code != 0 and out == ""
    assert err.startswith("icefloe: error: ") and err.count("\n") == 1
    assert message in err


def test_commands_before_init_say_to_run_init(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run("status")
    err = capsys.readouterr().err
    assert code != 0 and "run `icefloe init`" in err and err.count("\n") == 1


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["insert", "events"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith("icefloe: error: ") and "source" in err and err.count("\n") == 1


def test_a_bad_environment_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ICEFLOE_WAREHOUSE", "ftp://nowhere")
    code, _ = run("status")
    err = capsys.readouterr().err
    assert code != 0 and "ICEFLOE_WAREHOUSE" in err and err.count("\n") == 1


@pytest.fixture
def secret_env(cli_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``cli_env`` with the meta store named by a secret only (moto), as on a deployed stack."""
    for name in UNSET_AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_AWS_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("ICEFLOE_DATABASE_URL")
    with mock_aws():
        yield cli_env


def test_a_deployed_meta_store_is_reached_through_its_secret(
    secret_env: str, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the README's deploy guide does: init and register tables through the stack's secret.
    secrets = boto3.client("secretsmanager", region_name=REGION)
    arn = secrets.create_secret(Name="icefloe-db", SecretString=json.dumps({"dsn": postgres_dsn}))
    monkeypatch.setenv("ICEFLOE_DATABASE_SECRET_ARN", arn["ARN"])
    assert run("init")[0] == 0
    create_events()
    code, out = run("table", "list", "--format", "json")
    assert code == 0 and [t["name"] for t in json.loads(out)] == ["events"]
    # The tables are in the database the secret names.
    with MetaStore(postgres_dsn, schema=secret_env) as meta:
        assert meta.get_table("events").name == "events"


def test_a_missing_secret_is_a_one_line_error_naming_it(
    secret_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:icefloe-nope-AbCdEf"
    monkeypatch.setenv("ICEFLOE_DATABASE_SECRET_ARN", arn)
    code, _ = run("init")
    err = capsys.readouterr().err
    assert code != 0 and arn in err and err.count("\n") == 1


def test_insert_from_a_file_and_stdin_with_an_idempotency_key(
    cli_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run("init")
    create_events()
    source = tmp_path / "events.ndjson"
    source.write_text(
        "\n".join(
            json.dumps({"ts": f"2026-06-0{d}T10:00:00Z", "event": "e", "user_id": "u"})
            for d in (1, 2, 3)
        )
    )
    code, out = run("insert", "events", str(source), "--idempotency-key", "k", "--format", "json")
    assert code == 0
    result = json.loads(out)
    assert result["committed"] and result["rows"] == 3 and result["partitions"] == 3

    code, out = run("insert", "events", str(source), "--idempotency-key", "k")
    assert code == 0 and "already committed as snapshot 1" in out

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(source.read_bytes())))
    code, out = run("insert", "events", "-")
    assert code == 0 and "inserted 3 rows into events: snapshot 2" in out
    code, out = run("status", "events", "--format", "json")
    assert json.loads(out)[0]["rows"] == 6


def test_segment_preset_keeps_unknown_fields_in_extra(cli_env: str, tmp_path: Path) -> None:
    run("init")
    code, _ = run("table", "create", "seg", "--preset", "segment")
    assert code == 0
    code, out = run("table", "show", "seg", "--format", "json")
    spec = json.loads(out)["spec"]
    assert spec["merge"] == {"mode": "replace", "key": ["messageId"], "version": None}
    assert spec["sort_by"] == ["event", "timestamp"]
    assert spec["partition_by"][0]["source"] == "timestamp"
    payload = {
        "messageId": "m-1",
        "timestamp": "2026-11-22T10:00:00.000Z",
        "type": "track",
        "event": "Signed Up",
        "userId": "u1",
        "anonymousId": None,
        "properties": {"plan": "pro"},
        "context": {"ip": "1.1.1.1"},
        "receivedAt": "2026-11-22T10:00:01.000Z",
        "integrations": {},
    }
    source = tmp_path / "segment.json"
    source.write_text(json.dumps([payload]))
    code, out = run("insert", "seg", str(source), "--format", "json")
    assert code == 0 and json.loads(out)["rows"] == 1
    (written,) = (tmp_path / "home" / "warehouse" / "seg").rglob("*.parquet")
    row = pq.read_table(written).to_pylist()[0]
    assert row["messageId"] == "m-1" and row["anonymousId"] is None
    assert json.loads(row["extra"]) == {
        "receivedAt": "2026-11-22T10:00:01.000Z",
        "integrations": {},
    }
    assert json.loads(row["properties"]) == {"plan": "pro"}


def test_query_and_files_print_json_rows_keyed_by_column(cli_env: str, tmp_path: Path) -> None:
    run("init")
    create_events()
    source = tmp_path / "events.ndjson"
    source.write_text(
        "\n".join(
            json.dumps({"ts": f"2026-06-0{d}T10:00:00Z", "event": e, "user_id": "u"})
            for d in (1, 2)
            for e in ("a", "b", "b")
        )
    )
    assert run("insert", "events", str(source))[0] == 0

    code, out = run(
        "query",
        "SELECT event, count(*) AS n FROM events WHERE ts < '2026-06-02' GROUP BY event ORDER BY event",
        "--format",
        "json",
    )
    assert code == 0
    assert json.loads(out) == [{"event": "a", "n": 1}, {"event": "b", "n": 2}]

    code, out = run(
        "query", "SELECT count(*) AS n FROM events", "--snapshot", "1", "--format", "csv"
    )
    assert code == 0 and out.splitlines() == ['"n"', "6"]

    parquet = tmp_path / "out.parquet"
    code, _ = run("query", "SELECT * FROM events", "--format", "parquet", "--output", str(parquet))
    assert code == 0 and pq.read_table(parquet).num_rows == 6

    code, out = run("files", "events", "--format", "json")
    files = json.loads(out)
    assert code == 0 and len(files) == 2
    assert {f["partition"] for f in files} == {"day=2026-06-01", "day=2026-06-02"}
    assert all(Path(f["path"]).is_absolute() and Path(f["path"]).exists() for f in files)
    assert sum(f["row_count"] for f in files) == 6 and all(f["size_bytes"] > 0 for f in files)


def test_query_reads_a_long_select_from_a_file_or_stdin(
    cli_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run("init")
    create_events()
    source = tmp_path / "events.ndjson"
    source.write_text(
        "\n".join(
            json.dumps({"ts": f"2026-06-01T10:0{n}:00Z", "event": e, "user_id": f"u{n}"})
            for n, e in enumerate(["view", "view", "signup"])
        )
    )
    assert run("insert", "events", str(source))[0] == 0
    sql = (
        "-- events per kind\nSELECT event,\n       count(*) AS n\nFROM events\n"
        "GROUP BY event\nORDER BY event;\n"
    )
    query = tmp_path / "per_kind.sql"
    query.write_text(sql)
    code, out = run("query", "-f", str(query), "--format", "json")
    assert code == 0 and json.loads(out) == [{"event": "signup", "n": 1}, {"event": "view", "n": 2}]

    monkeypatch.setattr("sys.stdin", io.StringIO(sql))
    code, out = run("query", "--file", "-", "--format", "csv")
    assert code == 0 and out.splitlines() == ['"event","n"', '"signup",1', '"view",2']

    query.write_text("  \n")
    with pytest.raises(InvalidInputError, match="is empty"):
        query_text(sql=None, sql_file=str(query))


def test_query_stats_report_each_table_read_on_stderr_as_json_lines(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run("init")
    create_events()
    run("table", "create", "users", "--schema", "user_id VARCHAR, plan VARCHAR")
    source = tmp_path / "events.ndjson"
    source.write_text(
        "\n".join(
            json.dumps({"ts": f"2026-06-0{d}T10:00:00Z", "event": "a", "user_id": f"u{d}"})
            for d in (1, 2, 3)
        )
    )
    assert run("insert", "events", str(source))[0] == 0
    users = tmp_path / "users.ndjson"
    users.write_text(json.dumps({"user_id": "u1", "plan": "pro"}))
    assert run("insert", "users", str(users))[0] == 0
    files = {
        f["partition"]: f["size_bytes"]
        for f in json.loads(run("files", "events", "--format", "json")[1])
    }
    heads = {
        t["name"]: t["head_snapshot_id"]
        for t in json.loads(run("table", "list", "--format", "json")[1])
    }
    capsys.readouterr()

    # A day's predicate prunes to one of three files; a self-join reads events through one
    # view; the joined table is reported on its own line
    sql = (
        "SELECT e.user_id, u.plan FROM events e JOIN events f USING (user_id)"
        " LEFT JOIN users u USING (user_id) WHERE e.ts >= '2026-06-02' AND e.ts < '2026-06-03'"
    )
    plain_code, plain_out = run("query", sql, "--format", "json")
    assert capsys.readouterr().err == ""  # no stats unless asked
    code, out = run("query", sql, "--format", "json", "--stats")
    err = capsys.readouterr().err

    assert code == 0 == plain_code and out == plain_out  # stdout unchanged
    lines = [json.loads(line) for line in err.splitlines()]
    by_table = {line["table"]: line for line in lines}
    assert len(lines) == len(by_table) == 2
    assert by_table["users"] == {
        "table": "users", "snapshot_id": heads["users"], "files_considered": 1,
        "files_scanned": 1, "bytes_scanned": by_table["users"]["bytes_scanned"],
    }  # fmt: skip
    assert by_table["users"]["bytes_scanned"] > 0
    events = by_table["events"]
    assert events["snapshot_id"] == heads["events"] and events["files_considered"] == 3
    # The self-join's other side has no day predicate, so the view reads what both need
    assert 1 <= events["files_scanned"] <= 3
    assert events["bytes_scanned"] <= sum(files.values())

    # Statistics prune to one of the three files the snapshot holds: exactly that file's bytes
    code, _ = run("query", "SELECT count(*) FROM events WHERE user_id = 'u2'", "--stats")
    (one,) = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert code == 0 and (one["files_considered"], one["files_scanned"]) == (3, 1)
    assert one["bytes_scanned"] == files["day=2026-06-02"]

    # A time range narrows the listing itself: one file considered
    code, _ = run(
        "query",
        "SELECT count(*) FROM events WHERE ts >= '2026-06-03' AND ts < '2026-06-04'",
        "--stats",
    )
    (one,) = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert code == 0 and (one["files_considered"], one["files_scanned"]) == (1, 1)
    assert one["bytes_scanned"] == files["day=2026-06-03"]

    # Only the duckdb engine reports its pruning
    code, _ = run("query", "SELECT 1", "--engine", "spark", "--stats")
    assert code != 0 and "--stats needs the duckdb engine" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["query", "SELECT * FROM read_csv('/etc/passwd')"], "read_csv() is not allowed"),
        (["query", "DROP TABLE events"], "DROP statements are not allowed"),
        (["query", "SELECT nope FROM events"], "nope"),
        (["query", "SELECT 1", "--format", "parquet"], "needs --output"),
        (["query"], "give the SELECT as an argument, or with -f FILE"),
        (["query", "SELECT 1", "-f", "q.sql"], "not both"),
        (["query", "-f", "/no/such/query.sql"], "cannot read the query from /no/such/query.sql"),
        (["files", "nope"], "no table named 'nope'"),
    ],
)
def test_query_errors_are_one_line(
    cli_env: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    run("init")
    create_events()
    capsys.readouterr()
    code, _ = run(*argv)
    err = capsys.readouterr().err
    assert code != 0 and message in err and err.count("\n") == 1


def test_merge_until_quiet_through_the_in_process_queue(cli_env: str, tmp_path: Path) -> None:
    # Given six small inserts into one day
    assert run("init")[0] == 0
    create_events()
    for n in range(6):
        source = tmp_path / f"batch{n}.ndjson"
        source.write_text(
            "\n".join(
                json.dumps({"ts": f"2026-03-01T0{n}:00:0{i}", "event": "e", "user_id": f"u{i}"})
                for i in range(5)
            )
        )
        assert run("insert", "events", str(source))[0] == 0

    # When merging with --wait
    code, out = run("merge", "events", "--wait", "--format", "json")

    # Then one merge took six files to one, keeping every row
    assert code == 0
    report = json.loads(out)
    assert report["merges"] == 1 and report["failed"] == 0
    assert (report["files_in"], report["files_out"]) == (6, 1)
    assert report["rows_in"] == report["rows_out"] == 30
    code, files = run("files", "events", "--format", "json")
    assert code == 0 and len(json.loads(files)) == 1
    # And a second run finds nothing to do, saying so in one line
    code, text = run("merge")
    assert code == 0 and text.startswith("0 merges in 1 round")


def test_merge_runs_as_many_merges_at_once_as_the_settings_say(
    cli_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given settings that allow two merges at once, and small inserts into three days
    monkeypatch.setenv("ICEFLOE_MERGE_LOCAL_WORKERS", "2")
    assert run("init")[0] == 0
    create_events()
    insert_batches(tmp_path, batches=6, days=(1, 2, 3))

    # When merging with --wait
    caplog.set_level(logging.INFO, logger="icefloe")
    code, out = run("merge", "events", "--wait", "--format", "json")

    # Then the three merges ran on two worker threads
    assert code == 0 and json.loads(out)["merges"] == 3
    threads = {r.threadName for r in caplog.records if r.getMessage().startswith("merge committed")}
    assert len(threads) == 2 and all(t.startswith("merge-worker") for t in threads), threads


def test_merge_of_an_unknown_table_is_a_one_line_error(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("init")[0] == 0
    assert run("merge", "nope")[0] == 1
    assert capsys.readouterr().err.strip() == "icefloe: error: no table named 'nope'"


def test_gc_dry_run_then_gc_with_retention_zero(cli_env: str, tmp_path: Path) -> None:
    # Given six inserts merged into one file: six dead files
    assert run("init")[0] == 0
    create_events()
    for n in range(6):
        source = tmp_path / f"batch{n}.ndjson"
        source.write_text(
            json.dumps({"ts": f"2026-03-01T0{n}:00:00", "event": "e", "user_id": "u"}) + "\n"
        )
        assert run("insert", "events", str(source))[0] == 0
    assert run("merge", "--wait")[0] == 0
    warehouse = tmp_path / "home" / "warehouse"
    before = sorted(p for p in warehouse.rglob("*.parquet"))
    assert len(before) == 7

    # A dry run lists what it would delete and deletes nothing
    code, text = run("gc", "events", "--retention", "0s", "--dry-run")
    assert code == 0
    assert "6 snapshots would expire; would delete 6 dead files" in text
    assert text.count("  dead   events/data/") == 6
    assert sorted(warehouse.rglob("*.parquet")) == before

    # The real run deletes exactly those six
    code, out = run("gc", "events", "--retention", "0s", "--format", "json")
    assert code == 0
    report = json.loads(out)
    assert report["files_deleted"] == 6 and report["snapshots_expired"] == 6
    assert len(list(warehouse.rglob("*.parquet"))) == 1
    code, rows = run("query", "SELECT count(*) AS n FROM events", "--format", "json")
    assert json.loads(rows) == [{"n": 6}]


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["gc", "--retention", "soon"], EXIT_USAGE, "argument --retention: 'soon' is not a"),
        (["gc", "--orphan-grace", "10m"], EXIT_USAGE, "--orphan-grace: 10m is shorter than 1h"),
        (["gc", "nope"], EXIT_ERROR, "no table named 'nope'"),
    ],
)
def test_gc_refuses_bad_options_in_one_line(
    cli_env: str, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    assert run("init")[0] == 0
    assert run(*argv)[0] == code
    err = capsys.readouterr().err.strip()
    assert err.startswith("icefloe: error: ") and message in err and "\n" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # A partition the table does not have, named (not "nothing to compact")
        (["compact", "plain", "--partition", "nosuch=1"], "table 'plain' is not partitioned"),
        (["compact", "events", "--partition", "nosuch=1"], "table 'events' has no such partition"),
        (["compact", "events", "--partition", "day=2026-03-1"], "did you mean 'day=2026-03-01'?"),
        (
            ["compact", "events", "--partition", "day=2026-03-01", "--partition", "day=2026-03-09"],
            "--partition 'day=2026-03-09': table 'events' has no such partition",
        ),
        # An unknown (or empty) table name is refused by every command
        (["deletes", "nosuch"], "no table named 'nosuch'"),
        (["deletes", ""], "no table named ''"),
        (["status", ""], "no table named ''"),
        (["merge", ""], "no table named ''"),
        (["gc", ""], "no table named ''"),
        # A snapshot pins one table, in the CLI's own words
        (["query", "SELECT 1", "--snapshot", "1"], "--snapshot 1 pins the one table a query"),
        (["query", "SELECT 1 FROM events, plain", "--snapshot", "1"], "reads none or several"),
        (["query", "SELECT 1 FROM events", "--snapshot", "9"], "table 'events' has no snapshot 9"),
    ],
)
def test_a_request_the_lake_refuses_exits_1_naming_the_fault(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert run("init")[0] == 0
    create_events()
    assert run("table", "create", "plain", "--schema", "ts TIMESTAMP, n BIGINT")[0] == 0
    insert_batches(tmp_path, batches=2, days=(1, 2))
    capsys.readouterr()

    code, out = run(*argv)

    err = capsys.readouterr().err
    assert code == EXIT_ERROR and out == ""
    assert err.startswith("icefloe: error: ") and err.count("\n") == 1
    assert message in err, err
    assert "as_of" not in err


def test_table_alter_refuses_a_rename_to_the_name_it_has_and_commits_nothing(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("init")[0] == 0
    code, _ = run("table", "create", "t", "--schema", "n BIGINT, ctx STRUCT(ip VARCHAR)")
    assert code == 0
    capsys.readouterr()

    for rename, what in (("n=n", "column n to n"), ("ctx.ip=ctx.ip", "field ctx.ip to ctx.ip")):
        assert run("table", "alter", "t", "--rename-column", rename)[0] == EXIT_ERROR
        assert capsys.readouterr().err.strip() == (
            f"icefloe: error: alter 't': cannot rename {what}: that is its name already"
            " (nothing would change)"
        )
    # A field's new name stays in its struct: "ip" is ctx.ip still
    assert run("table", "alter", "t", "--rename-column", "ctx.ip=ip")[0] == EXIT_ERROR
    assert "that is its name already" in capsys.readouterr().err
    # A column that is not there is named as such
    assert run("table", "alter", "t", "--rename-column", "nope=nope")[0] == EXIT_ERROR
    assert "no such column" in capsys.readouterr().err

    # Nothing was committed: no snapshot, schema version 1
    assert json.loads(run("snapshots", "t", "--format", "json")[1]) == []
    assert json.loads(run("table", "show", "t", "--format", "json")[1])["spec"]["version"] == 1
    code, text = run("table", "alter", "t", "--rename-column", "ctx.ip=client_ip")
    assert code == 0 and "schema version 2" in text and "client_ip" in text


def test_time_travel_before_the_first_snapshot_says_so(cli_env: str, postgres_dsn: str) -> None:
    assert run("init")[0] == 0
    create_events()
    as_of = datetime(2000, 1, 1, tzinfo=UTC)
    with (
        MetaStore(postgres_dsn, schema=cli_env) as meta,
        pytest.raises(SnapshotNotFoundError) as refused,
    ):
        meta.resolve_snapshot("events", as_of=as_of)
    assert str(refused.value) == f"table 'events' has no snapshot as of {as_of}"


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_compact_one_partition_with_either_engine(
    cli_env: str, tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    if engine == "spark":
        request.getfixturevalue("spark")  # the run's shared session
    assert run("init")[0] == 0
    create_events()
    insert_batches(tmp_path, batches=3, days=(1, 2))

    code, out = run(
        "compact", "events", "--partition", "day=2026-03-01", "--engine", engine, "--format", "json"
    )

    assert code == 0
    (outcome,) = json.loads(out)["partitions"]
    assert outcome["partition_path"] == "day=2026-03-01" and outcome["status"] == "committed"
    assert (outcome["files_in"], outcome["files_out"], outcome["rows_out"]) == (3, 1, 3)
    code, files = run("files", "events", "--format", "json")
    partitions = sorted(f["partition"] for f in json.loads(files))
    assert partitions == ["day=2026-03-01", *["day=2026-03-02"] * 3]
    # Nothing left to compact there now
    code, text = run("compact", "events", "--partition", "day=2026-03-01")
    assert code == 0 and text.startswith("nothing to compact")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("COPY events TO '/tmp/x.csv'", "COPY"),
        ("ATTACH '/tmp/x.db' AS x", "ATTACH"),
        ("PRAGMA database_list", "PRAGMA"),
        ("SELECT * FROM events; SELECT * FROM events", "one statement"),
        ("merge them please", "syntax error"),
        ("SELECT ts, event FROM events", "user_id"),
        ("SELECT * FROM read_csv('/etc/passwd')", "refused"),
        # Queries a retried merge could answer differently: DuckDB's own function stability
        ("SELECT * FROM events WHERE random() < 0.5", "random() is VOLATILE"),
        ("SELECT * FROM events WHERE ts < now()", "now() is CONSISTENT_WITHIN_QUERY"),
        ("SELECT * FROM events WHERE ts < current_date", "current_date is CONSISTENT_WITHIN"),
        ("SELECT * FROM events USING SAMPLE 50%", "sample"),
    ],
)
def test_a_custom_merge_query_that_every_merge_would_refuse_is_refused_at_create(
    cli_env: str, capsys: pytest.CaptureFixture[str], query: str, message: str
) -> None:
    assert run("init")[0] == 0
    code, _ = run(
        "table", "create", "events", "--schema", SCHEMA, "--merge", f"sql:{query}"
    )  # fmt: skip
    assert code == 1
    error = capsys.readouterr().err
    assert "merge query" in error and message.lower() in error.lower(), error
    assert json.loads(run("table", "list", "--format", "json")[1]) == []


def test_a_custom_merge_query_over_the_tables_columns_is_accepted(cli_env: str) -> None:
    assert run("init")[0] == 0
    query = "sql:SELECT * FROM events WHERE event IS NOT NULL"
    assert run("table", "create", "events", "--schema", SCHEMA, "--merge", query)[0] == 0


def test_merge_wait_says_how_many_files_are_still_claimed_and_until_when(
    cli_env: str, postgres_dsn: str, tmp_path: Path
) -> None:
    # Given six inserts of one day, whose files a merger claimed and then died holding
    assert run("init")[0] == 0
    create_events()
    for n in range(6):
        source = tmp_path / f"batch{n}.ndjson"
        source.write_text(json.dumps({"ts": f"2026-03-01T0{n}:00:00", "event": "e"}) + "\n")
        assert run("insert", "events", str(source))[0] == 0
    with MetaStore(postgres_dsn, schema=cli_env) as meta:
        ids = [f.file_id for f in meta.files("events")]
        assert meta.claim_files("events", ids, lease=timedelta(hours=1)) is not None
        until = meta.status("events").claimed_until
    assert until is not None
    # When merge --wait runs, it finds nothing it may merge, and says why
    code, text = run("merge", "--wait")
    assert code == 0
    assert "0 merges" in text and "6 files still claimed" in text
    assert f"{until.astimezone(UTC):%Y-%m-%d %H:%M}" in text
    code, out = run("merge", "--wait", "--format", "json")
    report = json.loads(out)
    assert report["claimed_files"] == 6
    assert datetime.fromisoformat(report["claimed_until"]) == until.replace(microsecond=0)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ('{"ts": "10000-01-01T00:00:00", "event": "e"}', "row 0, field 'ts': expected a timestamp"),
        ('{"ts": "2026-03-01T00:00:00", "properties": {"x": NaN}}', "row 0, field 'properties'"),
        ('{"ts": "2026-03-01T00:00:00", "properties": {"x": [1,]}}', "row 0: invalid JSON"),
    ],
    ids=["year 10000", "NaN in JSON", "a trailing comma"],
)
def test_insert_refuses_a_bad_value_naming_it_and_writes_nothing(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, words: str
) -> None:
    assert run("init")[0] == 0
    create_events()
    source = tmp_path / "bad.ndjson"
    source.write_text(body + "\n")
    assert run("insert", "events", str(source))[0] == 1
    assert words in capsys.readouterr().err
    assert json.loads(run("snapshots", "events", "--format", "json")[1]) == []
    warehouse = tmp_path / "home" / "warehouse"
    assert not [p for p in warehouse.rglob("*") if p.is_file()]


def test_table_drop_then_create_again_then_gc_purges_the_dropped_one(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("init")[0] == 0
    create_events()
    source = tmp_path / "one.ndjson"
    source.write_text(json.dumps({"ts": "2026-03-01T00:00:00", "event": "e"}) + "\n")
    assert run("insert", "events", str(source))[0] == 0
    code, text = run("table", "drop", "events")
    assert code == 0 and text.startswith("dropped table events") and "3d" in text
    assert json.loads(run("table", "list", "--format", "json")[1]) == []
    assert run("table", "drop", "events")[0] == 1
    assert "no table named 'events'" in capsys.readouterr().err
    create_events()
    code, out = run("gc", "--retention", "0s", "--format", "json")
    assert code == 0 and json.loads(out)["tables_purged"] == ["events"]
    warehouse = tmp_path / "home" / "warehouse"
    assert not [p for p in warehouse.rglob("*.parquet")]


def test_rollback_to_an_earlier_snapshot_then_again_then_to_one_that_never_was(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("init")[0] == 0
    create_events()
    for n in range(3):
        source = tmp_path / f"b{n}.ndjson"
        source.write_text(json.dumps({"ts": f"2026-03-0{n + 1}T00:00:00", "event": "e"}) + "\n")
        assert run("insert", "events", str(source))[0] == 0

    code, out = run("rollback", "events", "--to-snapshot", "1", "--format", "json")

    assert code == 0
    assert json.loads(out) == {
        "table": "events",
        "to_snapshot": 1,
        "snapshot_id": 4,
        "committed": True,
        "files_kept": 1,
        "files_removed": 2,
        "files_restored": 0,
        "bytes_copied": 0,
        "rows": 1,
        "plans": 1,
    }
    assert json.loads(run("query", "SELECT count(*) AS n FROM events", "--format", "json")[1]) == [
        {"n": 1}
    ]
    assert "rollback to 1" in run("snapshots", "events")[1]
    code, text = run("rollback", "events", "--to-snapshot", "1")
    assert code == 0 and "already; nothing committed" in text
    assert run("rollback", "events", "--to-snapshot", "9")[0] == 1
    assert "events' has no snapshot 9 (its head is snapshot 4)" in capsys.readouterr().err


def six_rows_in_two_days(tmp_path: Path) -> None:
    """A fresh lake whose table events holds u1, u2 and u3 on 2026-03-01 and 2026-03-02."""
    assert run("init")[0] == 0
    create_events()
    source = tmp_path / "b.ndjson"
    source.write_text(
        "\n".join(
            json.dumps({"ts": f"2026-03-0{d}T00:00:00", "event": "e", "user_id": user})
            for d in (1, 2)
            for user in ("u1", "u2", "u3")
        )
        + "\n"
    )
    assert run("insert", "events", str(source))[0] == 0


def test_delete_dry_run_then_delete_then_a_refused_predicate(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    six_rows_in_two_days(tmp_path)

    code, text = run("delete", "events", "--where", "user_id = 'u2'", "--dry-run")
    assert code == 0 and text.startswith("events: would delete 2 rows in 2 of 2 files read")
    assert text.count("  rewrite  events/data/day=2026-03-0") == 2

    code, out = run("delete", "events", "--where", "user_id = 'u2'", "--format", "json")
    assert code == 0
    deleted = json.loads(out)
    assert (deleted["snapshot_id"], deleted["rows_deleted"], deleted["files_rewritten"]) == (
        2,
        2,
        2,
    )
    users = json.loads(
        run("query", "SELECT DISTINCT user_id FROM events ORDER BY 1", "--format", "json")[1]
    )
    assert users == [{"user_id": "u1"}, {"user_id": "u3"}]

    assert run("delete", "events", "--where", "user_id IN (SELECT 'u1')")[0] == 1
    assert "may not hold a subquery" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("where", "message"),
    [
        # Each of these once deleted rows it did not match, or ended in a traceback
        (
            "user_id = 'u1' OR current_query() LIKE '%W' || 'HERE NOT%'",
            "current_query() is VOLATILE in DuckDB",
        ),
        ("user_id = 'u3' AND current_connection_id() >= 0", "current_connection_id() is VOLATILE"),
        ("true) QUALIFY (row_number() OVER () = 1", "must be one boolean expression"),
        ("true) USING SAMPLE (1", "must be one boolean expression"),
        ("true) WINDOW w AS (", "is not one expression"),
    ],
)
def test_a_delete_refuses_a_predicate_that_could_decide_a_row_twice_or_leave_its_frame(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, message: str
) -> None:
    # Given six rows in two day partitions
    six_rows_in_two_days(tmp_path)
    capsys.readouterr()

    # When the delete is asked with the predicate
    code, out = run("delete", "events", "--where", where)

    # Then it is refused by name, with no traceback, and every row is still there
    err = capsys.readouterr().err
    assert (code, out) == (1, "") and message in err and "Traceback" not in err
    counted = run("query", "SELECT count(*) AS n FROM events", "--format", "json")[1]
    assert json.loads(counted) == [{"n": 6}]


def test_erasure_of_one_user_over_merged_and_spark_compacted_files(
    cli_env: str, tmp_path: Path, spark: object
) -> None:
    # Given u42's events over 7 days, in small files, merged files and Spark-compacted files
    assert run("init")[0] == 0
    create_events()
    users = ("u42", "u7", "u9")
    for n in range(4):
        source = tmp_path / f"batch{n}.ndjson"
        source.write_text(
            "\n".join(
                json.dumps({"ts": f"2026-03-0{day}T{n:02d}:{i:02d}:00", "event": "e", "user_id": u})
                for day in range(1, 8)
                for i, u in enumerate(users)
            )
        )
        assert run("insert", "events", str(source))[0] == 0
        if n == 1:
            assert run("merge", "--wait")[0] == 0
    code, _ = run("compact", "events", "--partition", "day=2026-03-07", "--engine", "spark")
    assert code == 0
    files = json.loads(run("files", "events", "--format", "json")[1])
    assert [f["partition"] for f in files].count("day=2026-03-07") == 1  # Spark's one file

    def counts() -> dict[str, int]:
        code, out = run(
            "query", "SELECT user_id, count(*) AS n FROM events GROUP BY 1", "--format", "json"
        )
        assert code == 0
        return {r["user_id"]: r["n"] for r in json.loads(out)}

    before = counts()
    assert before == {u: 28 for u in users}
    pinned = json.loads(run("snapshots", "events", "--format", "json")[1])[-1]["snapshot_id"]

    # When the user is deleted, then garbage is collected past the retention
    code, out = run("delete", "events", "--where", "user_id = 'u42'", "--format", "json")
    assert code == 0 and json.loads(out)["rows_deleted"] == 28
    assert counts() == {"u7": 28, "u9": 28}
    # (until then, time travel still sees the deleted rows)
    code, out = run(
        "query", "SELECT count(*) AS n FROM events WHERE user_id = 'u42'", "--snapshot",
        str(pinned), "--format", "json",
    )  # fmt: skip
    assert code == 0 and json.loads(out) == [{"n": 28}]
    assert run("gc", "events", "--retention", "0s")[0] == 0

    # Then no Parquet object under the warehouse holds a row of u42; the others are intact
    objects = sorted((tmp_path / "home" / "warehouse").rglob("*.parquet"))
    assert objects
    for path in objects:
        assert "u42" not in pq.read_table(path, columns=["user_id"]).column(0).to_pylist()
    assert counts() == {"u7": 28, "u9": 28}


def test_a_mistyped_command_or_table_gets_the_closest_name(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["tabel", "list"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().endswith("did you mean 'table'?")
    assert run("init")[0] == 0
    create_events()
    assert run("status", "evnts")[0] == 1
    assert capsys.readouterr().err.strip() == (
        "icefloe: error: no table named 'evnts'; did you mean 'events'?"
    )
    assert run("status", "zzz")[0] == 1
    assert "did you mean" not in capsys.readouterr().err


def test_every_command_takes_format_json(cli_env: str) -> None:
    code, out = run("init", "--format", "json")
    assert code == 0 and json.loads(out)["current_version"] >= 9
    code, out = run("demo", "--events", "50", "--batch-size", "25", "--format", "json")
    assert code == 0 and json.loads(out)["events"] == 50 and json.loads(out)["batches"] == 2
    code, out = run("db", "stop", "--format", "json")  # an external Postgres here: not ours
    assert code == 0 and json.loads(out) == {"stopped": False}
    parser = build_parser()
    missing = []
    for command, sub in subcommands(parser).items():
        for name, leaf in (subcommands(sub) or {"": sub}).items():
            if command != "completion" and "--format" not in long_options(leaf):
                missing.append(f"{command} {name}".strip())
    assert missing == []


def test_completion_scripts_complete_commands_subcommands_and_options(tmp_path: Path) -> None:
    code, script = run("completion", "bash")
    assert code == 0
    path = tmp_path / "icefloe.bash"
    path.write_text(script)
    probe = (
        f"source {path}\n"
        't() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _icefloe; echo "${COMPREPLY[*]}"; }\n'
        "t icefloe ro; t icefloe table d; t icefloe query x --format j; t icefloe completion z\n"
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["rollback", "drop", "json", "zsh"]
    code, zsh = run("completion", "zsh")
    assert code == 0 and zsh.startswith("autoload -U +X bashcompinit && bashcompinit\n")


def test_help_describes_icefloe_with_examples_and_the_environment(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert text.startswith("usage: icefloe") and "``" not in text
    assert "examples:\n  icefloe init" in text
    environment = text[text.index("environment:") :]
    for variable in VARIABLES:  # every variable the CLI reads, and no other
        assert (variable.name in environment) == ("cli" in variable.read_by), variable.name


def test_status_of_one_table_shows_each_partition_and_the_file_size_histogram(
    cli_env: str, tmp_path: Path
) -> None:
    assert run("init")[0] == 0
    create_events()
    for n in range(3):
        source = tmp_path / f"b{n}.ndjson"
        days = (1, 2) if n < 2 else (1,)
        source.write_text(
            "\n".join(json.dumps({"ts": f"2026-03-0{d}T0{n}:00:00", "event": "e"}) for d in days)
        )
        assert run("insert", "events", str(source))[0] == 0

    code, out = run("status", "events", "--format", "json")
    assert code == 0
    (status,) = json.loads(out)
    shapes = {p["partition_path"]: p for p in status["by_partition"]}
    assert {k: v["files"] for k, v in shapes.items()} == {"day=2026-03-01": 3, "day=2026-03-02": 2}
    assert all(sum(p["size_buckets"]) == p["files"] for p in shapes.values())
    assert shapes["day=2026-03-01"]["size_buckets"][0] == 3  # small files: under 64 KiB
    assert len(status["size_buckets_bytes"]) == len(shapes["day=2026-03-01"]["size_buckets"]) - 1

    code, text = run("status", "events")
    assert code == 0
    assert "day=2026-03-01  3      3     " in text and "█·······" in text
    assert "live file sizes:\n      <64K  " + "█" * 40 + " 5" in text


def test_query_with_the_spark_engine_answers_as_duckdb_does(
    cli_env: str, tmp_path: Path, spark: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("init")[0] == 0
    create_events()
    for n in range(3):
        source = tmp_path / f"b{n}.ndjson"
        source.write_text(
            "\n".join(
                json.dumps({"ts": f"2026-03-0{d}T0{n}:00:00", "event": e, "user_id": f"u{n}"})
                for d in (1, 2)
                for e in ("view", "click")[: n + 1]
            )
        )
        assert run("insert", "events", str(source))[0] == 0
    sql = (
        "SELECT event, count(*) AS n, count(DISTINCT user_id) AS users FROM events"
        " WHERE ts < '2026-03-02' GROUP BY event ORDER BY event"
    )
    code, duck_out = run("query", sql, "--format", "json")
    assert code == 0
    code, spark_out = run("query", sql, "--engine", "spark", "--format", "json")
    assert code == 0 and json.loads(spark_out) == json.loads(duck_out)
    assert json.loads(duck_out) == [
        {"event": "click", "n": 2, "users": 2},
        {"event": "view", "n": 3, "users": 3},
    ]
    # Pinned at the first snapshot, as the DuckDB engine would be
    code, first = run(
        "query",
        "SELECT count(*) AS n FROM events",
        "--engine",
        "spark",
        "--snapshot",
        "1",
        "--format",
        "json",
    )
    assert code == 0 and json.loads(first) == [{"n": 2}]
    assert run("query", "DROP TABLE events", "--engine", "spark")[0] == 1
    assert "DROP statements are not allowed; send one SELECT" in capsys.readouterr().err


def test_table_alter_applies_changes_in_order_and_refuses_by_name(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("init")[0] == 0
    create_events()
    source = tmp_path / "b.ndjson"
    source.write_text(json.dumps({"ts": "2026-03-01T00:00:00", "event": "e", "user_id": "u"}))
    assert run("insert", "events", str(source))[0] == 0

    code, out = run(
        "table", "alter", "events", "--drop-column", "properties", "--add-column",
        "properties INTEGER", "--rename-column", "event=kind", "--format", "json",
    )  # fmt: skip

    assert code == 0
    assert json.loads(out) == {
        "table": "events",
        "snapshot_id": 2,
        "spec_version": 2,
        "changes": [
            "drop column properties",
            "add column properties INTEGER",
            "rename column event to kind",
        ],
        "schema": "ts TIMESTAMP NOT NULL, kind VARCHAR, user_id VARCHAR, properties INTEGER",
    }
    query = "SELECT kind, user_id, properties FROM events"
    assert json.loads(run("query", query, "--format", "json")[1]) == [
        {"kind": "e", "user_id": "u", "properties": None}
    ]
    assert "alter" in run("snapshots", "events")[1]
    code, text = run("table", "alter", "events", "--widen", "kind BIGINT")
    assert code == 1
    assert "cannot widen column kind to BIGINT: VARCHAR to BIGINT is not a widening" in (
        capsys.readouterr().err
    )
    assert run("table", "alter", "events", "--drop-column", "user_id")[0] == 1
    assert "it is the row-group key" in capsys.readouterr().err
    assert run("table", "alter", "events")[0] == EXIT_USAGE
    assert "give at least one of --add-column" in capsys.readouterr().err
    code, text = run("table", "alter", "events", "--add-column", "n BIGINT")
    assert code == 0 and "schema version 3" in text and "n BIGINT" in text


def test_publish_iceberg_commits_the_head_then_nothing_when_asked_again(
    cli_env: str, tmp_path: Path
) -> None:
    assert run("init")[0] == 0
    create_events()
    source = tmp_path / "b.ndjson"
    source.write_text(json.dumps({"ts": "2026-03-01T00:00:00", "event": "e", "user_id": "u"}))
    assert run("insert", "events", str(source))[0] == 0

    code, out = run("publish", "iceberg", "events", "--format", "json")

    assert code == 0
    published = json.loads(out)
    assert (published["snapshot_id"], published["files_added"], published["files_live"]) == (
        1,
        1,
        1,
    )
    assert published["metadata_location"].startswith((tmp_path / "home" / "iceberg").as_uri())
    code, text = run("publish", "iceberg", "events")
    assert code == 0 and "snapshot 1 is published already (1 files)" in text


def test_a_published_table_survives_merge_and_gc_until_published_again_with_no_retention(
    cli_env: str, tmp_path: Path
) -> None:
    from icefloe.iceberg import NAMESPACE, local_catalog

    # Given a published table of small files, merged afterwards
    six_rows_in_two_days(tmp_path)
    for n in range(8):
        extra = tmp_path / f"extra{n}.ndjson"
        extra.write_text(json.dumps({"ts": f"2026-03-01T0{n}:30:00", "event": "e"}))
        assert run("insert", "events", str(extra))[0] == 0
    assert run("publish", "iceberg", "events")[0] == 0
    files_before = len(json.loads(run("files", "events", "--format", "json")[1]))
    assert run("merge", "events", "--wait")[0] == 0
    assert len(json.loads(run("files", "events", "--format", "json")[1])) < files_before

    # When garbage is collected with no retention, then the published table still reads
    assert run("gc", "events", "--retention", "0s")[0] == 0
    assert published_rows(local_catalog(tmp_path / "home").load_table((NAMESPACE, "events"))) == 14

    # When it is published again with no retention, the old Iceberg snapshot expires
    code, text = run("publish", "iceberg", "events", "--retention", "0s")
    assert code == 0 and "1 older Iceberg snapshots expired" in text
    assert run("gc", "events", "--retention", "0s")[0] == 0
    table = local_catalog(tmp_path / "home").load_table((NAMESPACE, "events"))
    assert len(table.metadata.snapshots) == 1 and published_rows(table) == 14


def published_rows(table: Any) -> int:
    """The rows of an Iceberg table's current snapshot, each of its files checked to exist
    (pyiceberg 0.12 cannot read the JSON column, so the files are not scanned)."""
    files = [task.file for task in table.scan().plan_files()]
    assert all(Path(f.file_path.removeprefix("file://")).is_file() for f in files)
    return sum(f.record_count for f in files)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_merge_compact_and_gc_show_progress_on_a_terminal_and_none_in_json(
    cli_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run("init")[0] == 0
    create_events()
    for n in range(10):
        source = tmp_path / f"b{n}.ndjson"
        source.write_text(json.dumps({"ts": f"2026-03-0{1 + n % 2}T00:00:00", "event": "e"}))
        assert run("insert", "events", str(source))[0] == 0
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)

    code, _ = run("merge", "--wait", "--format", "json")
    assert code == 0 and terminal.getvalue() == ""  # no bar with JSON output

    for n in range(10):
        source = tmp_path / f"c{n}.ndjson"
        source.write_text(json.dumps({"ts": f"2026-03-0{1 + n % 2}T01:00:00", "event": "f"}))
        assert run("insert", "events", str(source))[0] == 0
    code, text = run("merge", "--wait")
    assert code == 0 and "merge" in text
    drawn = terminal.getvalue()
    assert "merging (round 1) [" in drawn and "groups/s" in drawn and "100%" in drawn

    # And compact, one step per partition
    for n in range(4):
        source = tmp_path / f"d{n}.ndjson"
        source.write_text(json.dumps({"ts": f"2026-03-0{1 + n % 2}T02:00:00", "event": "g"}))
        assert run("insert", "events", str(source))[0] == 0
    code, text = run("compact", "events", "--engine", "duckdb")
    assert code == 0 and "committed" in text
    assert "compacting (duckdb) [" in terminal.getvalue()
    assert "2/2 partitions" in terminal.getvalue()
    # And gc, one step per table
    assert run("gc", "--retention", "0s")[0] == 0
    assert "collecting [" in terminal.getvalue() and "1/1 tables" in terminal.getvalue()


def test_query_on_emr_starts_a_job_pinned_at_the_head_and_says_where_its_result_goes(
    cli_env: str,
    tmp_path: Path,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a table with rows, and no EMR settings
    run("init")
    create_events()
    source = tmp_path / "rows.ndjson"
    source.write_text(json.dumps({"ts": "2026-03-01T01:00:00", "event": "view"}) + "\n")
    assert run("insert", "events", str(source))[0] == 0
    sql = "SELECT count(*) AS n FROM events"
    capsys.readouterr()
    assert run("query", sql, "--engine", "emr")[0] == 1
    assert "ICEFLOE_EMR_APPLICATION_ID" in capsys.readouterr().err

    # When the stack's EMR settings are given (moto standing in for EMR Serverless)
    for name, value in FAKE_AWS_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    for name in UNSET_AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_EMR_SERVERLESS", moto_endpoint)
    emr = boto3.client("emr-serverless", endpoint_url=moto_endpoint, region_name=REGION)
    application = emr.create_application(name="q", releaseLabel="emr-7.0.0", type="SPARK")
    monkeypatch.setenv("ICEFLOE_EMR_APPLICATION_ID", application["applicationId"])
    monkeypatch.setenv("ICEFLOE_EMR_JOB_ROLE_ARN", "arn:aws:iam::123456789012:role/job")
    monkeypatch.setenv("ICEFLOE_EMR_ENTRY_POINT", "s3://artifacts/emr/compact_job.py")
    monkeypatch.setenv("ICEFLOE_EMR_ENVIRONMENT_ARCHIVE", "s3://artifacts/emr/env.tar.gz")
    code, out = run("query", sql, "--engine", "emr", "--format", "json")

    # Then a job run was started over the head snapshot, its result under the results location
    assert code == 0
    started = json.loads(out)
    assert started["snapshots"] == {"events": 1}
    assert started["result_uri"] == str(tmp_path / "home" / "results" / "spark" / started["job_id"])
    job_run = emr.get_job_run(
        applicationId=application["applicationId"], jobRunId=started["job_run_id"]
    )["jobRun"]
    assert job_run["jobDriver"]["sparkSubmit"]["entryPoint"] == "s3://artifacts/emr/query_job.py"
    # And a result file format does not apply: the job writes Parquet
    assert run("query", sql, "--engine", "emr", "--format", "csv")[0] == EXIT_USAGE
    assert "writes its result as Parquet" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        (
            "postgresql://app:s3cr3t@db.example:5432/meta",
            "postgresql://app:***@db.example:5432/meta",
        ),
        (
            "host=db.example user=app password=s3cr3t dbname=meta",
            "host=db.example user=app password=*** dbname=meta",
        ),
    ],
)
def test_settings_shows_each_variable_with_a_dsn_password_masked(
    monkeypatch: pytest.MonkeyPatch, dsn: str, shown: str
) -> None:
    monkeypatch.setenv("ICEFLOE_DATABASE_URL", dsn)
    monkeypatch.setenv("ICEFLOE_QUERY_THREADS", "3")
    monkeypatch.delenv("ICEFLOE_RESULTS", raising=False)
    code, text = run("settings", "--format", "json")
    assert code == 0 and "s3cr3t" not in text
    values = {entry["name"]: entry for entry in json.loads(text)}
    assert set(values) == {v.name for v in VARIABLES if "cli" in v.read_by}
    assert values["ICEFLOE_DATABASE_URL"]["value"] == shown
    assert values["ICEFLOE_QUERY_THREADS"]["value"] == "3"
    assert values["ICEFLOE_RESULTS"]["value"] is None and values["ICEFLOE_RESULTS"]["default"]
    code, table = run("settings")
    assert code == 0 and "s3cr3t" not in table
    assert "(default) " in table and shown in table


def test_settings_refuses_a_bad_value_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ICEFLOE_MERGE_THREADS", "many")
    code, text = run("settings")
    assert code != 0 and text == ""
    assert "ICEFLOE_MERGE_THREADS: 'many' is not a positive whole number" in capsys.readouterr().err


def test_the_issue_s_nested_table_is_created_filled_and_pruned_from_the_cli(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run("init")
    code, _ = run(
        "table", "create", "ev", "--partition-by", "day(ts)", "--schema",
        "ts TIMESTAMP NOT NULL, context STRUCT(ip VARCHAR, page STRUCT(url VARCHAR)),"
        " m MAP(VARCHAR, INTEGER)",
    )  # fmt: skip
    assert code == 0
    shown = json.loads(run("table", "show", "ev", "--format", "json")[1])
    assert shown["stats_leaves"] == ["context.ip", "context.page.url"]
    assert "leaf statistics     context.ip, context.page.url" in run("table", "show", "ev")[1]
    for day in (1, 2, 3):
        source = tmp_path / f"day{day}.ndjson"
        source.write_text(
            json.dumps({"ts": f"2026-06-0{day}T10:00:00", "context": {"ip": f"10.0.0.{day}",
                        "page": {"url": f"/p{day}"}}, "m": {"n": day}}) + "\n"
            + json.dumps({"ts": f"2026-06-0{day}T11:00:00", "context": None, "m": None}) + "\n"
        )  # fmt: skip
        assert run("insert", "ev", str(source))[0] == 0
    bad = tmp_path / "bad.ndjson"
    bad.write_text(json.dumps({"ts": "2026-06-04T10:00:00", "context": {"page": {"url": 7}}}))
    assert run("insert", "ev", str(bad))[0] != 0
    assert "row 0, field 'context.page.url': expected a string" in capsys.readouterr().err

    code, out = run(
        "query", "SELECT context, m FROM ev WHERE context.page.url = '/p2'",
        "--format", "json", "--stats",
    )  # fmt: skip
    (stats,) = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert code == 0
    assert json.loads(out) == [
        {"context": {"ip": "10.0.0.2", "page": {"url": "/p2"}}, "m": {"n": 2}}
    ]
    assert (stats["files_considered"], stats["files_scanned"]) == (3, 1)
