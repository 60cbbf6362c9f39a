"""Merge modes as DuckDB SQL over the rows being merged (a view named after the table).

Every query returns the table's columns and ``_row_id``, cast to the spec's types, ordered by
the file sort keys (row-group key first) and then ``_row_id``, so outputs are deterministic.
"""

from __future__ import annotations

from typing import assert_never

import duckdb

from icefloe import duck
from icefloe.duck import ident, key_sql
from icefloe.errors import InvalidInputError
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.query.sandbox import QueryRefusedError, check_sql, lock_down
from icefloe.query.sql_refs import load_tree
from icefloe.query.views import view_sql
from icefloe.settings.limits import QueryLimits
from icefloe.spec import (
    AggregateMode,
    AppendMode,
    CustomMode,
    ReplaceMode,
    TableSpec,
    normalize_type,
)
from icefloe.spec.types import FLOAT_TYPES, decimal_precision_scale
from icefloe.stability import unstable_calls

_AGGREGATE_SQL = {"min": "min", "max": "max", "any": "any_value"}
_FITS = "__icefloe_fits"
# A DOUBLE sum is kept only while the sum of the magnitudes stays below half the largest double,
# so no partial sum, in any order, can round to infinity.
DOUBLE_SUM_LIMIT = 2.0**1023


def merge_sql(spec: TableSpec) -> str:
    """The SELECT that turns the input rows (view ``spec.name``) into the output rows."""
    source = ident(spec.name)
    mode = spec.merge
    if isinstance(mode, AppendMode):
        body = f"SELECT * FROM {source}"
    elif isinstance(mode, ReplaceMode):
        order = [f"{ident(mode.version)} DESC NULLS LAST"] if mode.version else []
        order.append(f"{ident(ROW_ID_COLUMN)} DESC")
        # A row whose key is NULL (in any part) is nobody's newer version: each is kept.
        unkeyed = " OR ".join(f"{ident(k)} IS NULL" for k in mode.key)
        body = (
            f"SELECT * FROM {source} QUALIFY row_number() OVER ("
            f"PARTITION BY {', '.join(ident(k) for k in mode.key)} "
            f"ORDER BY {', '.join(order)}) = 1 OR {unkeyed}"
        )
    elif isinstance(mode, AggregateMode):
        body = aggregate_select(spec, mode)
    elif isinstance(mode, CustomMode):
        body = custom_select(spec, mode)
    else:  # pragma: no cover - MergeMode is closed (mypy checks every mode is handled)
        assert_never(mode)
    return ordered_output(spec, body)


def aggregate_select(spec: TableSpec, mode: AggregateMode) -> str:
    """One row per group, unless a ``sum`` or ``count`` of the group leaves its column's type:
    that group's rows are kept as they are (a merge alters no value and never fails a
    partition for good; re-aggregating in a query gives the same answer either way).

    Sums run in a wider type that cannot overflow (HUGEINT for integers up to 64 bits, BIGNUM
    beyond, DECIMAL(38, s)) and are checked against the column's type; the groups that do not
    fit are found in one pass and their rows read again with a semi join (empty, so cheap, in
    the usual case).
    """
    source = ident(spec.name)
    functions = dict(mode.aggregates)
    names = [c.name for c in spec.columns]
    items: list[str] = []
    checks: list[str] = []
    for column in spec.columns:
        name = ident(column.name)
        if column.name in mode.group_by:
            items.append(name)
            continue
        function = functions[column.name]
        if function in ("sum", "count"):
            value, fits = _checked_sum(name, normalize_type(column.type))
            items.append(f"{value} AS {name}")
            checks.append(fits)
        else:
            items.append(f"{_AGGREGATE_SQL[function]}({name}) AS {name}")
    # The newest contributing row's id: unique, because each input row is in one group.
    items.append(f"max({ident(ROW_ID_COLUMN)}) AS {ident(ROW_ID_COLUMN)}")
    group = ", ".join(ident(k) for k in mode.group_by)
    if not checks:
        return f"SELECT {', '.join(items)} FROM {source} GROUP BY {group}"
    outputs = ", ".join(ident(n) for n in [*names, ROW_ID_COLUMN])
    groups = "__icefloe_groups"
    keys = ", ".join(ident(k) for k in mode.group_by)
    matches = " AND ".join(
        f"{source}.{ident(k)} IS NOT DISTINCT FROM unfit.{ident(k)}" for k in mode.group_by
    )
    return (
        f"WITH {groups} AS (SELECT {', '.join(items)}, {' AND '.join(checks)} AS {_FITS}"
        f" FROM {source} GROUP BY {group}) "
        f"SELECT {outputs} FROM {groups} WHERE {_FITS} "
        f"UNION ALL SELECT {', '.join(f'{source}.{ident(n)}' for n in [*names, ROW_ID_COLUMN])}"
        f" FROM {source} SEMI JOIN (SELECT {keys} FROM {groups} WHERE NOT {_FITS}) AS unfit"
        f" ON {matches}"
    )


