"""Generated columns' values, computed at insert.

A loaded batch (every input path ends in the same Arrow table of the spec's columns) gets each
generated column's value from its expression, evaluated by DuckDB over the batch's columns at
their table types, in UTC: what a query of the table would compute from the same row. Input
may not give a generated column a value: a row that does is refused, naming the row and the
column. A computed value passes the checks an input value of the column's type passes
(finite numbers, times Python can read, text within the size limit); a row whose expression
fails (a cast of text that is not a number) or gives a value that fails them is refused,
naming the row.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import duckdb
import pyarrow as pa

from icefloe.duck import ident, string_literal
from icefloe.errors import RowProblem
from icefloe.ingest.columns import value_checks
from icefloe.ingest.conversion import identity_sources, refuse
from icefloe.ingest.sources import InsertLimits
from icefloe.spec import Column, TableSpec

_BATCH = "__icefloe_generated_input"
# What each code :func:`icefloe.ingest.columns.value_checks` gives means, in words.
_PROBLEMS = {
    "range": "its value is outside the years 1 to 9999",
    "finite": "its value is not a finite number",
    "type": "its value is not one its type may hold (a TIME is before 24:00:00)",
    "nul": "its value holds a NUL character (it is a partition value)",
    "json": "its value is not standard JSON",
    "size": "its value is longer than the value size limit",
}


def _problem(code: str) -> str:
    """``code``'s words; a code not listed above still refuses the value, by its code."""
    return _PROBLEMS.get(code, f"its value fails the {code!r} check of its type")


def with_generated_values(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, rows: pa.Table, *, limits: InsertLimits
) -> pa.Table:
    """``rows`` (the spec's columns, generated ones NULL) with each generated column computed."""
    generated = [c for c in spec.columns if c.generated]
    if not generated:
        return rows
    for column in generated:
        given = rows.column(column.name)
        if given.null_count < len(given):
            row = next(i for i, v in enumerate(given.is_valid().to_pylist()) if v)
            raise refuse(
                [
                    RowProblem(
                        row=row,
                        field=column.name,
                        message="a generated column takes no value from the input (insert"
                        " computes it from its expression); leave the field out",
                    )
                ]
            )
    try:
        computed = _compute(con, spec, generated, rows, limits)
    except duckdb.Error:
        raise refuse([_first_failure(con, spec, generated, rows, limits)]) from None
    problems = [
        RowProblem(row=row, field=name, message=f"generated from its expression, {_problem(code)}")
        for row, name, code in _failed_checks(computed, generated)
    ]
    if problems:
        raise refuse(problems[:1], total=len(problems))
    for column in generated:
        position = rows.schema.get_field_index(column.name)
        field = rows.field(position)  # the loader's Arrow type for the column's type
        rows = rows.set_column(position, field, computed.column(column.name).cast(field.type))
    return rows


def _compute(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    generated: Sequence[Column],
    rows: pa.Table,
    limits: InsertLimits,
) -> pa.Table:
    """Each generated column's value, and its check code (``__check_<name>``: NULL when the
    value passes), row by row."""
    cursor = con.cursor()
    try:
        cursor.register(_BATCH, rows)
        return cursor.execute(_computed_sql(spec, generated, _BATCH, limits)).to_arrow_table()
    finally:
        cursor.close()


def _computed_sql(
    spec: TableSpec, generated: Sequence[Column], source: str, limits: InsertLimits
) -> str:
    outputs = ", ".join(
        part for c in generated for part in (ident(c.name), _check_sql(c, spec, limits))
    )
    return (
        f"SELECT {outputs} FROM (SELECT {_values_sql(generated)} FROM {_inputs_sql(spec, source)})"
    )


def _inputs_sql(spec: TableSpec, source: str) -> str:
    """``source``'s input columns at their table types, named by the table (what an
    expression reads, ``events.properties`` included)."""
    inputs = ", ".join(
        f"CAST({ident(c.name)} AS {c.type}) AS {ident(c.name)}"
        for c in spec.columns
        if not c.generated
    )
    return f"(SELECT {inputs} FROM {source}) AS {ident(spec.name)}"


