"""Running a planned query in the warm DuckDB: views bound, time limit, result streamed
against the row and byte caps, DuckDB's errors turned into icefloe's.

:class:`InProcessExecutor` runs in the caller's process;
:class:`icefloe.query.isolation.ChildProcessExecutor` runs the same code in a child process
whose memory the parent watches, so that no query can take the machine's memory.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Iterator, Sequence
from typing import Protocol

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from icefloe.errors import InvalidInputError
from icefloe.query.database import Configure, QueryDatabase
from icefloe.query.sandbox import (
    QueryLimitError,
    QueryRefusedError,
    QueryTimeoutError,
    without_depth_advice,
)
from icefloe.settings.limits import QueryLimits

RESULT_BATCH_ROWS = 65_536
# DuckDB's names of the enum types it creates for a PIVOT that takes its values from the data.
PIVOT_TYPE_PREFIX = "__pivot_enum_"
# A statement that may be such a PIVOT (a wrong guess costs one look at the catalog).
_MAY_PIVOT = re.compile(r"pivot", re.IGNORECASE)

# A statement DuckDB's filter pushdown may answer without its NULL rows
# (:func:`icefloe.query.sql_refs.may_lose_null_rows`) runs in a second database with filter
# pushdown off, which reads every row group of the files the snapshot's pruning kept.
WITHOUT_FILTER_PUSHDOWN = "SET GLOBAL disabled_optimizers = 'filter_pushdown'"


# (table name, the SELECT its view stands for)
ViewBinding = tuple[str, str]


class QueryFailedError(InvalidInputError):
    """DuckDB refused or failed the caller's SQL (a syntax error, an unknown column, ...)."""


class QueryRefusedByDuckDB(QueryFailedError):
    """The locked-down connection refused an access (another file or URL)."""


class QueryReadError(QueryFailedError):
    """A file of the snapshot could not be read (gone, or the store failed)."""


class Executor(Protocol):
    limits: QueryLimits

    def execute(
        self, statement: str, views: Sequence[ViewBinding], *, without_filter_pushdown: bool
    ) -> pa.Table: ...

    def forget_views(self) -> None: ...

    def close(self) -> None: ...


class InProcessExecutor:
    """The warm database of this process."""

    def __init__(
        self, *, root_uri: str, limits: QueryLimits, configure: Configure | None = None
    ) -> None:
        self.limits = limits
        self._database = QueryDatabase(root_uri=root_uri, limits=limits, configure=configure)
        # Opened on its first statement (most processes never run one).
        self._without_pushdown = QueryDatabase(
            root_uri=root_uri,
            limits=limits,
            configure=configure,
            settings=(WITHOUT_FILTER_PUSHDOWN,),
        )

    def execute(
        self, statement: str, views: Sequence[ViewBinding], *, without_filter_pushdown: bool
    ) -> pa.Table:
        """Run ``statement`` over ``views``, with DuckDB's filter pushdown off if
        ``without_filter_pushdown`` (see :data:`WITHOUT_FILTER_PUSHDOWN`)."""
        fired = threading.Event()
        try:
            database = self._without_pushdown if without_filter_pushdown else self._database
            with database.session(views, time_limit_s=self.limits.timeout_s, fired=fired) as cursor:
                result = cursor.execute(statement)
                description = cursor.description
                as_text = text_for_arrow(statement, description)
                if as_text is not None:
                    result = cursor.execute(as_text)
                rows = self._collect(result)
                past = hugeint_past_decimal(rows, description)
                if past:
                    # Run again with those columns as text (rare: a value past 38 digits).
                    again = text_for_arrow(statement, description, hugeint_as_text=past)
                    assert again is not None
                    result = cursor.execute(again)
                    rows = self._collect(result)
                if _MAY_PIVOT.search(statement):
                    _drop_pivot_types(cursor)
                return rows
        except duckdb.InterruptException as e:
            if fired.is_set():
                raise QueryTimeoutError(
                    f"query interrupted after {self.limits.timeout_s:g} s (the time"
                    " limit, ICEFLOE_QUERY_TIMEOUT_S)"
                ) from e
            raise
        except duckdb.Error as e:
            raise translate(e, self.limits) from e

    def _collect(self, result: duckdb.DuckDBPyConnection) -> pa.Table:
        try:
            return collect(result.to_arrow_reader(RESULT_BATCH_ROWS), self.limits)
        except pa.ArrowInvalid as e:
            if "Recursion level" not in str(e):
                raise
            # pyarrow imports a schema nested to about 63 levels at most (DuckDB's go deeper).
            raise QueryRefusedError(
                "query refused: its result's type nests deeper than Arrow holds (about 62"
                " levels of lists, structs and maps); return fewer levels, or the value as"
                " text (CAST(... AS VARCHAR))"
            ) from e

    def forget_views(self) -> None:
        self._database.forget_views()
        self._without_pushdown.forget_views()

    def close(self) -> None:
        self._database.close()
        self._without_pushdown.close()


