"""The DuckDB conversion: rows of a typed source (CSV, Parquet, Arrow, or JSON read as JSON
fields) converted to the table's types in one vectorized scan that also computes an error code
per row. Only a refused batch goes back to Python, to word messages naming rows and fields.
Also the check of typed Arrow input's JSON text alone (:func:`json_text_holds`)."""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from icefloe.duck import ident
from icefloe.errors import BatchRejectedError, RowProblem
from icefloe.ingest.columns import ColumnSQL, expected, sql_column
from icefloe.ingest.json_depth import any_deeper_than, rows_deeper_than
from icefloe.ingest.nested_typed import layout_problems, typed_nested_column
from icefloe.ingest.sources import InsertLimits
from icefloe.ingest.strict_json import may_not_be_standard
from icefloe.spec import Column, TableSpec
from icefloe.spec.type_tree import is_nested_text
from icefloe.spec.types import is_list

MAX_PROBLEMS = 5


def load_typed(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    source: str,
    params: dict[str, str],
    kind: str,
    limits: InsertLimits,
) -> pa.Table:
    """Rows of a typed ``source`` (a CSV or Parquet reader, or a registered Arrow table)."""
    try:
        described = con.execute(f"DESCRIBE SELECT * FROM {source}", params).fetchall()
    except (duckdb.InvalidInputException, duckdb.IOException) as e:
        raise BatchRejectedError(f"batch refused: not a readable {kind} file: {e}") from e
    except duckdb.NotImplementedException as e:  # an Arrow type DuckDB cannot scan
        raise BatchRejectedError(
            f"batch refused: {kind} input of a type DuckDB cannot read: {e}"
        ) from e
    source_types = {str(row[0]): str(row[1]) for row in described}
    unknown = [name for name in source_types if name not in spec.column_names]
    if unknown:
        raise refuse(
            [
                RowProblem(
                    row=None, field=name, message="unknown field (the table has no such column)"
                )
                for name in unknown
            ]
        )
    nested = {
        c.name
        for c in spec.columns
        if c.name in source_types and _converted_nested(c.type, source_types[c.name])
    }
    layout = [
        problem
        for c in spec.columns
        if c.name in nested
        for problem in layout_problems(c, source_types[c.name])
    ]
    if layout:
        raise refuse(layout)
    sqls = [
        typed_nested_column(c, source_types[c.name], max_value_bytes=limits.max_value_bytes)
        if c.name in nested
        else sql_column(
            c,
            source_type=source_types.get(c.name),
            max_value_bytes=limits.max_value_bytes,
            max_json_depth=limits.max_json_depth,
            partition_source=c.name in identity_sources(spec),
        )
        for c in spec.columns
    ]
    count = con.execute(f"SELECT count(*) FROM {source}", params).fetchone()
    assert count is not None
    check_row_count(int(count[0]), limits)
    return convert(con, sqls, source, params, limits)


def _converted_nested(kind: str, source_type: str) -> bool:
    """Whether a column of type ``kind`` is converted from a typed source of DuckDB type
    ``source_type`` part by part (:mod:`~icefloe.ingest.nested_typed`): a nested type, or a
    list from a source list, whose elements then get a column's checks one by one (a list
    CAST as a whole takes infinities, years past 9999, oversized text, and rounds a DOUBLE
    into an integer). A list from text (CSV) is parsed as a whole, and its elements checked
    after (:func:`~icefloe.ingest.columns.value_checks`)."""
    return is_nested_text(kind) or (is_list(kind) and source_type.endswith("[]"))


def check_row_count(rows: int, limits: InsertLimits) -> None:
    if rows == 0:
        raise BatchRejectedError("batch refused: it holds no rows")
    if rows > limits.max_rows:
        raise BatchRejectedError(
            f"batch refused: {rows:,} rows is over the limit of {limits.max_rows:,} rows a batch"
        )


