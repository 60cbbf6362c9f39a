"""One error hierarchy: every exception icefloe raises to its callers is an ``IcefloeError``
whose type says what went wrong, and those reporting bad input are still ``ValueError``s."""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import pkgutil
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pytest

import icefloe
from icefloe import duck
from icefloe.aws.functions import merge_worker
from icefloe.aws.functions.insert import InsertCrashedError
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry
from icefloe.datafiles import encode_parquet
from icefloe.errors import (
    IcefloeError,
    InvalidArgumentError,
    InvalidEventError,
    InvalidInputError,
    InvalidNameError,
)
from icefloe.merge.handler import process_merge_records
from icefloe.merge.worker import MergeWorker
from icefloe.query.output import write_result
from icefloe.spec import TableSpec

PACKAGE = Path(icefloe.__file__).resolve().parent

# Raises of bare builtin exceptions that stay, each for its reason (at most this many a file):
LEFT_AS_THEY_ARE = {
    # Parse helpers documented to raise ValueError; their one caller (from_path_value, in the
    # same try) turns it into an InvalidInputError naming the partition.
    "spec/_values.py": 4,
    "spec/partitioning.py": 1,
    # _integer's TypeError is caught two frames up: the constant is then "unknown".
    "query/scan_filters.py": 2,
    # json.dump's `default` protocol: TypeError for what it cannot encode.
    "cli/output.py": 1,
    # orjson's `default` protocol too; rows_batch turns it into a refusal naming the field.
    "ingest/native_values.py": 3,
}
# Exception classes outside the hierarchy, each for its reason:
_BUILTINS = {"ValueError", "RuntimeError", "TypeError", "Exception", "KeyError", "LookupError"}


def _modules() -> list[Any]:
    names = [
        m.name
        for m in pkgutil.walk_packages(icefloe.__path__, "icefloe.")
        if not m.name.endswith("__main__")
    ]
    return [importlib.import_module(name) for name in names]


def test_every_public_exception_class_of_icefloe_is_an_icefloe_error() -> None:
    strays = [
        f"{module.__name__}.{name}"
        for module in _modules()
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
        and not name.startswith("_")  # private control flow, caught where it is raised
        and not issubclass(value, IcefloeError)
    ]
    assert strays == []


def test_no_bare_builtin_exception_is_raised_beyond_those_left_for_a_reason() -> None:
    counts: dict[str, int] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id in _BUILTINS:
                where = path.relative_to(PACKAGE).as_posix()
                counts[where] = counts.get(where, 0) + 1
    over = {k: v for k, v in counts.items() if v > LEFT_AS_THEY_ARE.get(k, 0)}
    assert over == {}


def test_input_and_argument_errors_are_still_value_errors() -> None:
    for cls in (InvalidInputError, InvalidNameError, InvalidEventError, InvalidArgumentError):
        assert issubclass(cls, IcefloeError)
        assert issubclass(cls, ValueError)
    # A bug in the calling code is not the sender's bad input: boundaries that refuse input
    # (the insert function, the queue's grouping) must not answer it as a refusal.
    assert not issubclass(InvalidArgumentError, InvalidInputError)


def test_a_crashed_insert_is_an_icefloe_error() -> None:
    assert issubclass(InsertCrashedError, IcefloeError)
    assert not issubclass(InsertCrashedError, InvalidInputError)


def test_duckdb_names_and_literals_refuse_unsafe_text_with_icefloe_errors() -> None:
    with pytest.raises(InvalidNameError, match="not a safe identifier"):
        duck.ident('x"; DROP TABLE t; --')
    with pytest.raises(InvalidNameError, match="not a safe name"):
        duck.name_literal("a'b")
    with pytest.raises(InvalidInputError, match="control character in SQL string"):
        duck.string_literal("tenant\x00")
    with pytest.raises(InvalidArgumentError, match="bad DuckDB memory limit"):
        duck.connect(memory_limit="lots")


def test_parquet_output_without_a_file_is_an_argument_error() -> None:
    with pytest.raises(InvalidArgumentError, match="parquet output needs a file"):
        write_result(pa.table({"a": [1]}), fmt="parquet", out=io.StringIO())


def test_row_group_sizes_that_do_not_add_up_are_an_argument_error() -> None:
    with pytest.raises(InvalidArgumentError, match="row group sizes add up to 2, not 3 rows"):
        encode_parquet(
            pa.table({"a": [1, 2, 3]}),
            spec=TableSpec.create(name="t", schema="a BIGINT"),
            row_group_sizes=[1, 1],
        )


def test_merge_events_not_from_sqs_are_invalid_events() -> None:
    worker = cast(MergeWorker, object())
    kinesis = {"Records": [{"eventSource": "aws:kinesis", "messageId": "m"}]}
    with pytest.raises(InvalidEventError, match="unsupported event source 'aws:kinesis'"):
        process_merge_records(kinesis, worker=worker)
    telemetry = cast(FunctionTelemetry, object())
    with pytest.raises(InvalidEventError, match="expected an SQS event"):
        # refused before the container builds anything
        merge_worker.handle({"detail": {}}, container=Container(), telemetry=telemetry)
