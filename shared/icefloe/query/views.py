"""The view a query sees for each table: the spec's columns, cast to their types, over the
pinned snapshot's files (or over the planner's stand-in, with the same conditions)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from icefloe.duck import ident, name_literal, string_literal
from icefloe.ingest.generated_values import computed_value_sql
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.query.scan_filters import STANDIN_SCHEMA, standin_columns
from icefloe.spec import TableSpec
from icefloe.spec.layout import LayoutColumn
from icefloe.spec.reading import scan_groups
from icefloe.spec.remap import Cast, Remap, column_remap


@dataclass(frozen=True, slots=True)
class TimeRange:
    """An explicit window on a table's time column: ``start <= ts < end`` (either may be open)."""

    start: datetime | None = None
    end: datetime | None = None


def parquet_source(uris: Sequence[str]) -> str:
    """A FROM source reading exactly these Parquet files."""
    if any("'" in u for u in uris):
        files = "[" + ", ".join(string_literal(u) for u in uris) + "]"
    else:  # nothing to escape (the usual case): one join
        files = "['" + "', '".join(uris) + "']"
    return f"read_parquet({files}, hive_partitioning = false)"


def files_source(spec: TableSpec, files: Sequence[tuple[str, int]]) -> str | None:
    """A FROM source reading exactly these Parquet files, given as (uri, spec version written
    at), with ``spec``'s columns and the row id (None: no file).

    Files whose version holds every column under its current name and type are read as they
    are (a table never altered reads this way); the others in one scan per layout
    (:func:`icefloe.spec.reading.scan_groups`), through a projection that takes each
    column by id: renamed ones under their old name, ones the files lack as NULL, every one
    cast to its current type (a widened column is read at its old width, then widened)."""
    if not files:
        return None
    groups = scan_groups(spec, files)
    if len(groups) == 1 and groups[0].held is None:
        return parquet_source(groups[0].uris)
    parts = []
    for group in groups:
        held = spec.layout.columns if group.held is None else [h for _, h in group.held]
        select = [
            f"CAST({_held_sql(old, current)} AS {current.type}) AS {ident(current.name)}"
            for current, old in zip(spec.layout.columns, held, strict=True)
        ]
        select.append(ident(ROW_ID_COLUMN))
        part = f"SELECT {', '.join(select)} FROM {parquet_source(group.uris)}"
        if group.computed:
            part = _computed(spec, group.computed, part)
        parts.append(part)
    return "(" + " UNION ALL ".join(parts) + ")"


def _computed(spec: TableSpec, missing: frozenset[str], held: str) -> str:
    """``held`` (a SELECT of every current column and the row id, in order) with the generated
    columns in ``missing``, which its files were written without, computed from their
    expressions over the row's other columns, as insert computes them. A row whose expression
    fails gives NULL (:func:`icefloe.ingest.generated_values.computed_value_sql`); adding the
    column refused a table holding one (:mod:`icefloe.lifecycle.alter`)."""
    select = [
        f"{computed_value_sql(c)} AS {ident(c.name)}" if c.name in missing else ident(c.name)
        for c in spec.columns
    ]
    select.append(ident(ROW_ID_COLUMN))
    return f"SELECT {', '.join(select)} FROM ({held}) AS {ident(spec.name)}"


def _held_sql(old: LayoutColumn | None, current: LayoutColumn) -> str:
    """The files' column ``old`` read as ``current`` (the outer CAST gives its type)."""
    if old is None:
        return "NULL"
    remap = column_remap(old, current)
    return ident(old.name) if remap is None else remap_sql(ident(old.name), remap)


def remap_sql(value: str, remap: Remap) -> str:
    """DuckDB SQL reading ``value`` (held in an older layout) as the current type, struct
    fields taken by id, never by a struct cast (see :mod:`icefloe.spec.remap`)."""
    if isinstance(remap, Cast):
        return f"CAST({value} AS {remap.type})"
    fields = []
    for f in remap.fields:
        if f.old is None:
            inner = f"CAST(NULL AS {f.type})"
        else:
            inner = f"struct_extract({value}, {name_literal(f.old)})"
            inner = inner if f.remap is None else remap_sql(inner, f.remap)
        fields.append(f"{ident(f.name)} := {inner}")
    return f"CASE WHEN {value} IS NULL THEN NULL ELSE struct_pack({', '.join(fields)}) END"


def standin_source(table: str) -> str:
    """The planner's stand-in of a table (see :class:`icefloe.query.scan_filters.ScanPlanner`)."""
    return f"{STANDIN_SCHEMA}.{ident(table)}"


def view_sql(
    spec: TableSpec,
    source: str | None,
    window: TimeRange | None,
    *,
    tenant: str | None = None,
    replace: bool = False,
    temporary: bool = False,
) -> str:
    """``CREATE VIEW <table>`` over ``source`` (see :func:`view_body`); a ``temporary`` view
    is the creating cursor's alone."""
    create = "CREATE OR REPLACE" if replace else "CREATE"
    create += " TEMP VIEW" if temporary else " VIEW"
    return f"{create} {ident(spec.name)} AS {view_body(spec, source, window, tenant=tenant)}"


def view_body(
    spec: TableSpec, source: str | None, window: TimeRange | None, *, tenant: str | None = None
) -> str:
    """The SELECT a table's view stands for: the spec's columns cast to their types, over
    ``source`` (None: no file), restricted to the tenant and the window."""
    columns = standin_columns(spec)
    if source is None:
        nulls = ", ".join(f"CAST(NULL AS {t}) AS {ident(c)}" for c, t in columns)
        return f"SELECT {nulls} WHERE false"
    select = ", ".join(f"CAST({ident(c)} AS {t}) AS {ident(c)}" for c, t in columns)
    conditions = []
    if tenant is not None and spec.tenant_column is not None:
        # Files were chosen by tenant partition already; this filter is a second lock.
        conditions.append(f"{ident(spec.tenant_column)} = {string_literal(tenant)}")
    field = spec.time_partition_field
    if window is not None and field is not None:
        if window.start is not None:
            conditions.append(
                f"{ident(field.source)} >= {string_literal(window.start.isoformat())}"
            )
        if window.end is not None:
            conditions.append(f"{ident(field.source)} < {string_literal(window.end.isoformat())}")
    where = " WHERE " + " AND ".join(conditions) if conditions else ""
    return f"SELECT {select} FROM {source}{where}"
