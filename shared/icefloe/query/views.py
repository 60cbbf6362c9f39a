"""The view a query sees for each table: the spec's columns, cast to their types, over the
pinned snapshot's files (or over the planner's stand-in, with the same conditions)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time

from icefloe.duck import ident, name_literal, string_literal
from icefloe.errors import InvalidInputError
from icefloe.ingest.generated_values import computed_value_sql
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.query.scan_filters import STANDIN_SCHEMA, standin_columns
from icefloe.spec import TableSpec
from icefloe.spec.layout import LayoutColumn
from icefloe.spec.reading import scan_groups
from icefloe.spec.remap import Cast, Remap, column_remap
from icefloe.spec.types import normalize_type


@dataclass(frozen=True, slots=True)
class TimeRange:
    """An explicit window on a table's time column: ``start <= ts < end`` (either may be open).

    The bounds are instants: an aware datetime at its offset, a naive one (or a date, at
    midnight) in UTC, as icefloe's naive timestamps are. A ``TIMESTAMP`` column holds UTC and
    a ``TIMESTAMPTZ`` column instants, so each is compared as the instant it holds; a
    ``DATE`` column's day is compared at its midnight (UTC), as DuckDB compares a DATE with
    a TIMESTAMP: ``end=2026-01-01 12:00`` keeps 2026-01-01, ``start=2026-01-01 12:00`` does
    not. The file listing (:func:`icefloe.query.pruning.listing_window`) reads the bounds the
    same way."""

    start: datetime | None = None
    end: datetime | None = None


def check_window(spec: TableSpec, window: TimeRange | None) -> None:
    """Refuse a window (either bound given) on a table with no year/month/day/hour partition:
    it has no time column a window could be on, and reading every row instead would answer
    silently for a window that was never applied (Spark's ``read_table`` refuses the same)."""
    bounded = window is not None and (window.start is not None or window.end is not None)
    if bounded and spec.time_partition_field is None:
        raise InvalidInputError(
            f"table {spec.name!r} has no time partition: start/end do not apply"
        )


def window_conditions(
    column: str, column_type: str, window: TimeRange, *, spark: bool = False
) -> list[str]:
    """The SQL conditions keeping the rows of ``window`` on the time column ``column`` of
    ``column_type`` (DATE, TIMESTAMP or TIMESTAMPTZ): typed literals of the bounds' UTC
    instants, so DuckDB never reads a bound's text in the column's type (which drops an
    offset for TIMESTAMP and the time of day for DATE) nor in a session time zone. In Spark
    SQL with ``spark`` (where a TIMESTAMP is ``TIMESTAMP_NTZ`` and a TIMESTAMPTZ one at an
    instant, and neither literal is read in the session time zone)."""
    conditions = []
    name = f"`{column.replace('`', '``')}`" if spark else ident(column)
    for bound, is_start in ((window.start, True), (window.end, False)):
        if bound is None:
            continue
        moment = _utc(bound)
        if moment is None:  # the UTC instant is outside years 1-9999, where no value is
            after_all = bound.year > 1  # beyond year 9999 (else before year 1)
            # Every value is on the window's side of it; a NULL, as with any bound, is not.
            conditions.append("false" if is_start == after_all else f"{name} IS NOT NULL")
            continue
        kind = normalize_type(column_type)
        conditions.append(_bound_sql(name, kind, moment, is_start, spark=spark))
    return conditions


def _utc(bound: date) -> datetime | None:
    """A bound as a naive UTC datetime (None when out of Python's range)."""
    if not isinstance(bound, datetime):
        return datetime(bound.year, bound.month, bound.day)
    if bound.tzinfo is None or bound.utcoffset() is None:
        return bound.replace(tzinfo=None)
    try:
        return bound.astimezone(UTC).replace(tzinfo=None)
    except OverflowError:
        return None


def _bound_sql(
    column: str, column_type: str, moment: datetime, is_start: bool, *, spark: bool
) -> str:
    if column_type == "DATE":
        # DATE vs. the instant as DuckDB compares them: the day's midnight.
        day = moment.date()
        midnight = moment.time() == time(0)
        if is_start:  # midnight(d) >= moment
            return f"{column} {'>=' if midnight else '>'} DATE '{day.isoformat()}'"
        return f"{column} {'<' if midnight else '<='} DATE '{day.isoformat()}'"
    text = moment.isoformat(sep=" ")
    if column_type == "TIMESTAMPTZ":
        literal = f"{'TIMESTAMP' if spark else 'TIMESTAMPTZ'} '{text}+00:00'"
    else:
        literal = f"{'TIMESTAMP_NTZ' if spark else 'TIMESTAMP'} '{text}'"
    return f"{column} {'>=' if is_start else '<'} {literal}"


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
    check_window(spec, window)
    field = spec.time_partition_field
    if window is not None and field is not None:
        conditions += window_conditions(field.source, spec.column(field.source).type, window)
    where = " WHERE " + " AND ".join(conditions) if conditions else ""
    return f"SELECT {select} FROM {source}{where}"
