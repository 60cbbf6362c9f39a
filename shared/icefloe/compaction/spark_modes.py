"""Merge modes compiled to Spark: what :mod:`icefloe.merge.modes` runs in DuckDB, over the
rows of whole partitions (each group and key taken within its partition).

Append keeps every row; replace keeps the newest row per key (and every row whose key is
NULL); aggregate keeps one row per
group, unless a ``sum`` or ``count`` of the group leaves its column's type: that group's rows
are kept as they are, as the merge worker keeps them (a merge alters no value, and a
partition is never failed for good by its data). A custom query is DuckDB SQL and runs with
the DuckDB engine only, as do tables Spark cannot merge as DuckDB does
(:func:`check_spark_can_merge`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial, reduce
from typing import TYPE_CHECKING

from icefloe.errors import IcefloeError
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.merge.modes import DOUBLE_SUM_LIMIT
from icefloe.spark_files import SPARK_UNREADABLE_TYPES, holds_map, leaf_types
from icefloe.spec import (
    AggregateMode,
    AppendMode,
    CustomMode,
    ReplaceMode,
    TableSpec,
    normalize_type,
)
from icefloe.spec.types import decimal_precision_scale

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame

_FITS = "__icefloe_fits"
_INTEGER_BITS = {
    "TINYINT": (8, True),
    "SMALLINT": (16, True),
    "INTEGER": (32, True),
    "BIGINT": (64, True),
    "UTINYINT": (8, False),
    "USMALLINT": (16, False),
    "UINTEGER": (32, False),
    "UBIGINT": (64, False),
}
# The smallest double that a cast to FLOAT rounds to infinity (FLOAT_MAX plus half its ulp, a
# tie rounded to even): DuckDB's TRY_CAST of a sum to FLOAT fails from there on.
_FLOAT_OVERFLOW = 2.0**128 - 2.0**103
# Leaf types Spark cannot merge as DuckDB does: HUGEINT is read as DECIMAL(38, 0), which
# holds 38 digits where a HUGEINT may have 39.
_UNMERGEABLE_TYPES = {"HUGEINT": "HUGEINT values (Spark reads them as DECIMAL(38,0), too narrow)"}
_TO_DUCKDB = "compact it with the DuckDB engine (icefloe compact --engine duckdb)"


class SparkMergeUnsupportedError(IcefloeError):
    """The table cannot be compacted in Spark (a custom DuckDB query, a column type Spark
    cannot read or hold, a MAP key): it is compacted with the DuckDB engine."""


def check_spark_can_merge(spec: TableSpec, *, written_by: Iterable[TableSpec] = ()) -> None:
    """Raise :class:`SparkMergeUnsupportedError` when Spark cannot compact ``spec``'s table
    as the merge worker would: a custom DuckDB query; a column, at any depth, of a type Spark
    cannot read (TIME) or hold (HUGEINT) in ``spec`` or in the specs the input files were
    written by (``written_by``: their columns dropped since are in the files too); a MAP, at
    any depth, in a replace or aggregate key (Spark can neither group nor order by one)."""
    if isinstance(spec.merge, CustomMode):
        raise SparkMergeUnsupportedError(
            f"table {spec.name!r} merges with a custom DuckDB query, which Spark cannot run;"
            f" {_TO_DUCKDB}"
        )
    for held in (spec, *written_by):
        for column in held.columns:
            leaves = leaf_types(column.type)
            for name in sorted(leaves & SPARK_UNREADABLE_TYPES.keys()):
                raise SparkMergeUnsupportedError(
                    f"table {spec.name!r}: column {column.name!r} ({column.type}) holds"
                    f" {SPARK_UNREADABLE_TYPES[name]}; {_TO_DUCKDB}"
                )
            for name in sorted(leaves & _UNMERGEABLE_TYPES.keys()):
                raise SparkMergeUnsupportedError(
                    f"table {spec.name!r}: column {column.name!r} ({column.type}) holds"
                    f" {_UNMERGEABLE_TYPES[name]}; {_TO_DUCKDB}"
                )
    mode = spec.merge
    keys = mode.key if isinstance(mode, ReplaceMode) else ()
    keys = mode.group_by if isinstance(mode, AggregateMode) else keys
    for key in keys:
        column = spec.column(key)
        if holds_map(column.type):
            raise SparkMergeUnsupportedError(
                f"table {spec.name!r}: the merge key {key!r} ({column.type}) holds a MAP,"
                f" which Spark can neither group nor order by; {_TO_DUCKDB}"
            )


def apply_mode(spec: TableSpec, rows: DataFrame, *, partition_column: str) -> DataFrame:
    """The table's merge mode over ``rows``, per partition (``partition_column``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    mode = spec.merge
    if isinstance(mode, AppendMode):
        return rows
    if isinstance(mode, ReplaceMode):
        order = [F.col(mode.version).desc_nulls_last()] if mode.version else []
        order.append(F.col(ROW_ID_COLUMN).desc())
        window = Window.partitionBy(partition_column, *mode.key).orderBy(*order)
        unkeyed = reduce(lambda a, b: a | b, [F.col(k).isNull() for k in mode.key])
        return (
            rows.withColumn("__icefloe_rank", F.row_number().over(window))
            .where((F.col("__icefloe_rank") == 1) | unkeyed)
            .drop("__icefloe_rank")
        )
    if isinstance(mode, AggregateMode):
        return _aggregate(spec, mode, rows, keys=[partition_column, *mode.group_by])
    raise SparkMergeUnsupportedError(f"merge mode {mode.to_text()!r} cannot run in Spark")