# Types DuckDB's Arrow export alters: a TIMETZ loses its offset, BIT and BIGNUM become their
# internal bytes, a UHUGEINT past 2^127 a negative decimal. A result holding one (at any depth)
# is given as DuckDB's text of it. Outside quoted names and enum values, upper case: DuckDB
# prints every other name of a type in lower case or quoted.
_ALTERED_IN_ARROW = re.compile(r"\b(?:TIME WITH TIME ZONE|BIT|BIGNUM|UHUGEINT)\b")
# A HUGEINT leaves as decimal128(38, 0), which holds it only up to 38 digits: a value past that
# (to 2^127, 39 digits) makes the column an invalid Arrow array (:func:`hugeint_past_decimal`).
_HUGEINT = re.compile(r"\bHUGEINT\b")
_QUOTED = re.compile(r"""('(?:[^']|'')*'|"(?:[^"]|"")*")""")


def text_for_arrow(
    statement: str,
    description: Sequence[tuple[object, ...]] | None,
    *,
    hugeint_as_text: Collection[int] = (),
) -> str | None:
    """``statement`` with each result column whose type holds one DuckDB's Arrow export alters
    cast to a type holding its text instead (``TIMETZ[]`` to ``VARCHAR[]``), by position, or
    None when no column holds one. The columns at the (0-based) positions ``hugeint_as_text``
    have their HUGEINTs cast to text too."""
    columns = []
    altered = False
    for position, (name, type_code, *_) in enumerate(description or (), start=1):
        parts = _QUOTED.split(str(type_code))
        parts[::2] = [_ALTERED_IN_ARROW.sub("VARCHAR", part) for part in parts[::2]]
        if position - 1 in hugeint_as_text:
            parts[::2] = [_HUGEINT.sub("VARCHAR", part) for part in parts[::2]]
        text_type = "".join(parts)
        if text_type == str(type_code):
            columns.append(f"#{position} AS {_quoted(str(name))}")
        else:
            altered = True
            columns.append(f"CAST(#{position} AS {text_type}) AS {_quoted(str(name))}")
    if not altered:
        return None
    # On lines of its own: the statement may end in a line comment.
    return f"SELECT {', '.join(columns)} FROM (\n{without_semicolons(statement)}\n)"


def hugeint_past_decimal(
    table: pa.Table, description: Sequence[tuple[object, ...]] | None
) -> frozenset[int]:
    """The (0-based) positions of the columns of ``table`` whose DuckDB type holds a HUGEINT,
    at any depth, and which Arrow cannot hold as DuckDB gave them: a value past 38 digits in
    the decimal128(38, 0) it exports a HUGEINT as. Such a column is to be given as DuckDB's
    text of it; one whose every value fits keeps its decimal (``sum(BIGINT)`` is a HUGEINT)."""
    past = set()
    for position, (_, type_code, *_) in enumerate(description or ()):
        parts = _QUOTED.split(str(type_code))
        if not any(_HUGEINT.search(part) for part in parts[::2]):
            continue
        column = table.column(position)
        try:
            column.validate(full=True)
        except pa.ArrowInvalid:
            past.add(position)
            continue
        # -2^127 passes validation (its magnitude is checked through a negation that wraps).
        if any(_holds_int128_min(leaf) for chunk in column.chunks for leaf in _leaves(chunk)):
            past.add(position)
    return frozenset(past)


_INT128_MIN = pa.scalar(b"\x00" * 15 + b"\x80", pa.binary(16))  # little-endian -2^127


