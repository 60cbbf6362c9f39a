"""Merge modes compiled to Spark: what :mod:`icefloe.merge.modes` runs in DuckDB, over the
rows of whole partitions (each group and key taken within its partition).

Append keeps every row; replace keeps the newest row per key (and every row whose key is
NULL); aggregate keeps one row per
group, unless a ``sum`` or ``count`` of the group leaves its column's type: that group's rows
are kept as they are, as the merge worker keeps them (a merge alters no value, and a
partition is never failed for good by its data). A custom query is DuckDB SQL and runs with
the DuckDB engine only.
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING

from icefloe.errors import IcefloeError
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.merge.modes import DOUBLE_SUM_LIMIT
from icefloe.spec import AggregateMode, AppendMode, ReplaceMode, TableSpec, normalize_type
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
_FLOAT_MAX = 3.4028234663852886e38


class SparkMergeUnsupportedError(IcefloeError):
    """The table's merge mode cannot run in Spark (a custom DuckDB query)."""


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

    simple = {"min": F.min, "max": F.max, "any": F.first}
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
        wide = F.sum(column.cast("double"))
        inside = F.abs(wide) <= F.lit(_FLOAT_MAX)
    elif column_type == "DOUBLE":
        wide = F.sum(column)
        inside = F.sum(F.abs(column)) < F.lit(DOUBLE_SUM_LIMIT)
    elif (parts := decimal_precision_scale(column_type)) is not None:
        precision, scale = parts
        wide = F.try_sum(column)
        inside = F.abs(wide) < F.lit(10 ** (precision - scale)).cast("decimal(38,0)")
    else:  # HUGEINT: Spark reads it as DECIMAL(38, 0), and try_sum is null past it
        wide = F.try_sum(column)
        inside = wide.isNotNull()
    fits = (F.count(column) == 0) | F.coalesce(inside, F.lit(False))
    return F.when(fits, wide), fits