def _aggregate(
    spec: TableSpec, mode: AggregateMode, rows: DataFrame, *, keys: list[str]
) -> DataFrame:
    from pyspark.sql import functions as F

    simple: dict[str, Callable[[SparkColumn], SparkColumn]] = {
        "min": F.min,
        "max": F.max,
        "any": partial(F.first, ignorenulls=True),  # DuckDB's any_value skips NULLs
    }
    types = {c.name: normalize_type(c.type) for c in spec.columns}
    aggregates: list[SparkColumn] = []
    checks: list[SparkColumn] = []
    for name, function in mode.aggregates:
        if function in ("sum", "count"):
            value, fits = _checked_sum(name, types[name])
            aggregates.append(value.cast(rows.schema[name].dataType).alias(name))
            checks.append(fits)
        else:
            aggregates.append(simple[function](F.col(name)).alias(name))
    aggregates.append(F.max(F.col(ROW_ID_COLUMN)).alias(ROW_ID_COLUMN))
    if not checks:
        return rows.groupBy(*keys).agg(*aggregates)
    grouped = rows.groupBy(*keys).agg(*aggregates, reduce(lambda a, b: a & b, checks).alias(_FITS))
    kept = grouped.where(F.col(_FITS)).drop(_FITS)
    unfit = grouped.where(~F.col(_FITS)).select(*keys)
    matches = [F.col(f"r.{k}").eqNullSafe(F.col(f"u.{k}")) for k in keys]
    spilled = rows.alias("r").join(unfit.alias("u"), on=matches, how="left_semi")
    return kept.unionByName(spilled.select(*kept.columns))


def _checked_sum(name: str, column_type: str) -> tuple[SparkColumn, SparkColumn]:
    """The sum of ``name`` in a type wide enough for it, and whether the group's sum fits
    ``column_type`` (true for a group of nulls only, whose sum is null). The value is only
    cast back to the column's type where it fits."""
    from pyspark.sql import functions as F

    column = F.col(name)
    if column_type in _INTEGER_BITS:
        bits, signed = _INTEGER_BITS[column_type]
        low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
        wide = F.try_sum(column.cast("decimal(38,0)"))
        inside = wide.between(F.lit(low).cast("decimal(38,0)"), F.lit(high).cast("decimal(38,0)"))
    elif column_type == "FLOAT":
        # DuckDB's rule: the sum fits unless its cast to FLOAT overflows (a sum just past
        # FLOAT_MAX rounds to it; an infinite or NaN sum, from such inputs, stays as it is).
        wide = F.sum(column.cast("double"))
        inside = (
            (F.abs(wide) < F.lit(_FLOAT_OVERFLOW))
            | F.isnan(wide)
            | (F.abs(wide) == F.lit(float("inf")))
        )
    elif column_type == "DOUBLE":
        wide = F.sum(column)
        inside = F.sum(F.abs(column)) < F.lit(DOUBLE_SUM_LIMIT)
    elif (parts := decimal_precision_scale(column_type)) is not None:
        precision, scale = parts
        wide = F.try_sum(column)  # DECIMAL(min(p + 10, 38), s), NULL past it
        if precision < 38:
            # |sum| < 10^(p-s), the bound spelled in the sum's own type (which holds it), so
            # that no comparison widens either side past 38 digits.
            bound = F.lit(str(10 ** (precision - scale))).cast(
                f"decimal({min(precision + 10, 38)},{scale})"
            )
            inside = F.abs(wide) < bound
        else:  # the sum's type is the column's: try_sum is NULL exactly where it leaves it
            inside = wide.isNotNull()
    else:  # pragma: no cover - HUGEINT is refused by check_spark_can_merge
        raise SparkMergeUnsupportedError(f"no Spark sum for {name!r} of type {column_type}")
    fits = (F.count(column) == 0) | F.coalesce(inside, F.lit(False))
    return F.when(fits, wide), fits