def _holds_int128_min(array: pa.Array) -> bool:
    if not pa.types.is_decimal128(array.type) or len(array) == 0:
        return False
    return bool(pc.any(pc.equal(array.view(pa.binary(16)), _INT128_MIN)).as_py())


def _leaves(array: pa.Array) -> Iterator[pa.Array]:
    """The arrays of ``array``'s leaf values at any depth (lists, structs and maps opened)."""
    kind = array.type
    if isinstance(array, pa.DictionaryArray):
        yield from _leaves(array.dictionary)
    elif pa.types.is_map(kind):
        yield from _leaves(array.keys)
        yield from _leaves(array.items)
    elif (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    ):
        yield from _leaves(array.flatten())
    elif pa.types.is_struct(kind):
        for field in array.flatten():
            yield from _leaves(field)
    else:
        yield array


def without_semicolons(statement: str) -> str:
    """``statement`` without the semicolons before its first token and after its last (and
    what follows them), found by DuckDB's tokenizer: a ``;`` in a string, a quoted name or a
    comment is none of them."""
    encoded = statement.encode("utf-8")
    try:
        tokens = [
            (offset, kind == duckdb.token_type.operator and encoded[offset : offset + 1] == b";")
            for offset, kind in duckdb.tokenize(statement)
        ]
    except duckdb.Error:
        return statement
    kept = [offset for offset, semicolon in tokens if not semicolon]
    if not kept:
        return statement
    start = max((o + 1 for o, semicolon in tokens if semicolon and o < kept[0]), default=0)
    end = min((o for o, semicolon in tokens if semicolon and o > kept[-1]), default=len(encoded))
    # Tokens start on character boundaries.
    return encoded[start:end].decode("utf-8")


def _drop_pivot_types(cursor: duckdb.DuckDBPyConnection) -> None:
    """Drop the enum types a PIVOT with values from the data left on ``cursor`` (DuckDB
    creates them as temporary types and keeps them), so that a kept cursor carries nothing
    from one query to the next."""
    for (name,) in cursor.execute(
        "SELECT type_name FROM duckdb_types()"
        " WHERE database_name = 'temp' AND starts_with(type_name, ?)",
        [PIVOT_TYPE_PREFIX],
    ).fetchall():
        cursor.execute(f"DROP TYPE temp.main.{_quoted(name)}")


def _quoted(name: str) -> str:
    """Any name as a DuckDB identifier."""
    return '"' + name.replace('"', '""') + '"'


def collect(reader: pa.RecordBatchReader, limits: QueryLimits) -> pa.Table:
    """The result, batch by batch, refused as soon as it passes a cap."""
    batches: list[pa.RecordBatch] = []
    rows = size = 0
    max_bytes = limits.result_bytes
    for batch in reader:
        rows += batch.num_rows
        size += batch.nbytes
        if rows > limits.max_result_rows:
            raise QueryLimitError(
                f"query result has more than {limits.max_result_rows:,} rows (the result row"
                " limit, ICEFLOE_QUERY_MAX_RESULT_ROWS); aggregate, filter or add a LIMIT"
            )
        if size > max_bytes:
            raise QueryLimitError(
                f"query result is larger than {max_bytes:,} bytes (the result size limit,"
                " ICEFLOE_QUERY_MAX_RESULT_BYTES); select fewer or smaller columns"
            )
        batches.append(batch)
    return pa.Table.from_batches(batches, schema=reader.schema)


def memory_limit_error(limits: QueryLimits, detail: str) -> QueryLimitError:
    return QueryLimitError(
        f"query needs more than {limits.memory_limit} (the memory limit,"
        f" ICEFLOE_QUERY_MEMORY_LIMIT): {detail}"
    )


def translate(error: duckdb.Error, limits: QueryLimits) -> InvalidInputError:
    """DuckDB's error as icefloe's: the kind decides, never the message's words."""
    detail = without_depth_advice(first_line(error))
    if isinstance(error, duckdb.OutOfMemoryException):
        return memory_limit_error(limits, detail)
    if isinstance(error, duckdb.PermissionException):
        return QueryRefusedByDuckDB(f"query refused: {detail}")
    if isinstance(error, duckdb.IOException | duckdb.HTTPException):
        return QueryReadError(f"query failed: {detail}")
    return QueryFailedError(f"query failed: {detail}")


def first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
