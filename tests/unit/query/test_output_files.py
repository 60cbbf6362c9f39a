"""``write_result`` to a file (``--output``): whole or not at all, refusals naming the path, and
paths under /dev written through, never replaced."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pyarrow as pa
import pytest

from icefloe.errors import InvalidInputError
from icefloe.query.output import write_result

TABLE = pa.table({"x": [1, 2]})


@pytest.mark.parametrize("fmt", ["csv", "json", "table", "parquet"])
def test_a_new_file_has_the_mode_open_gives_and_no_temporary_file_stays(
    tmp_path: Path, fmt: str
) -> None:
    target = tmp_path / f"r.{fmt}"
    write_result(TABLE, fmt=fmt, out=io.StringIO(), output=str(target))
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "the path is empty"),
        (".", "it is a directory"),
        ("missing/r.csv", "no directory"),
    ],
)
def test_a_path_it_cannot_write_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, reason: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match=f"cannot write --output '{name}': {reason}"):
        write_result(TABLE, fmt="csv", out=io.StringIO(), output=name)
    assert list(tmp_path.iterdir()) == []


def test_a_write_that_fails_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "r.csv"
    target.write_text("before")

    def no_sync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", no_sync)
    with pytest.raises(InvalidInputError, match="Input/output error"):
        write_result(TABLE, fmt="csv", out=io.StringIO(), output=str(target))
    assert target.read_text() == "before"
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]


def test_a_pipe_under_dev_is_written_through() -> None:
    read, write = os.pipe()
    try:
        write_result(TABLE, fmt="csv", out=io.StringIO(), output=f"/dev/fd/{write}")
    finally:
        os.close(write)
    try:
        assert os.read(read, 1000) == b'"x"\n1\n2\n'
    finally:
        os.close(read)


def test_a_file_reached_through_dev_fd_is_appended_to_never_replaced(tmp_path: Path) -> None:
    # `icefloe query ... --output /dev/stdout >> log`: the shell's file, written through its
    # descriptor; renaming a new file over it would leave the descriptor on a deleted one.
    log = tmp_path / "log"
    log.write_bytes(b"earlier\n")
    inode = log.stat().st_ino
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        write_result(TABLE, fmt="csv", out=io.StringIO(), output=f"/dev/fd/{fd}")
    finally:
        os.close(fd)
    assert log.stat().st_ino == inode
    assert log.read_bytes() == b'earlier\n"x"\n1\n2\n'
    assert [p.name for p in tmp_path.iterdir()] == ["log"]


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_a_plain_file_under_dev_shm_is_replaced_not_appended_to() -> None:
    target = Path("/dev/shm") / f"icefloe-output-{os.getpid()}.csv"
    target.write_text("before\n")
    try:
        write_result(TABLE, fmt="csv", out=io.StringIO(), output=str(target))
        assert target.read_text() == '"x"\n1\n2\n'
    finally:
        target.unlink(missing_ok=True)
