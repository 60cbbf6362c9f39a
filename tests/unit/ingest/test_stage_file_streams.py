"""``stage_file`` on a path that is no regular file (a pipe, a character device): copied as
stdin is, under the size limit, and deleted with the batch; a regular file is used in place."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from icefloe.errors import BatchRejectedError
from icefloe.ingest.sources import InsertLimits, stage_file

DATA = b'{"a": 1}\n{"a": 2}\n'


@pytest.fixture
def pipe_path() -> Iterator[tuple[Path, int]]:
    """A pipe's read end by path (as ``<(...)`` or ``/dev/stdin`` name one), and its write end."""
    read, write = os.pipe()
    yield Path(f"/dev/fd/{read}"), write
    for fd in (read, write):
        with contextlib.suppress(OSError):  # closed by the test
            os.close(fd)


def test_a_pipe_is_copied_to_a_file_of_its_own(pipe_path: tuple[Path, int], tmp_path: Path) -> None:
    path, write = pipe_path
    os.write(write, DATA)
    os.close(write)

    staged = stage_file(path, fmt="ndjson", limits=InsertLimits(), directory=tmp_path)

    assert staged.owned and staged.path.parent == tmp_path
    assert staged.path.read_bytes() == DATA
    assert staged.size_bytes == len(DATA)
    assert (staged.format, staged.source) == ("ndjson", str(path))
    staged.discard()
    assert list(tmp_path.iterdir()) == []


def test_a_pipe_over_the_limit_is_refused_and_leaves_no_copy(
    pipe_path: tuple[Path, int], tmp_path: Path
) -> None:
    path, write = pipe_path
    os.write(write, DATA)
    os.close(write)

    with pytest.raises(BatchRejectedError, match="over the limit of 10 bytes"):
        stage_file(path, fmt="ndjson", limits=InsertLimits(max_batch_bytes=10), directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_an_endless_device_is_refused_at_the_limit(tmp_path: Path) -> None:
    with pytest.raises(BatchRejectedError, match="over the limit of 1,000 bytes"):
        stage_file(
            Path("/dev/zero"),
            fmt="ndjson",
            limits=InsertLimits(max_batch_bytes=1000),
            directory=tmp_path,
        )
    assert list(tmp_path.iterdir()) == []


def test_dev_null_is_an_empty_copy(tmp_path: Path) -> None:
    staged = stage_file(Path("/dev/null"), fmt="csv", limits=InsertLimits(), directory=tmp_path)
    assert staged.owned and staged.size_bytes == 0 and staged.path.suffix == ".csv"
    staged.discard()


def test_a_regular_file_is_used_in_place(tmp_path: Path) -> None:
    source = tmp_path / "batch.ndjson"
    source.write_bytes(DATA)
    staged = stage_file(source, fmt="ndjson", limits=InsertLimits())
    assert (staged.path, staged.owned, staged.size_bytes) == (source, False, len(DATA))
    with pytest.raises(BatchRejectedError, match="over the limit"):
        stage_file(source, fmt="ndjson", limits=InsertLimits(max_batch_bytes=10))


def test_a_socket_is_refused_naming_it(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(BatchRejectedError, match=f"cannot read input file '{path}'"):
            stage_file(path, fmt="ndjson", limits=InsertLimits())
