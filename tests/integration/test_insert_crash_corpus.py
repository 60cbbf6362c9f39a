"""No input crashes a process: a corpus of hostile inputs through every insert path.

Each case (nesting far past the limit, in a JSON column and at the top, a string over the size
limit, files cut short, bytes that are not UTF-8, NUL bytes, top-level values that are not
objects) goes through the CLI (a .json and a .ndjson file, stdin with --input-format), Python
rows (``lake.insert`` with dicts, where the case can be written as dicts), Arrow and Parquet
input, and the insert Lambda (its handler invoked directly, and an SQS record body beside a
good one). Each must end with an error that names the problem, nothing committed, and nothing
left in the warehouse.

The CLI runs as a subprocess, so that a crash shows as a signal exit (a negative return code)
instead of killing pytest: pyarrow's JSON reader segfaulted on a line nesting 20,000 levels,
and DuckDB's Parquet and Arrow readers on schemas nesting a few thousand. Inputs whose only
risk is a crash of the process running them (an Arrow type, a Parquet schema) run in one too.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import boto3
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from moto import mock_aws
from psycopg import sql

import icefloe
from icefloe.aws.observability import LambdaHandler
from icefloe.errors import BatchRejectedError
from icefloe.lake import Lake
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from support.aws import REGION, create_bucket
from support.lambda_stack import (
    PREFIX,
    TEMPLATE,
    Deployment,
    failures,
    fresh_container,
    handler_module_fixture,
    invoke,
    object_keys,
    set_environment,
    use_fake_aws,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.integration

SCHEMA = "ts TIMESTAMP NOT NULL, event VARCHAR, user_id VARCHAR, properties JSON"
# pyarrow's JSON reader (8 MiB stack) segfaulted between 15,000 and 20,000 levels.
DEEP = 20_000
HUGE = 5 << 20  # over the value limit of 4 MiB
TS = b'"ts":"2026-11-01T00:00:00"'
DEEP_MESSAGE = "JSON is nested more than 64 levels deep"


def record(field: bytes) -> bytes:
    return b"{" + TS + b"," + field + b"}"


GOOD = record(b'"event":"view"')


@dataclass(frozen=True)
class Case:
    """Bytes of a hostile input, and what its refusal says (a regular expression) when the
    bytes are read as one JSON document (a .json file) and as NDJSON. ``{source}`` stands for
    the name of the input (the file, or stdin)."""

    name: str
    text: bytes
    as_json: str
    as_ndjson: str


CASES = [
    Case(
        "deep-json-column",
        record(b'"properties":' + b"[" * DEEP + b"]" * DEEP) + b"\n",
        rf"field 'properties': {DEEP_MESSAGE} \(line 1, column \d+\)",
        rf"row 0, field 'properties': {DEEP_MESSAGE}",
    ),
    Case(
        "deep-object-column",
        record(b'"properties":' + b'{"a":' * DEEP + b"1" + b"}" * DEEP) + b"\n",
        rf"field 'properties': {DEEP_MESSAGE} \(line 1, column \d+\)",
        rf"row 0, field 'properties': {DEEP_MESSAGE}",
    ),
    Case(
        "deep-second-record",
        GOOD + b"\n" + record(b'"properties":' + b"[" * DEEP + b"]" * DEEP) + b"\n",
        rf"field 'properties': {DEEP_MESSAGE} \(line 2, column \d+\)",
        rf"row 1, field 'properties': {DEEP_MESSAGE}",
    ),
    Case(
        # Over a megabyte: DuckDB reads the JSON columns while the file is scanned
        "deep-record-after-a-megabyte",
        (GOOD + b"\n") * 30_000 + record(b'"properties":' + b"[" * DEEP + b"]" * DEEP) + b"\n",
        rf"field 'properties': {DEEP_MESSAGE} \(line 30001, column \d+\)",
        rf"row 30000, field 'properties': {DEEP_MESSAGE}",
    ),
    Case(
        "deep-top-level-array",
        b"[" * DEEP + b"]" * DEEP + b"\n",
        rf"row 0: {DEEP_MESSAGE}",
        rf"row 0: {DEEP_MESSAGE}",
    ),
    Case(
        "deep-top-level-object",
        b'{"a":' * DEEP + b"1" + b"}" * DEEP + b"\n",
        rf"field 'a': {DEEP_MESSAGE}",
        rf"row 0, field 'a': {DEEP_MESSAGE}",
    ),
    Case(
        "huge-string",
        record(b'"event":"' + b"x" * HUGE + b'"') + b"\n",
        r"row 0, field 'event': value is over the limit of 4,194,304 bytes",
        r"row 0, field 'event': value is over the limit of 4,194,304 bytes",
    ),
    Case(
        "truncated-array",
        b"[" + GOOD + b", " + GOOD + b",\n",
        r"invalid JSON: {source} is not complete: the array is not closed",
        r"row 0: invalid JSON",
    ),
    Case(
        "truncated-mid-value",
        GOOD + b"\n" + record(b'"event":"vi')[:-1],
        r"invalid JSON: {source} is not complete: a string is not closed",
        r"row 1: invalid JSON",
    ),
    Case(
        "invalid-utf8",
        GOOD + b"\n" + record(b'"event":"caf\xc3\x28"') + b"\n",
        r"row 1: bytes that are not UTF-8 \(0xC3 at line 2, column \d+\)",
        r"row 1: bytes that are not UTF-8 \(0xC3 at line 2, column \d+\)",
    ),
    Case(
        "nul-byte",
        GOOD + b"\n" + record(b'"event":"a\x00b"') + b"\n",
        r"row 1: invalid JSON: unexpected control character",
        r"row 1: invalid JSON: unexpected control character",
    ),
    Case("a-number", b"42\n", r"row 0: not a JSON object", r"row 0: not a JSON object"),
    Case("a-string", b'"hello"\n', r"row 0: not a JSON object", r"row 0: not a JSON object"),
    Case("null", b"null\n", r"row 0: not a JSON object", r"row 0: not a JSON object"),
    Case(
        "an-array-of-numbers",
        b"[1, 2, 3]\n",
        r"row 0: not a JSON object; row 1: not a JSON object",
        r"row 0: not a JSON object",
    ),
    Case(
        "nested-arrays",
        b"[[1, 2], [3]]\n",
        r"row 0: not a JSON object; row 1: not a JSON object",
        r"row 0: not a JSON object",
    ),
]
BY_NAME = {case.name: case for case in CASES}


# -- the lake every path inserts into: one schema, one table per case and path ---------------


@dataclass
class World:
    dsn: str
    schema: str
    home: Path
    meta: MetaStore

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse"

    def table(self, name: str) -> str:
        """A table of its own for one case through one path."""
        self.meta.create_table(TableSpec.create(name=name, schema=SCHEMA, partition_by="day(ts)"))
        return name

    def committed(self, table: str) -> tuple[int, int]:
        """(snapshots, rows) of ``table``."""
        return len(self.meta.snapshots(table)), self.meta.status(table).rows

    def stored(self, table: str) -> list[Path]:
        """What the local warehouse holds under ``table``."""
        return sorted(p for p in (self.warehouse / table).rglob("*") if p.is_file())


def table_name(*parts: str) -> str:
    return "_".join(parts).replace("-", "_")


@pytest.fixture(scope="module")
def world(postgres_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    meta = MetaStore(postgres_dsn, schema=schema, max_connections=8)
    meta.migrate()
    yield World(postgres_dsn, schema, tmp_path_factory.mktemp("corpus-home"), meta)
    meta.close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def assert_nothing_committed(world: World, table: str) -> None:
    assert world.committed(table) == (0, 0)
    assert world.stored(table) == []


# -- the CLI, as a subprocess ------------------------------------------------------------------


@dataclass(frozen=True)
class CliRun:
    case: str
    mode: str  # "json-file", "ndjson-file", "stdin-ndjson", "stdin-json", "parquet-file"
    table: str
    returncode: int  # negative: the signal that ended the process
    stderr: str
    stdout: str
    process: str  # "forked" (from one runner that imported the CLI) or "own" (an interpreter)

    @property
    def what_ended_it(self) -> str:
        if self.returncode < 0:
            return f"killed by {signal.Signals(-self.returncode).name}"
        return f"exit {self.returncode}"


def cli_environment(world: World) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("ICEFLOE_", "AWS_"))}
    environment.update(
        ICEFLOE_DATABASE_URL=world.dsn,
        ICEFLOE_DATABASE_SCHEMA=world.schema,
        ICEFLOE_HOME=str(world.home),
    )
    return environment


@dataclass(frozen=True)
class CliJob:
    case: str
    mode: str
    table: str
    args: list[str]
    stdin: bytes


def run_in_own_interpreter(world: World, directory: Path, job: CliJob) -> CliRun:
    """``python -m icefloe.cli insert ...``: the CLI as a user runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "icefloe.cli", "insert", job.table, *job.args],
        input=job.stdin,
        capture_output=True,
        cwd=directory,
        env=cli_environment(world),
        timeout=300,
        check=False,
    )
    decode = lambda b: b.decode("utf-8", errors="replace")  # noqa: E731
    return CliRun(
        job.case,
        job.mode,
        job.table,
        done.returncode,
        decode(done.stderr),
        decode(done.stdout),
        "own",
    )


