"""The `icefloe` command line at its edges with the file system and the Iceberg catalog: inputs
that are not regular files (pipes, devices), ``--output`` paths it cannot write, and publish
options it cannot use. Each fault is one line naming the path or option, a non-zero exit, and
nothing written."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from icefloe.cli import main
from icefloe.ingest.sources import InsertLimits

pytestmark = pytest.mark.integration

SCHEMA = "ts TIMESTAMP NOT NULL, event VARCHAR"
ROWS = [
    {"ts": "2026-03-01T00:00:00Z", "event": "a"},
    {"ts": "2026-03-02T00:00:00Z", "event": "b"},
]


@pytest.fixture
def events(cli_env: str) -> None:
    assert run("init")[0] == 0
    assert run("table", "create", "events", "--schema", SCHEMA, "--partition-by", "day(ts)")[0] == 0


def run(*argv: str) -> tuple[int, str]:
    """The exit code (a usage error's too) and stdout of one command."""
    out = io.StringIO()
    try:
        code = main(list(argv), out=out)
    except SystemExit as e:  # argparse's refusal of the command line
        code = int(e.code or 0)
    return code, out.getvalue()


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run a command that must fail in one line "icefloe: error: ..." and print nothing else."""
    capsys.readouterr()
    code, out = run(*argv)
    err = capsys.readouterr().err
    assert code != 0, err
    assert out == ""
    assert err.startswith("icefloe: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def ndjson(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def row_count() -> int:
    code, out = run("query", "SELECT count(*) AS n FROM events", "--format", "json")
    assert code == 0
    return int(json.loads(out)[0]["n"])


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    yield read, write
    for fd in (read, write):
        with contextlib.suppress(OSError):  # closed by the test
            os.close(fd)


# --- insert from what is not a regular file --------------------------------------------------


def test_insert_reads_a_pipe_named_by_its_path_as_it_reads_stdin(
    events: None, pipe: tuple[int, int]
) -> None:
    # `icefloe insert events <(cat x.ndjson)` and `cat x | icefloe insert events /dev/stdin`:
    # the path names a pipe, which no reader can seek and whose size is 0.
    read, write = pipe
    os.write(write, ndjson(ROWS))
    os.close(write)

    code, out = run("insert", "events", f"/dev/fd/{read}", "--format", "json")

    assert code == 0
    assert json.loads(out)["rows"] == 2
    assert row_count() == 2


def test_insert_from_a_named_pipe_keeps_the_format_its_name_says(
    events: None, tmp_path: Path
) -> None:
    fifo = tmp_path / "batch.csv"
    os.mkfifo(fifo)

    def feed() -> None:
        with fifo.open("wb") as f:
            f.write(b"ts,event\n2026-03-01T00:00:00Z,a\n2026-03-01T01:00:00Z,b\n")

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        code, out = run("insert", "events", str(fifo), "--format", "json")
    finally:
        writer.join(timeout=30)
    assert code == 0 and json.loads(out)["rows"] == 2
    assert row_count() == 2


def test_insert_from_a_pipe_over_the_size_limit_is_refused_in_one_line(
    events: None,
    pipe: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A pipe's st_size is 0: the limit must count what is read, as for stdin.
    monkeypatch.setattr(
        "icefloe.ingest.insert.InsertLimits", lambda: InsertLimits(max_batch_bytes=50)
    )
    read, write = pipe
    os.write(write, ndjson(ROWS))  # 94 bytes
    os.close(write)

    err = refused(capsys, "insert", "events", f"/dev/fd/{read}")

    assert "over the limit of 50 bytes" in err
    assert row_count() == 0


def test_insert_from_dev_null_is_refused_in_one_line(
    events: None, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, "insert", "events", "/dev/null", "--input-format", "ndjson")
    assert "holds no rows" in err
    assert row_count() == 0


# --- --output paths ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--format", "parquet", "--output", "{dir}"], "{dir}': it is a directory"),
        (["--format", "csv", "--output", "{dir}"], "{dir}': it is a directory"),
        (["--format", "csv", "--output", "{dir}/no/x.csv"], "{dir}/no/x.csv': no directory"),
        (["--format", "json", "--output", "{file}/x.json"], "{file}/x.json': Not a directory"),
        (["--output", ""], "--output"),
    ],
)
def test_query_to_an_output_it_cannot_write_is_one_line_naming_it(
    events: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    expected: str,
) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (tmp_path / "afile").write_text("x")
    where = {"dir": str(target), "file": str(tmp_path / "afile")}
    argv = [a.format(**where) for a in argv]

    err = refused(capsys, "query", "SELECT 1 AS x", *argv)

    assert expected.format(**where) in err
    assert list(target.iterdir()) == []  # no partial or temporary file left


def test_an_output_it_cannot_write_is_refused_before_the_query_runs(
    events: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A query that would fail on its own (no such table) is not run: the output is refused first
    missing = tmp_path / "no" / "x.csv"
    err = refused(capsys, "query", "SELECT * FROM no_such_table", "--output", str(missing))
    assert f"no directory {str(missing.parent)!r}" in err and "no_such_table" not in err
    err = refused(capsys, "changes", "no_such_table", "--since", "0", "--output", str(tmp_path))
    assert "it is a directory" in err and "no_such_table" not in err


def test_changes_to_a_directory_is_one_line_naming_it(
    events: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "adir"
    target.mkdir()
    err = refused(
        capsys, "changes", "events", "--since", "0", "--format", "parquet", "--output", str(target)
    )
    assert f"cannot write --output {str(target)!r}: it is a directory" in err
    assert list(target.iterdir()) == []


def test_a_write_that_fails_partway_leaves_the_old_file_whole(
    events: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "out").mkdir()
    target = tmp_path / "out" / "result.parquet"
    target.write_bytes(b"the previous result")

    def half_a_write(table: Any, where: Any, **_: Any) -> None:
        # Some bytes out, then the disk fills.
        if isinstance(where, str | Path):
            with open(where, "wb") as f:
                f.write(b"PAR1 half")
        else:
            where.write(b"PAR1 half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pq, "write_table", half_a_write)
    err = refused(capsys, "query", "SELECT 1 AS x", "--format", "parquet", "--output", str(target))

    assert f"cannot write --output {str(target)!r}: No space left on device" in err
    assert target.read_bytes() == b"the previous result"
    assert [p.name for p in target.parent.iterdir()] == ["result.parquet"]


def test_output_replaces_a_file_whole_keeping_its_mode_and_symlink(
    events: None, tmp_path: Path
) -> None:
    (tmp_path / "out").mkdir()
    target = tmp_path / "out" / "result.csv"
    target.write_text("an older and longer result than the new one\n")
    target.chmod(0o640)
    link = tmp_path / "out" / "latest.csv"
    link.symlink_to(target.name)

    code, _ = run("query", "SELECT 7 AS x", "--format", "csv", "--output", str(link))

    assert code == 0
    assert link.is_symlink() and target.read_text() == '"x"\n7\n'
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["latest.csv", "result.csv"]
    code, _ = run("query", "SELECT 8 AS x", "--format", "parquet", "--output", str(target))
    assert code == 0 and pq.read_table(target).column("x").to_pylist() == [8]


# --- publish iceberg options ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--catalog-uri", "notauri"], "--catalog-uri 'notauri' is not a SQLAlchemy URI"),
        (["--catalog-uri", ""], "--catalog-uri is empty"),
        (["--namespace", ""], "--namespace '' must be a plain identifier"),
        (["--namespace", "a.b"], "--namespace 'a.b' must be a plain identifier"),
        (["--metadata-location", "ftp://x/y"], "--metadata-location 'ftp://x/y' must be"),
        (["--metadata-location", "relative/dir"], "--metadata-location 'relative/dir' must be"),
        (["--metadata-location", "s3://"], "--metadata-location 's3://' names no bucket"),
        (["--metadata-location", ""], "--metadata-location is empty"),
        (
            ["--catalog", "glue", "--metadata-location", "file:///tmp/m"],
            "the Glue catalog needs an s3:// location",
        ),
    ],
)
def test_publish_refuses_an_option_value_it_cannot_use_naming_it(
    events: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    expected: str,
) -> None:
    err = refused(capsys, "publish", "iceberg", "events", *argv)
    assert expected in err
    assert not (tmp_path / "home" / "iceberg" / "icefloe").exists()  # nothing published


def test_publish_names_the_variable_when_no_option_replaced_it(
    events: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ICEFLOE_ICEBERG_CATALOG_URI", "notauri")
    err = refused(capsys, "publish", "iceberg", "events")
    assert "ICEFLOE_ICEBERG_CATALOG_URI 'notauri' is not a SQLAlchemy URI" in err


@pytest.mark.parametrize("command", [("merge", "--wait"), ("gc",)])
def test_a_catalog_uri_that_cannot_open_fails_other_commands_naming_the_variable(
    cli_env: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: tuple[str, ...],
) -> None:
    # (merge and gc publish the tables that opted in, through the configured catalog)
    assert run("init")[0] == 0
    assert run("table", "create", "pub", "--schema", SCHEMA, "--publish", "iceberg")[0] == 0
    capsys.readouterr()
    monkeypatch.setenv("ICEFLOE_ICEBERG_CATALOG_URI", "postgresql://u:secret@[::1")
    err = refused(capsys, *command)
    assert "ICEFLOE_ICEBERG_CATALOG_URI 'postgresql://u:***@[::1': cannot open" in err
    assert "secret" not in err


def test_publish_to_a_catalog_it_cannot_open_is_one_line_naming_it(
    events: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"sqlite:///{tmp_path}/no/such/dir/catalog.db"
    err = refused(capsys, "publish", "iceberg", "events", "--catalog-uri", uri)
    assert f"cannot use the Iceberg catalog at --catalog-uri {uri!r}" in err


def test_publish_with_metadata_it_cannot_write_is_one_line_naming_the_location(
    events: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "afile").write_text("x")
    location = (tmp_path / "afile" / "meta").as_uri()
    err = refused(capsys, "publish", "iceberg", "events", "--metadata-location", location)
    assert f"(--metadata-location {location!r})" in err
    # Then to where it can: published.
    code, out = run("publish", "iceberg", "events", "--format", "json")
    assert code == 0 and json.loads(out)["snapshot_id"] == 0