def convert(
    con: duckdb.DuckDBPyConnection,
    sqls: Sequence[ColumnSQL],
    source: str,
    params: dict[str, str],
    limits: InsertLimits,
) -> pa.Table:
    try:
        table = con.execute(_conversion_query(sqls, source), params).to_arrow_table()
    except (duckdb.InvalidInputException, duckdb.ConversionException) as e:
        raise BatchRejectedError(f"batch refused: {e}") from e
    except UnicodeDecodeError as e:
        # DuckDB's message about bytes that are not UTF-8 quotes them, and its Python binding
        # then fails to decode the message itself.
        raise NotUtf8Error("batch refused: the input holds bytes that are not UTF-8") from e
    errors_column = table.column("__errors")
    table = table.drop_columns(["__errors"])
    if errors_column.null_count < len(errors_column):
        nested = _nested_problems(con, sqls, source, params, errors_column)
        problems, total = _problems(table, errors_column, sqls, limits, nested)
        if problems:
            raise refuse(problems, total=total)
    return table


_FAILING_ROWS = "__icefloe_failing_rows"
# Per (row, column position): the (path, kind, type) of each bad part of a nested value.
NestedProblems = dict[tuple[int, int], list[tuple[str, str, str]]]


def _nested_problems(
    con: duckdb.DuckDBPyConnection,
    sqls: Sequence[ColumnSQL],
    source: str,
    params: dict[str, str],
    errors: pa.ChunkedArray,
) -> NestedProblems:
    """The paths at fault in the nested values the conversion found bad, diagnosed over those
    rows only."""
    rows: dict[int, list[int]] = {}
    failing = pc.indices_nonzero(pc.is_valid(errors)).to_pylist()
    for index, codes in zip(failing, errors.take(failing).to_pylist(), strict=True):
        for code in str(codes).split(","):
            at, _, kind = code.partition(":")
            if kind == "nested":
                rows.setdefault(int(at), []).append(index)
    found: NestedProblems = {}
    for position, indices in rows.items():
        diagnosis = sqls[position].diagnosis
        assert diagnosis is not None, "a nested code comes from a column with a diagnosis"
        numbered = f"SELECT row_number() OVER () - 1 AS __row, * FROM {source}"
        con.register(_FAILING_ROWS, pa.table({"__row": pa.array(indices, pa.int64())}))
        try:
            result = con.execute(
                f"SELECT __row, {diagnosis} FROM ({numbered})"
                f" SEMI JOIN {_FAILING_ROWS} USING (__row)",
                params,
            ).fetchall()
        finally:
            con.unregister(_FAILING_ROWS)
        for row, problems in result:
            found[(int(row), position)] = [(p["path"], p["kind"], p["type"]) for p in problems]
    return found


def _conversion_query(sqls: Sequence[ColumnSQL], source: str) -> str:
    """Each column's typed value, and ``__errors``: NULL for a row that passes, else the
    error codes of its bad fields."""
    # Inner: each typed value and each presence flag once. Outer: error codes from those.
    values = ", ".join(ident(s.column.name) for s in sqls)
    errors = ", ".join(f"'{i}:' || ({s.error})" for i, s in enumerate(sqls))
    return (
        f"SELECT {values}, NULLIF(concat_ws(',', {errors}), '') AS __errors"
        f" FROM ({_typed_values(sqls, source)})"
    )


def _failing_rows_query(sqls: Sequence[ColumnSQL], source: str) -> str:
    """How many rows :func:`_conversion_query` would give error codes, without building the
    codes' text (three quarters of the time, on a clean batch)."""
    failing = " OR ".join(f"({s.error}) IS NOT NULL" for s in sqls)
    return f"SELECT count(*) FROM ({_typed_values(sqls, source)}) WHERE {failing}"


def _typed_values(sqls: Sequence[ColumnSQL], source: str) -> str:
    """Each column's typed value and presence flag, computed once for the error codes; the
    columns' layers (a nested column's parse, its nodes, its leaves' values) below, each a
    subquery of its own, every alias carried up."""
    inner = ", ".join(
        f"{s.value} AS {ident(s.column.name)}, {s.present} AS {s.present_alias}" for s in sqls
    )
    layers: list[list[tuple[str, str]]] = []
    for s in sqls:
        for depth, own in enumerate(s.layers):
            if depth == len(layers):
                layers.append([])
            layers[depth].extend(own)
    layers = [layer for layer in layers if layer]
    if not layers:
        return f"SELECT {inner} FROM {source}"
    below = source
    for layer in layers:
        computed = ", ".join(f"{expression} AS {alias}" for alias, expression in layer)
        below = f"(SELECT *, {computed} FROM {below})"
    carried = ", ".join(alias for layer in layers for alias, _ in layer)
    return f"SELECT {inner}, {carried} FROM {below}"


