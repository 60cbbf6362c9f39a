"""Spark reading icefloe's Parquet files: the Spark SQL type of each column type, and a
DataFrame over a list of files written at any spec version, read by the layout they were
written in. The Spark reader (:mod:`icefloe.spark`) and Spark compaction
(:mod:`icefloe.compaction.spark_job`) both read through it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from icefloe.errors import InvalidInputError
from icefloe.ingest.generated_values import computed_columns_sql
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.spec import TableSpec
from icefloe.spec.layout import LayoutColumn
from icefloe.spec.reading import scan_groups
from icefloe.spec.remap import Cast, Remap, column_remap
from icefloe.spec.type_tree import ListOf, MapOf, Struct, TypeNode
from icefloe.spec.types import type_tree

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

# DuckDB's types as Spark SQL types (what icefloe's files hold, read back faithfully).
_SPARK_TYPES = {
    "BOOLEAN": "boolean",
    "TINYINT": "tinyint",
    "SMALLINT": "smallint",
    "INTEGER": "int",
    "BIGINT": "bigint",
    "HUGEINT": "decimal(38,0)",
    "UTINYINT": "smallint",
    "USMALLINT": "int",
    "UINTEGER": "bigint",
    "UBIGINT": "decimal(20,0)",
    "FLOAT": "float",
    "DOUBLE": "double",
    "DATE": "date",
    "TIME": "string",
    "TIMESTAMP": "timestamp_ntz",
    "TIMESTAMPTZ": "timestamp",
    "VARCHAR": "string",
    "JSON": "string",
    "UUID": "string",
    "BLOB": "binary",
}


# Leaf types Spark cannot read from a Parquet file at all (Spark 4 refuses the file's schema
# when it holds one, at any depth, read or not), with what to say about them.
SPARK_UNREADABLE_TYPES = {"TIME": "TIME values, which Spark cannot read from Parquet"}


class SparkUnreadableTableError(InvalidInputError):
    """A table (or a file of it) holds a column type Spark cannot read (TIME)."""


def leaf_types(duckdb_type: str) -> frozenset[str]:
    """The leaf type names in ``duckdb_type`` at any depth (``{"TIME", "VARCHAR"}`` for
    ``STRUCT(a TIME, b VARCHAR[])``)."""
    return frozenset(_leaves(type_tree(duckdb_type)))


def holds_map(duckdb_type: str) -> bool:
    """True when ``duckdb_type`` is a MAP or has one inside it at any depth."""
    return _holds_map(type_tree(duckdb_type))


def _leaves(node: TypeNode) -> Iterator[str]:
    if isinstance(node, ListOf):
        yield from _leaves(node.element)
    elif isinstance(node, MapOf):
        yield from _leaves(node.key)
        yield from _leaves(node.value)
    elif isinstance(node, Struct):
        for _, field in node.fields:
            yield from _leaves(field)
    else:
        yield node.name


def _holds_map(node: TypeNode) -> bool:
    if isinstance(node, MapOf):
        return True
    if isinstance(node, ListOf):
        return _holds_map(node.element)
    if isinstance(node, Struct):
        return any(_holds_map(t) for _, t in node.fields)
    return False


def check_spark_readable(specs: Iterable[TableSpec], *, table: str) -> None:
    """Raise :class:`SparkUnreadableTableError` when a column of any of ``specs`` (the specs
    the files to read were written by, and the one they are read as) holds a type Spark
    cannot read at any depth; such tables are read with DuckDB."""
    for spec in specs:
        for column in spec.columns:
            for name in sorted(leaf_types(column.type) & SPARK_UNREADABLE_TYPES.keys()):
                raise SparkUnreadableTableError(
                    f"table {table!r}: column {column.name!r} ({column.type}) holds"
                    f" {SPARK_UNREADABLE_TYPES[name]}; read the table with DuckDB instead"
                    " (icefloe query, Lake.query, or read_changes, which converts TIME to text)"
                )


def spark_type(duckdb_type: str) -> str:
    """The Spark SQL type a column of ``duckdb_type`` is read as (nested types field by field:
    ``struct<`ip`:string>``, ``array<...>``, ``map<k,v>``)."""
    return _spark_type(type_tree(duckdb_type))


def _spark_type(node: TypeNode) -> str:
    if isinstance(node, ListOf):
        return f"array<{_spark_type(node.element)}>"
    if isinstance(node, MapOf):
        return f"map<{_spark_type(node.key)},{_spark_type(node.value)}>"
    if isinstance(node, Struct):
        return "struct<" + ",".join(f"`{n}`:{_spark_type(t)}" for n, t in node.fields) + ">"
    if node.name.startswith("DECIMAL"):
        return node.name.lower().replace(" ", "")
    try:
        return _SPARK_TYPES[node.name]
    except KeyError as e:
        raise InvalidInputError(f"no Spark type for the column type {node.name}") from e


def _held_column(old: LayoutColumn | None, current: LayoutColumn) -> Column:
    """The files' column ``old`` read as ``current`` (the caller casts it to its type)."""
    from pyspark.sql import functions as F

    if old is None:
        return F.lit(None)
    remap = column_remap(old, current)
    value = F.col(f"`{old.name}`")
    return value if remap is None else remap_column(value, remap)