def _checked_sum(name: str, column_type: str) -> tuple[str, str]:
    """The exact sum of ``name`` in a type wide enough for it, cast back to ``column_type``
    when the group fits, and the condition that it does."""
    if column_type in ("HUGEINT", "UHUGEINT"):
        # BIGNUM cannot be cast to a 128-bit integer directly in DuckDB 1.5 (it refuses every
        # value); its text can.
        wide = f"CAST(sum(CAST({name} AS BIGNUM)) AS VARCHAR)"
    elif column_type == "DOUBLE":
        total = f"sum({name})"
        return total, f"coalesce(sum(abs({name})) < {DOUBLE_SUM_LIMIT!r}, true)"
    elif column_type == "FLOAT":
        wide = f"sum(CAST({name} AS DOUBLE))"
    elif (parts := decimal_precision_scale(column_type)) is not None:
        precision, scale = parts
        if precision <= 18:
            wide = f"sum(CAST({name} AS DECIMAL(38, {scale})))"
        else:
            # A running DECIMAL sum past 38 digits raises in DuckDB: summed exactly as the
            # unscaled integers (DuckDB writes every digit of the scale), in BIGNUM.
            return _wide_decimal_sum(name, column_type, precision, scale)
    else:
        wide = f"sum(CAST({name} AS HUGEINT))"
    fitted = f"TRY_CAST({wide} AS {column_type})"
    return fitted, f"({wide} IS NULL OR {fitted} IS NOT NULL)"


def _wide_decimal_sum(name: str, column_type: str, precision: int, scale: int) -> tuple[str, str]:
    """The exact sum of a DECIMAL(p, s) column of more than 18 digits, and whether it fits."""
    unscaled = f"sum(CAST(replace(CAST({name} AS VARCHAR), '.', '') AS BIGNUM))"
    largest = "9" * precision
    fits = (
        f"({unscaled} IS NULL OR {unscaled} BETWEEN CAST('-{largest}' AS BIGNUM)"
        f" AND CAST('{largest}' AS BIGNUM))"
    )
    if scale == 0:
        return f"CASE WHEN {fits} THEN CAST(CAST({unscaled} AS VARCHAR) AS {column_type}) END", fits
    text = f"CAST({unscaled} AS VARCHAR)"
    bare = f"ltrim({text}, '-')"
    # (zeros before, to one digit left of the point; DuckDB's lpad would cut a longer text)
    digits = f"repeat('0', greatest(0, {scale + 1} - length({bare}))) || {bare}"
    spelled = (
        f"CASE WHEN starts_with({text}, '-') THEN '-' ELSE '' END"
        f" || left({digits}, length({digits}) - {scale}) || '.' || right({digits}, {scale})"
    )
    return f"CASE WHEN {fits} THEN CAST({spelled} AS {column_type}) END", fits


def ordered_output(spec: TableSpec, body: str) -> str:
    """``body``'s rows with the table's columns cast to their types, in file order."""
    columns = [f"CAST({ident(c.name)} AS {c.type}) AS {ident(c.name)}" for c in spec.columns] + [
        f"CAST({ident(ROW_ID_COLUMN)} AS BLOB) AS {ident(ROW_ID_COLUMN)}"
    ]
    order = [f"{_sort_key_sql(spec, k)} ASC NULLS FIRST" for k in spec.file_sort_keys]
    order.append(ident(ROW_ID_COLUMN))
    return f"SELECT {', '.join(columns)} FROM ({body}) ORDER BY {', '.join(order)}"


def _sort_key_sql(spec: TableSpec, key: str) -> str:
    """``key`` as the merge orders by it. A float key is ordered as ``key + 0.0``, which orders
    the same: DuckDB 1.5 hands back a column it sorts by as the sort saw it, with -0.0 made 0.0,
    and a merge must not change a value."""
    if normalize_type(spec.key_type(key)) in FLOAT_TYPES:
        return f"({key_sql(key)} + 0.0)"
    return key_sql(key)


def custom_select(spec: TableSpec, mode: CustomMode) -> str:
    """The custom query, checked to be one SELECT (it runs on a locked-down connection) that
    gives the same rows every time it runs: a merge retried or redelivered runs it again, and
    a query calling a function DuckDB does not mark CONSISTENT (``random()``, ``now()``) could
    keep other rows the second time."""
    try:
        statement = check_sql(mode.sql, limits=QueryLimits())
    except QueryRefusedError as e:
        raise QueryRefusedError(f"custom merge query refused: {e}") from e
    con = duck.connect()
    try:
        raw = con.execute("SELECT json_serialize_sql(?)", [statement]).fetchone()
    finally:
        con.close()
    tree = (
        load_tree(raw[0], refused="custom merge query refused", error=QueryRefusedError)
        if raw is not None
        else {}
    )
    columns = [spec.name, ROW_ID_COLUMN, *(c.name for c in spec.columns)]
    unstable = unstable_calls(tree.get("statements"), columns=columns)
    if unstable:
        raise QueryRefusedError(
            f"custom merge query refused: {unstable[0].describe()}; a merge may run its query"
            " again (a retry, a redelivery) and must keep the same rows each time"
        )
    return statement


def check_merge_query(spec: TableSpec) -> None:
    """Refuse, before the table exists, a merge mode that every merge of it would refuse: a
    custom query that is not one SELECT, does not parse or bind over the table's columns, or
    reads anything but the rows being merged. Runs the merge query over no rows, on a
    connection locked down as the merge worker's is."""
    if not isinstance(spec.merge, CustomMode):
        return
    body = custom_select(spec, spec.merge)
    con = duck.connect()
    try:
        con.execute(view_sql(spec, None, None))
        lock_down(con, limits=QueryLimits())
        returned = {d[0] for d in con.execute(f"SELECT * FROM ({body}) LIMIT 0").description}
        missing = [c for c in [*(c.name for c in spec.columns), ROW_ID_COLUMN] if c not in returned]
        if missing:
            raise InvalidInputError(
                f"custom merge query of {spec.name!r} refused: it must return every column of"
                f" the table and {ROW_ID_COLUMN}; it does not return {', '.join(missing)}"
            )
        con.execute(merge_sql(spec)).fetchall()
    except duckdb.Error as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InvalidInputError(f"custom merge query of {spec.name!r} refused: {first}") from e
    finally:
        con.close()