class NotUtf8Error(BatchRejectedError):
    """The conversion met bytes that are not UTF-8 (a JSON input then finds the row)."""


def _problems(
    table: pa.Table,
    errors: pa.ChunkedArray,
    sqls: Sequence[ColumnSQL],
    limits: InsertLimits,
    nested: NestedProblems,
) -> tuple[list[RowProblem], int]:
    problems: list[RowProblem] = []
    total = 0
    rows = pc.indices_nonzero(pc.is_valid(errors)).to_pylist()
    codes = [str(c).split(",") for c in errors.take(rows).to_pylist()]
    deep = _too_deep(table, sqls, rows, codes, limits)
    for index, row_codes in zip(rows, codes, strict=True):
        for code in row_codes:
            position, _, kind = code.partition(":")
            column = sqls[int(position)].column
            if kind == "depth?":
                if index not in deep[int(position)]:
                    continue
                kind = "depth"
            if kind == "nested":
                found = _nested_row_problems(
                    index, column, nested.get((index, int(position)), []), limits
                )
                total += len(found)
                problems += found[: max(0, MAX_PROBLEMS - len(problems))]
                continue
            total += 1
            if len(problems) < MAX_PROBLEMS:
                problems.append(
                    RowProblem(
                        row=index, field=column.name, message=_message(kind, column.type, limits)
                    )
                )
    return problems, total


def _nested_row_problems(
    row: int, column: Column, found: list[tuple[str, str, str]], limits: InsertLimits
) -> list[RowProblem]:
    """The problems of one bad nested value; one naming the column when the diagnosis found
    none (the batch is refused all the same: the conversion's check is what decides)."""
    if not found:
        return [RowProblem(row=row, field=column.name, message=f"expected {expected(column.type)}")]
    return [
        RowProblem(row=row, field=path, message=_message(kind, type_name, limits))
        for path, kind, type_name in found
    ]


def _message(kind: str, type_name: str, limits: InsertLimits) -> str:
    if kind == "missing":
        return "required, but missing or null"
    if kind == "range":
        element = type_name
        while element.endswith("[]"):
            element = element[:-2]
        what = "a date" if element == "DATE" else "a timestamp"
        return f"expected {what} from year 1 to 9999 ({type_name}); infinities are refused"
    if kind == "offset":
        return (
            "UTC offset out of range: expected one from -18:00 to +18:00, minutes 00 to 59"
            f" ({type_name})"
        )
    if kind == "finite":
        return (
            f"expected a finite number ({type_name}): NaN and infinities are refused"
            " (send null for a missing value)"
        )
    if kind == "json":
        return "expected standard JSON (no NaN, no Infinity, no comma before a closing bracket)"
    if kind == "nul":
        return "a partition value may not hold a NUL character"
    if kind == "size":
        return f"value is over the limit of {limits.max_value_bytes:,} bytes"
    if kind == "depth":
        return f"JSON is nested more than {limits.max_json_depth} levels deep"
    if kind == "unknown":
        return "unknown field (the struct has no such field)"
    if kind == "unkept":
        return (
            "unknown field (the struct has no such field; unknown fields under a list"
            " or a map are not kept)"
        )
    if kind == "key":
        return f"map key: expected {expected(type_name)} ({type_name})"
    if kind == "duplicate":
        return "given more than once in its object"
    if kind == "same_keys":
        return "two map keys convert to one key of the map's key type"
    return f"expected {expected(type_name)} ({type_name})"


def _too_deep(
    table: pa.Table,
    sqls: Sequence[ColumnSQL],
    rows: list[int],
    codes: list[list[str]],
    limits: InsertLimits,
) -> dict[int, set[int]]:
    """Per column position, the rows whose JSON the bound flagged (``depth?``) that are nested
    too deeply indeed: each column's suspects decided together."""
    suspects: dict[int, list[int]] = {}
    for index, row_codes in zip(rows, codes, strict=True):
        for code in row_codes:
            position, _, kind = code.partition(":")
            if kind == "depth?":
                suspects.setdefault(int(position), []).append(index)
    deep: dict[int, set[int]] = {n: set() for n in range(len(sqls))}
    for n, indices in suspects.items():
        text = table.column(sqls[n].column.name).take(indices)
        deep[n] = {indices[i] for i in rows_deeper_than(text, limits.max_json_depth)}
    return deep