# Imports the CLI once (a second of imports per process, that 60 runs would pay each), then
# runs each job's ``icefloe.cli.main`` in a child forked for it, three at a time, with the
# job's file as stdin and files as stdout and stderr: a job that crashes kills its child, and
# its exit status (a signal) is what this reports. No thread has started when it forks.
_FORKING_RUNNER = """
import json, os, sys
from icefloe.cli import main
jobs = json.loads(open(sys.argv[1]).read())
codes, running = {}, {}
def reap():
    pid, status = os.wait()
    codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
for key, job in enumerate(jobs):
    while len(running) >= 3:
        reap()
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            os.chdir(job["cwd"])
            for fd, path, flags in (
                (0, job["stdin"], os.O_RDONLY),
                (1, job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                (2, job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            ):
                opened = os.open(path, flags, 0o644)
                os.dup2(opened, fd)
                os.close(opened)
            code = main(job["argv"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    running[pid] = str(key)
while running:
    reap()
open(sys.argv[2], "w").write(json.dumps(codes))
"""


def run_forked(world: World, directory: Path, jobs: list[CliJob]) -> list[CliRun]:
    """Each job's CLI run in a process of its own, forked from one runner."""
    specs = []
    for n, job in enumerate(jobs):
        stdin = directory / f"job-{n}.stdin"
        stdin.write_bytes(job.stdin)
        specs.append(
            {
                "cwd": str(directory),
                "argv": ["insert", job.table, *job.args],
                "stdin": str(stdin),
                "stdout": str(directory / f"job-{n}.stdout"),
                "stderr": str(directory / f"job-{n}.stderr"),
            }
        )
    (directory / "jobs.json").write_text(json.dumps(specs))
    runner = subprocess.run(
        [sys.executable, "-c", _FORKING_RUNNER, "jobs.json", "codes.json"],
        capture_output=True,
        cwd=directory,
        env=cli_environment(world),
        timeout=600,
        check=False,
    )
    assert runner.returncode == 0, runner.stderr[-2000:]
    codes = json.loads((directory / "codes.json").read_text())
    read = lambda p: Path(p).read_bytes().decode("utf-8", errors="replace")  # noqa: E731
    return [
        CliRun(
            job.case,
            job.mode,
            job.table,
            codes[str(n)],
            read(specs[n]["stderr"]),
            read(specs[n]["stdout"]),
            "forked",
        )
        for n, job in enumerate(jobs)
    ]