def generated_problem(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    column: Column,
    source: str,
    *,
    limits: InsertLimits,
) -> str | None:
    """What stops ``column`` being computed for every row of ``source`` (a FROM source of the
    spec's input columns) as insert would compute it, in words; None when nothing does. How
    adding a generated column checks the rows a table holds. A ``source`` that cannot be read
    raises DuckDB's IOException: that is not the expression's failure."""
    try:  # count() makes DuckDB compute every value, even where no check applies
        found = con.execute(
            f"SELECT count({ident(column.name)}), min({ident('__check_' + column.name)})"
            f" FROM ({_computed_sql(spec, [column], source, limits)})"
        ).fetchone()
    except duckdb.IOException:
        raise  # ``source`` could not be read (a file gone, the store failing): no row's fault
    except duckdb.Error as e:
        return f"its expression fails: {str(e).strip().splitlines()[0]}"
    return None if found is None or found[1] is None else _problem(found[1])


def _values_sql(generated: Sequence[Column]) -> str:
    return ", ".join(f"{generated_value_sql(c)} AS {ident(c.name)}" for c in generated)


def generated_value_sql(column: Column) -> str:
    """A generated column's value: its expression over the row's input columns (at their table
    types, the table's name naming the row), cast to its type. Insert refuses a row it fails
    on; :func:`computed_value_sql` is its reading for rows written before the column."""
    return f"CAST(({column.expression}) AS {column.type})"


def _check_sql(column: Column, spec: TableSpec, limits: InsertLimits) -> str:
    v = ident(column.name)
    checks = value_checks(
        column.type,
        v,
        max_value_bytes=limits.max_value_bytes,
        partition_source=column.name in identity_sources(spec),
    )
    name = ident("__check_" + column.name)
    if not checks:
        return f"CAST(NULL AS VARCHAR) AS {name}"
    cases = " ".join(f"WHEN {c} THEN {string_literal(k)}" for c, k in checks)
    return f"CASE WHEN {v} IS NULL THEN NULL {cases} END AS {name}"


def _failed_checks(computed: pa.Table, generated: Sequence[Column]) -> list[tuple[int, str, str]]:
    failed = []
    for column in generated:
        codes = computed.column("__check_" + column.name)
        if codes.null_count == len(codes):
            continue
        failed += [(row, column.name, code) for row, code in enumerate(codes.to_pylist()) if code]
    return sorted(failed)


def _first_failure(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    generated: Sequence[Column],
    rows: pa.Table,
    limits: InsertLimits,
) -> RowProblem:
    """The first row (and column) whose expression DuckDB cannot compute: halves of the batch
    are tried until one row is left, then each generated column on it."""
    start, stop = 0, rows.num_rows
    while stop - start > 1:
        middle = (start + stop) // 2
        try:
            _compute(con, spec, generated, rows.slice(start, middle - start), limits)
        except duckdb.Error:
            stop = middle
        else:
            start = middle
    row = rows.slice(start, 1)
    for column in generated:
        try:
            _compute(con, spec, [column], row, limits)
        except duckdb.Error as e:
            first = str(e).strip().splitlines()[0]
            return RowProblem(
                row=start, field=column.name, message=f"its expression fails: {first}"
            )
    return RowProblem(row=start, field=None, message="a generated column's expression fails")


def computed_columns_sql(spec: TableSpec, missing: Collection[str], source: str) -> str:
    """A SELECT of the generated columns named in ``missing`` (in spec order), computed as
    :func:`icefloe.query.views.files_source` computes them, over ``source``: rows holding the
    spec's input columns in types DuckDB casts to theirs (how Spark's readers compute them,
    batch by batch)."""
    values = ", ".join(
        f"{computed_value_sql(c)} AS {ident(c.name)}" for c in spec.columns if c.name in missing
    )
    return f"SELECT {values} FROM {_inputs_sql(spec, source)}"


def computed_value_sql(column: Column) -> str:
    """A generated column's value for a row of a file written before the column was added:
    its expression cast to its type, NULL where the expression fails."""
    return f"TRY({generated_value_sql(column)})"