def refuse(problems: Sequence[RowProblem], *, total: int | None = None) -> BatchRejectedError:
    shown = "; ".join(str(p) for p in problems[:MAX_PROBLEMS])
    more = ""
    if total is not None and total > len(problems[:MAX_PROBLEMS]):
        more = f" (and {total - len(problems[:MAX_PROBLEMS])} more)"
    return BatchRejectedError(
        f"batch refused: {shown}{more}", problems=tuple(problems), total=total
    )


def identity_sources(spec: TableSpec) -> frozenset[str]:
    """Columns whose values become partition values (kept in the meta store as they are)."""
    return frozenset(f.source for f in spec.partition_by if f.transform == "identity")


# Rows of JSON text DuckDB checks in one query; a bigger batch is checked in slices, two at a
# time (each query runs on its own cursor, without the GIL).
_JSON_CHECK_SLICE_ROWS = 1 << 17
_JSON_CHECK_THREADS = 2


def json_text_holds(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    table: pa.Table,
    columns: list[Column],
    limits: InsertLimits,
) -> bool:
    """Whether every value of the JSON text columns passes the conversion's checks (valid JSON,
    no NaN, Infinity or trailing comma, size, depth). Only the error codes come back from
    DuckDB, not the text: a value that passes is stored as it is. False when any row needs a
    message. Each column's whole text is searched at once (outside DuckDB, beside its checks)
    for anything like NaN or a trailing comma; DuckDB searches each value of a column only
    when that search found a suspect."""
    partition_sources = identity_sources(spec)
    text = table.select([c.name for c in columns])

    def query(searched: Collection[str], of: Collection[str] | None = None) -> str:
        """The checks of the columns ``of`` (all by default), searching each value of the
        columns ``searched`` for NaN and trailing commas."""
        sqls = [
            sql_column(
                c,
                source_type="VARCHAR",
                max_value_bytes=limits.max_value_bytes,
                max_json_depth=None,  # checked exactly beside, in Arrow
                partition_source=c.name in partition_sources,
                json_proven_standard=c.name not in searched,
            )
            for c in columns
            if of is None or c.name in of
        ]
        return _failing_rows_query(sqls, "__icefloe_json_text")

    def suspects() -> list[str]:
        return [c.name for c in columns if may_not_be_standard(text.column(c.name))]

    def too_deep() -> bool:
        # Exact for valid JSON; DuckDB's check of validity fails any other batch anyway.
        return any(any_deeper_than(text.column(c.name), limits.max_json_depth) for c in columns)

    failed = threading.Event()  # one failing slice settles it: the rest are skipped

    def passes(start: int, sql: str) -> bool:
        if failed.is_set():
            return False
        with con.cursor() as cursor:
            cursor.register("__icefloe_json_text", text.slice(start, _JSON_CHECK_SLICE_ROWS))
            try:
                found = cursor.execute(sql).fetchone()
            except (duckdb.Error, UnicodeDecodeError):
                found = None
        if found is None or found[0] != 0:
            failed.set()
            return False
        return True

    starts = range(0, text.num_rows, _JSON_CHECK_SLICE_ROWS)
    if len(starts) == 1:
        return passes(0, query(suspects())) and not too_deep()
    with ThreadPoolExecutor(max_workers=_JSON_CHECK_THREADS + 2) as pool:
        searched = pool.submit(suspects)  # beside DuckDB's checks of the rest
        deep = pool.submit(too_deep)
        rest = query(())
        if not all(pool.map(lambda start: passes(start, rest), starts)) or deep.result():
            return False
        found = searched.result()
        if not found:
            return True
        # A suspect (often a string that spells "nan"): DuckDB searches those columns' values.
        only = query(found, of=found)
        return all(pool.map(lambda start: passes(start, only), starts))