# Reading stdin as one JSON document is the .json file's path under another name: it runs for
# the cases where that path's own checks answer (completeness, depth) and a plain refusal.
STDIN_JSON = {"deep-json-column", "truncated-array", "truncated-mid-value", "null"}
CLI_RUNS = [(case, mode) for case in CASES for mode in ("json-file", "ndjson-file", "stdin-ndjson")]
CLI_RUNS += [(BY_NAME[name], "stdin-json") for name in sorted(STDIN_JSON)]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, byte = n >> 7, n & 0x7F
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _thrift_struct(fields: list[tuple[int, int, bytes]]) -> bytes:
    """A Thrift compact struct: (field id, type, encoded value), ids ascending by at most 15."""
    out, last = bytearray(), 0
    for field_id, kind, value in fields:
        out += bytes([(field_id - last) << 4 | kind]) + value
        last = field_id
    return bytes(out) + b"\x00"


def _thrift_list(kind: int, items: list[bytes]) -> bytes:
    head = bytes([len(items) << 4 | kind]) if len(items) < 15 else bytes([0xF0 | kind])
    return head + (_varint(len(items)) if len(items) >= 15 else b"") + b"".join(items)


def _thrift_string(value: bytes) -> bytes:
    return _varint(len(value)) + value


def footer_only_parquet(*, depth: int = 0, metadata: bytes = b"") -> bytes:
    """A Parquet file of no rows whose footer is written here, byte by byte (pyarrow cannot
    build what it would refuse to read): column ``ts`` (INT64) under ``depth`` nested groups,
    and one key-value pair of ``metadata``."""
    i32, i64, binary, list_, struct_ = 5, 6, 8, 9, 12
    root = _thrift_struct([(4, binary, _thrift_string(b"schema")), (5, i32, _zigzag(1))])
    groups = [
        _thrift_struct(
            [(3, i32, _zigzag(1)), (4, binary, _thrift_string(b"g%d" % n)), (5, i32, _zigzag(1))]
        )
        for n in range(depth)
    ]
    leaf = _thrift_struct(
        [(1, i32, _zigzag(2)), (3, i32, _zigzag(1)), (4, binary, _thrift_string(b"ts"))]
    )
    fields = [
        (1, i32, _zigzag(1)),
        (2, list_, _thrift_list(struct_, [root, *groups, leaf])),
        (3, i64, _zigzag(0)),
        (4, list_, _thrift_list(struct_, [])),
    ]
    if metadata:
        pair = _thrift_struct(
            [(1, binary, _thrift_string(b"k")), (2, binary, _thrift_string(metadata))]
        )
        fields.append((5, list_, _thrift_list(struct_, [pair])))
    footer = _thrift_struct(fields)
    return b"PAR1" + footer + struct.pack("<I", len(footer)) + b"PAR1"


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def one_row(**columns: pa.Array) -> pa.Table:
    return pa.table({"ts": pa.array([datetime(2026, 11, 1)], pa.timestamp("us")), **columns})