def remap_column(value: Column, remap: Remap) -> Column:
    """A Spark expression reading ``value`` (held in an older layout) as the current type,
    struct fields taken by id, never by a struct cast, which Spark does by position (see
    :mod:`icefloe.spec.remap`); the DuckDB twin is :func:`icefloe.query.views.remap_sql`."""
    from pyspark.sql import functions as F

    if isinstance(remap, Cast):
        return value.cast(spark_type(remap.type))
    fields = []
    for f in remap.fields:
        if f.old is None:
            inner = F.lit(None).cast(spark_type(f.type))
        else:
            inner = value.getField(f.old)
            inner = inner if f.remap is None else remap_column(inner, f.remap)
        fields.append(inner.alias(f.name))
    return F.when(value.isNull(), F.lit(None)).otherwise(F.struct(*fields))


def read_files(
    spark: SparkSession,
    spec: TableSpec,
    files: list[tuple[str, int]],
    *,
    file_column: str | None = None,
) -> DataFrame:
    """These Parquet files, given as (uri, spec version written at), with ``spec``'s columns
    cast to their Spark types, then the row id, then (when ``file_column`` is given) a column
    of that name holding each row's file URI. The DuckDB twin is
    :func:`icefloe.query.views.files_source`.

    Files are read one layout group at a time (:func:`icefloe.spec.reading.scan_groups`):
    Spark takes one schema for all the files of a read, so a renamed or widened column would
    read as NULL or fail across layouts."""
    from pyspark.sql import functions as F

    frames = []
    for group in scan_groups(spec, files):
        raw = spark.read.parquet(*group.uris)
        extra = []
        if file_column is not None:
            raw = raw.withColumn(file_column, F.input_file_name())
            extra.append(F.col(file_column))
        held = spec.layout.columns if group.held is None else [h for _, h in group.held]
        columns = [
            _held_column(old, current).cast(spark_type(current.type)).alias(current.name)
            for current, old in zip(spec.layout.columns, held, strict=True)
        ]
        frame = raw.select(*columns, F.col(ROW_ID_COLUMN), *extra)
        frames.append(_with_generated(frame, spec, group.computed) if group.computed else frame)
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other)
    return frame


def _with_generated(frame: DataFrame, spec: TableSpec, missing: frozenset[str]) -> DataFrame:
    """``frame`` (the spec's columns first, those in ``missing`` NULL) with the generated
    columns in ``missing`` computed from their expressions by DuckDB, batch by batch: the
    same engine and SQL as :func:`icefloe.query.views.files_source`, so Spark and DuckDB read
    the same value (Spark SQL cannot evaluate a DuckDB expression)."""
    names = [c.name for c in spec.columns if c.name in missing]
    positions = [frame.columns.index(n) for n in names]
    sql = computed_columns_sql(spec, missing, "spark_batch")

    def compute(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import duckdb
        import pyarrow as pa

        con = duckdb.connect(config={"threads": 1})  # one thread keeps the rows in order
        con.execute("SET TimeZone = 'UTC'")
        try:
            for batch in batches:
                con.register("spark_batch", pa.Table.from_batches([batch]))
                values = con.execute(sql).to_arrow_table()
                arrays = list(batch.columns)
                for position, name in zip(positions, names, strict=True):
                    value = values.column(name).combine_chunks()
                    if isinstance(value.type, pa.ExtensionType):  # DuckDB's JSON
                        value = value.storage
                    arrays[position] = value.cast(batch.schema.field(position).type)
                yield pa.RecordBatch.from_arrays(arrays, schema=batch.schema)
                con.unregister("spark_batch")
        finally:
            con.close()

    return frame.mapInArrow(compute, frame.schema)