def parquet_cases() -> dict[str, tuple[bytes, str]]:
    """Parquet files, and what their refusal says."""
    good = parquet_bytes(one_row(event=pa.array(["view"])))
    beyond = good[:-8] + struct.pack("<I", 1 << 30) + b"PAR1"  # a footer longer than the file
    return {
        "parquet-deep-schema": (
            footer_only_parquet(depth=DEEP),
            r"not a readable parquet file: .*schema too deeply nested",
        ),
        "parquet-huge-metadata": (
            footer_only_parquet(metadata=b"x" * (101 << 20)),
            r"not a readable parquet file: .*Exceeded size limit",
        ),
        "parquet-footer-beyond-the-file": (beyond, r"not a readable parquet file"),
        "parquet-truncated": (good[: len(good) // 2], r"not a readable parquet file"),
        "parquet-deep-json-text": (
            parquet_bytes(one_row(properties=pa.array(["[" * DEEP + "]" * DEEP]))),
            rf"row 0, field 'properties': {DEEP_MESSAGE}",
        ),
        "parquet-huge-string": (
            parquet_bytes(one_row(event=pa.array(["x" * HUGE]))),
            r"row 0, field 'event': value is over the limit",
        ),
    }


PARQUET_CASES = parquet_cases()


# Runs that also go through an interpreter of their own: the crash (a line nesting
# 20,000 levels on stdin), its truncated array file, a Parquet schema that crashed DuckDB.
OWN_INTERPRETER = {
    ("deep-json-column", "stdin-ndjson"),
    ("truncated-array", "json-file"),
    ("parquet-deep-schema", "parquet-file"),
}


@pytest.fixture(scope="module")
def cli_runs(
    world: World, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str, str], CliRun]:
    """Every CLI run of the module, keyed by (case, mode, process)."""
    directory = tmp_path_factory.mktemp("corpus-files")
    jobs: list[CliJob] = []
    for case, mode in CLI_RUNS:
        table = world.table(table_name("cli", mode, case.name))
        if mode.endswith("-file"):
            name = f"{case.name}.{mode.removesuffix('-file')}"
            (directory / name).write_bytes(case.text)
            jobs.append(CliJob(case.name, mode, table, [name], b""))
        else:
            fmt = mode.removeprefix("stdin-")
            jobs.append(CliJob(case.name, mode, table, ["-", "--input-format", fmt], case.text))
    for name, (data, _) in PARQUET_CASES.items():
        (directory / f"{name}.parquet").write_bytes(data)
        table = world.table(table_name("cli", name))
        jobs.append(CliJob(name, "parquet-file", table, [f"{name}.parquet"], b""))
    # Good input: the same runs commit it, so a refusal above is the input's doing.
    (directory / "good.ndjson").write_bytes(GOOD + b"\n")
    jobs.append(CliJob("good", "ndjson-file", world.table("cli_good_file"), ["good.ndjson"], b""))
    jobs.append(
        CliJob(
            "good",
            "stdin-json",
            world.table("cli_good_stdin"),
            ["-", "--input-format", "json"],
            b"[" + GOOD + b"]",
        )
    )
    own = [
        CliJob(job.case, job.mode, world.table(f"{job.table}_own"), job.args, job.stdin)
        for job in jobs
        if (job.case, job.mode) in OWN_INTERPRETER or job.case == "good"
    ]
    with ThreadPoolExecutor(max_workers=1) as pool:  # beside the forking runner
        alone = pool.map(lambda job: run_in_own_interpreter(world, directory, job), own)
        runs = run_forked(world, directory, jobs) + list(alone)
    return {(run.case, run.mode, run.process): run for run in runs}


def assert_refused(run: CliRun, pattern: str, world: World) -> None:
    context = f"{run.case} ({run.mode}): {run.what_ended_it}, stderr {run.stderr[-600:]!r}"
    assert run.returncode in (1, 2), context
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("icefloe: error: "), context
    assert re.search(pattern, lines[0]), f"{context}: expected {pattern!r}"
    assert_nothing_committed(world, run.table)


@pytest.mark.parametrize(
    ("case", "mode"), CLI_RUNS, ids=[f"{case.name}-{mode}" for case, mode in CLI_RUNS]
)
def test_the_cli_refuses_each_case_naming_it_and_commits_nothing(
    cli_runs: dict[tuple[str, str, str], CliRun], world: World, case: Case, mode: str
) -> None:
    source = re.escape(f"{case.name}.json") if mode == "json-file" else "stdin"
    pattern = case.as_json if mode in ("json-file", "stdin-json") else case.as_ndjson
    for process in ("forked", "own"):
        run = cli_runs.get((case.name, mode, process))
        if run is not None:
            assert_refused(run, pattern.replace("{source}", source), world)


@pytest.mark.parametrize("name", sorted(PARQUET_CASES))
def test_the_cli_refuses_each_parquet_case_naming_it_and_commits_nothing(
    cli_runs: dict[tuple[str, str, str], CliRun], world: World, name: str
) -> None:
    for process in ("forked", "own"):
        run = cli_runs.get((name, "parquet-file", process))
        if run is not None:
            assert_refused(run, PARQUET_CASES[name][1], world)


def test_the_same_cli_runs_commit_good_input(
    cli_runs: dict[tuple[str, str, str], CliRun], world: World
) -> None:
    for mode in ("ndjson-file", "stdin-json"):
        for process in ("forked", "own"):
            run = cli_runs[("good", mode, process)]
            assert run.returncode == 0, (process, run.what_ended_it, run.stderr)
            assert world.committed(run.table) == (1, 1)
            assert len(world.stored(run.table)) == 1


# -- Python rows, Arrow tables and Parquet files in this process ------------------------------


@pytest.fixture(scope="module")
def lake(world: World) -> Iterator[Lake]:
    with icefloe.connect(
        home=world.home,
        warehouse=str(world.warehouse),
        database_url=world.dsn,
        database_schema=world.schema,
    ) as opened:
        yield opened


def nested_lists(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def nested_objects(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"a": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def row(**fields: object) -> dict[str, object]:
    return {"ts": "2026-11-01T00:00:00", **fields}


# The cases as rows: those a list of dicts can hold. (A file cut short, or bytes that are not
# JSON text, cannot be dicts; a NUL in a string is valid JSON, "\\u0000", and is stored.)
ROW_CASES: dict[str, tuple[list[Any], str]] = {
    "deep-json-column": (
        [row(properties=nested_lists(DEEP))],
        rf"row 0, field 'properties': {DEEP_MESSAGE}",
    ),
    "deep-object-column": (
        [row(properties=nested_objects(DEEP))],
        rf"row 0, field 'properties': {DEEP_MESSAGE}",
    ),
    "deep-second-record": (
        [row(event="view"), row(properties=nested_lists(DEEP))],
        rf"row 1, field 'properties': {DEEP_MESSAGE}",
    ),
    "deep-top-level-array": ([nested_lists(DEEP)], r"row 0: not a JSON object"),
    "deep-top-level-object": ([nested_objects(DEEP)], rf"row 0, field 'a': {DEEP_MESSAGE}"),
    "huge-string": ([row(event="x" * HUGE)], r"row 0, field 'event': value is over the limit"),
    "invalid-utf8": (
        [row(event="view"), row(event="caf\udcc3")],  # a lone surrogate: not UTF-8
        r"row 1, field 'event': not valid JSON: str is not valid UTF-8",
    ),
    "a-number": ([42], r"row 0: not a JSON object"),
    "a-string": (["hello"], r"row 0: not a JSON object"),
    "null": ([None], r"row 0: not a JSON object"),
    "an-array-of-numbers": ([[1, 2, 3]], r"row 0: not a JSON object"),
    "nested-arrays": ([[[1, 2], [3]]], r"row 0: not a JSON object"),
}


@pytest.mark.parametrize("name", list(ROW_CASES))
def test_python_rows_of_each_case_are_refused_naming_it_and_nothing_is_committed(
    lake: Lake, world: World, name: str
) -> None:
    rows, pattern = ROW_CASES[name]
    table = world.table(table_name("rows", name))
    with pytest.raises(BatchRejectedError) as refused:
        lake.insert(table, rows)
    assert re.search(pattern, str(refused.value)), str(refused.value)[:500]
    assert_nothing_committed(world, table)


def not_utf8(*texts: bytes) -> pa.Array:
    """A string array holding bytes that are not UTF-8 (Arrow does not check a view)."""
    return pa.array(list(texts), pa.binary()).view(pa.string())


def deep_list_type(depth: int) -> pa.DataType:
    kind: pa.DataType = pa.int64()
    for _ in range(depth):
        kind = pa.list_(kind)
    return kind


def deep_struct_type(depth: int) -> pa.DataType:
    kind: pa.DataType = pa.int64()
    for _ in range(depth):
        kind = pa.struct([("a", kind)])
    return kind


def three_rows(**columns: pa.Array) -> pa.Table:
    """Three rows: the case's value in the middle one, between a smaller and a larger one (so
    that it is no column statistic's min or max)."""
    ts = pa.array([datetime(2026, 11, 1)] * 3, pa.timestamp("us"))
    return pa.table({"ts": ts, **columns})


ARROW_CASES: dict[str, tuple[pa.Table, str]] = {
    "deep-json-text": (
        one_row(properties=pa.array(["[" * DEEP + "]" * DEEP])),
        rf"row 0, field 'properties': {DEEP_MESSAGE}",
    ),
    "deep-object-json-text": (
        one_row(properties=pa.array(['{"a":' * DEEP + "1" + "}" * DEEP])),
        rf"row 0, field 'properties': {DEEP_MESSAGE}",
    ),
    "deep-list-type": (
        one_row(properties=pa.nulls(1, deep_list_type(100))),
        r"field 'properties': its Arrow type nests more than 64 levels deep",
    ),
    "deep-struct-type": (
        one_row(properties=pa.nulls(1, deep_struct_type(100))),
        r"field 'properties': its Arrow type nests more than 64 levels deep",
    ),
    "huge-string": (
        one_row(event=pa.array(["x" * HUGE])),
        r"row 0, field 'event': value is over the limit",
    ),
    "truncated-json-text": (
        one_row(properties=pa.array(['[{"a": 1}, {"a": '])),
        r"row 0, field 'properties': expected any JSON value",
    ),
    "invalid-utf8": (
        three_rows(event=not_utf8(b"a", b"caf\xc3\x28", b"z")),
        r"row 1, field 'event': bytes that are not UTF-8",
    ),
    "invalid-utf8-json-text": (
        three_rows(properties=not_utf8(b'"a"', b'"caf\xc3\x28"', b'"z"')),
        r"row 1, field 'properties': bytes that are not UTF-8",
    ),
    "nul-byte-in-json-text": (
        one_row(properties=pa.array(['{"a": "x\x00y"}'])),
        r"row 0, field 'properties': expected any JSON value",
    ),
    "an-array-of-numbers-for-a-string": (
        one_row(event=pa.array([[1, 2, 3]])),
        r"row 0, field 'event': expected a string",
    ),
}


@pytest.mark.parametrize("name", list(ARROW_CASES))
def test_arrow_tables_of_each_case_are_refused_naming_it_and_nothing_is_committed(
    lake: Lake, world: World, name: str
) -> None:
    data, pattern = ARROW_CASES[name]
    table = world.table(table_name("arrow", name))
    with pytest.raises(BatchRejectedError) as refused:
        lake.insert(table, data, idempotency_key="k")  # (the key digests the table too)
    assert re.search(pattern, str(refused.value)), str(refused.value)[:500]
    assert_nothing_committed(world, table)


def test_an_arrow_type_nested_deep_enough_to_crash_duckdb_is_refused_in_a_process_of_its_own(
    world: World,
) -> None:
    # Given an Arrow table whose column type nests 6,000 lists (pyarrow builds it; DuckDB's
    # scan of it segfaulted), inserted through the Python API in a process of its own
    table = world.table("arrow_crash_type")
    script = (
        "import sys, pyarrow as pa, icefloe\n"
        "from icefloe.errors import BatchRejectedError\n"
        "kind = pa.int64()\n"
        "for _ in range(6000): kind = pa.list_(kind)\n"
        "data = pa.table({'ts': pa.nulls(1, pa.timestamp('us')), 'properties': pa.nulls(1, kind)})\n"
        "with icefloe.connect(home=sys.argv[2], warehouse=sys.argv[3], database_url=sys.argv[4],"
        " database_schema=sys.argv[5]) as lake:\n"
        "    try:\n"
        "        lake.insert(sys.argv[1], data)\n"
        "    except BatchRejectedError as e:\n"
        "        print(e)\n"
        "        sys.exit(3)\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            table,
            str(world.home),
            str(world.warehouse),
            world.dsn,
            world.schema,
        ],
        capture_output=True,
        env=cli_environment(world),
        timeout=240,
        check=False,
    )
    # Then it is refused, naming the column (a negative code would be the signal that killed it)
    assert done.returncode == 3, (done.returncode, done.stderr[-600:])
    assert b"field 'properties': its Arrow type nests more than 64 levels deep" in done.stdout
    assert_nothing_committed(world, table)


@pytest.mark.parametrize(
    "name", [n for n in PARQUET_CASES if n not in ("parquet-deep-schema", "parquet-huge-metadata")]
)
def test_parquet_files_of_each_case_are_refused_through_the_python_api(
    lake: Lake, world: World, tmp_path: Path, name: str
) -> None:
    # (The deep schema and the huge footer run only in the CLI's processes: they would crash
    # this one if the check before DuckDB's reader failed.)
    data, pattern = PARQUET_CASES[name]
    path = tmp_path / f"{name}.parquet"
    path.write_bytes(data)
    table = world.table(table_name("api", name))
    with pytest.raises(BatchRejectedError) as refused:
        lake.insert(table, path)
    assert re.search(pattern, str(refused.value)), str(refused.value)[:500]
    assert_nothing_committed(world, table)


# -- the insert Lambda: its handler invoked directly, and SQS record bodies --------------------

INSERT = TEMPLATE.functions()["InsertFunction"]
BUCKET = "icefloe-corpus-warehouse"
app_module = handler_module_fixture(INSERT, name="app_module")


@dataclass
class LambdaWorld:
    s3: S3Client
    world: World
    handler: LambdaHandler  # the insert function's, over a container of the module's own

    def stored(self, table: str) -> list[str]:
        return sorted(k for k in object_keys(self.s3, BUCKET) if k.startswith(f"{PREFIX}/{table}/"))

    def committed_keys(self, table: str) -> list[str]:
        return sorted(f"{PREFIX}/{f.path}" for f in self.world.meta.files(table))


@pytest.fixture(scope="module")
def deployed(world: World, app_module: ModuleType) -> Iterator[LambdaWorld]:
    """The insert function's environment as the template declares it, over moto S3 (in this
    process) and the module's meta store schema; set for the rest of the module."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        use_fake_aws(monkeypatch, session_token=True)
        deployment = Deployment(postgres_dsn=world.dsn, schema_name=world.schema, home=world.home)
        set_environment(
            monkeypatch, deployment.environment(INSERT, resources={"DataBucket": BUCKET})
        )
        with mock_aws():
            s3 = boto3.client("s3", region_name=REGION)
            create_bucket(s3, TEMPLATE, BUCKET)
            with fresh_container(app_module) as function:
                yield LambdaWorld(s3, world, function.handler)


@pytest.fixture(scope="module")
def app(deployed: LambdaWorld) -> LambdaHandler:
    return deployed.handler


# What a direct invoke carries: the rows as its JSON parsed into Python (the cases as rows).
@pytest.mark.parametrize("name", list(ROW_CASES))
def test_a_direct_invoke_of_each_case_is_answered_with_an_error_and_commits_nothing(
    app: LambdaHandler, deployed: LambdaWorld, name: str
) -> None:
    rows, pattern = ROW_CASES[name]
    if pattern == r"row 0: not a JSON object":  # the event's schema says so first
        pattern = r"event 'rows\.0' must be an object"
    table = deployed.world.table(table_name("invoke", name))
    response = invoke(app, {"table": table, "rows": rows})
    error = response.get("error")
    assert error is not None, response
    assert error["type"] in ("BatchRejectedError", "InvalidInputError"), error
    assert re.search(pattern, error["message"]), error["message"][:500]
    assert deployed.world.committed(table) == (0, 0)
    assert deployed.stored(table) == []


def test_an_sqs_record_orjson_reads_but_nested_past_the_limit_fails_alone_naming_the_field(
    app: LambdaHandler, deployed: LambdaWorld, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a record nested 1,000 levels (orjson reads 1,024, so the rows path meets it)
    table = deployed.world.table("sqs_deep_within_orjson")
    bad, good = f"bad-{uuid.uuid4()}", f"good-{uuid.uuid4()}"
    body = record(b'"properties":' + b"[" * 1000 + b"]" * 1000).decode()
    event = {"Records": [sqs_record(bad, body, table), sqs_record(good, GOOD.decode(), table)]}

    # When the handler gets it beside a good one
    caplog.clear()
    response = invoke(app, event)

    # Then it fails alone, naming its row and field; the good one is committed
    assert failures(response) == [bad]
    (reason,) = [
        r.reason
        for r in caplog.records
        if r.getMessage() == "message failed" and r.message_id == bad
    ]
    assert f"row 0 of the message, field 'properties': {DEEP_MESSAGE}" in reason
    assert deployed.world.committed(table) == (1, 1)
    assert deployed.stored(table) == deployed.committed_keys(table) != []


def sqs_record(message_id: str, body: str, table: str) -> dict[str, Any]:
    """An SQS record as Lambda's event source mapping delivers it, routed to ``table``."""
    return {
        "messageId": message_id,
        "receiptHandle": f"handle-{message_id}",
        "body": body,
        "attributes": {},
        "messageAttributes": {
            "table": {
                "stringValue": table,
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": "String",
            }
        },
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:123456789012:icefloe-insert",
        "awsRegion": REGION,
    }


def body_of(case: Case) -> str:
    """The case as an SQS message body: text (SQS carries Unicode), so bytes that are not
    UTF-8 arrive as a lone surrogate's escape, the nearest text gets."""
    if case.name == "invalid-utf8":
        return record(b'"event":"caf\\udcc3"').decode()
    return case.text.decode().strip()


# Why each case's record fails: orjson reads a body (1,024 levels at most), then the rows path.
SQS_REASONS = {
    "deep-json-column": r"message body is nested too deeply",
    "deep-object-column": r"message body is nested too deeply",
    "deep-second-record": r"message body is not JSON: unexpected content after document",
    "deep-record-after-a-megabyte": r"message body is not JSON: unexpected content after document",
    "deep-top-level-array": r"message body is nested too deeply",
    "deep-top-level-object": r"message body is nested too deeply",
    "huge-string": r"row 0 of the message, field 'event': value is over the limit",
    "truncated-array": r"message body is not JSON: unexpected end of data",
    "truncated-mid-value": r"message body is not JSON: unexpected content after document",
    "invalid-utf8": r"message body is not JSON: .*surrogate",
    "nul-byte": r"message body is not JSON: unexpected content after document",
    "a-number": r"message body is not a JSON object",
    "a-string": r"message body is not a JSON object",
    "null": r"message body is not a JSON object",
    "an-array-of-numbers": r"message body is not a JSON object",
    "nested-arrays": r"message body is not a JSON object",
}


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_an_sqs_record_of_each_case_fails_alone_and_its_good_neighbour_commits(
    app: LambdaHandler, deployed: LambdaWorld, case: Case, caplog: pytest.LogCaptureFixture
) -> None:
    # Given one delivery of the case's record beside a good one, both for the same table
    table = deployed.world.table(table_name("sqs", case.name))
    bad, good = f"bad-{uuid.uuid4()}", f"good-{uuid.uuid4()}"
    event = {
        "Records": [sqs_record(bad, body_of(case), table), sqs_record(good, GOOD.decode(), table)]
    }

    # When the handler gets it
    caplog.clear()
    response = invoke(app, event)

    # Then only the case's record is reported failed, saying why; the good one is committed,
    # and the warehouse holds its file alone
    assert failures(response) == [bad]
    (reason,) = [
        r.reason
        for r in caplog.records
        if r.getMessage() == "message failed" and r.message_id == bad
    ]
    assert re.search(SQS_REASONS[case.name], reason), reason[:300]
    assert deployed.world.committed(table) == (1, 1)
    assert deployed.stored(table) == deployed.committed_keys(table) != []
