"""Which files may hold a row a scan needs, decided in the meta store over each file's
statistics, so that planning fetches only the files it reads.

A :data:`FileCondition` says what a file *may* hold ("a value of ``v`` above 5", "a NULL in
``c``"). It is rendered as a SQL expression over ``data_files.column_stats`` that is false only
when the statistics prove the file holds no such row: every comparison is written as
``NOT coalesce(<proof of no match>, false)``, and each statistic is read through a guard that
yields NULL when it is missing or not of the expected form. A struct leaf's statistics are
keyed by its dotted path (``context.page.url``) and compared as a column's. A statistic that is absent,
truncated past use or malformed therefore proves nothing, and never raises an error.

Statistics are compared in the order the query engine (DuckDB) uses:

- integers and DECIMAL as ``numeric`` (exact);
- FLOAT and DOUBLE as ``float8``, whose order puts NaN above every number as DuckDB does. The
  recorded maximum is never used: Parquet statistics leave NaN out, so a NaN may lie above it;
- VARCHAR as ``text COLLATE "C"``: byte order of UTF-8, which is code point order;
- DATE, TIME, TIMESTAMP and TIMESTAMPTZ as their ISO 8601 text (fixed-width fields, UTC for
  TIMESTAMPTZ), which sorts in time order in the "C" collation; only statistics of exactly
  that form are used;
- BOOLEAN as ``boolean``.

The membership filters of the row-group key are probed by ``membership_may_contain`` (a
function of migration 0004).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Literal, TypeAlias

from psycopg import sql

from icefloe.membership import hash_pair

StatKind = Literal[
    "integer", "decimal", "float", "text", "boolean", "date", "time", "timestamp", "timestamptz"
]
CompareOp = Literal["=", "!=", "<", "<=", ">", ">="]
StatValue: TypeAlias = int | Decimal | float | str | bool | date | time | datetime


@dataclass(frozen=True, slots=True)
class MayCompare:
    """Some row's ``column`` may satisfy ``column op value``."""

    column: str
    kind: StatKind
    op: CompareOp
    value: StatValue


@dataclass(frozen=True, slots=True)
class MayBeNull:
    column: str


@dataclass(frozen=True, slots=True)
class MayBeNotNull:
    column: str


@dataclass(frozen=True, slots=True)
class MayHoldAnyOf:
    """Some of ``values`` may be among the file's keys of ``column`` (its membership filter)."""

    column: str
    values: tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class MayAll:
    children: tuple[FileCondition, ...]


@dataclass(frozen=True, slots=True)
class MayAny:
    children: tuple[FileCondition, ...]


FileCondition: TypeAlias = MayCompare | MayBeNull | MayBeNotNull | MayHoldAnyOf | MayAll | MayAny

_TRUE = sql.SQL("true")
_FALSE = sql.SQL("false")

# The ISO 8601 forms icefloe writes (``isoformat()`` of pyarrow's statistics).
_ISO_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_ISO_TIME = r"[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{6})?"
_ISO_FORMS: dict[StatKind, str] = {
    "date": f"^{_ISO_DATE}$",
    "time": f"^{_ISO_TIME}$",
    "timestamp": f"^{_ISO_DATE}T{_ISO_TIME}$",
    "timestamptz": f"^{_ISO_DATE}T{_ISO_TIME}\\+00:00$",
}
_DECIMAL_FORM = r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]{1,3})?$"
# float8 holds these exactly (denormals are left unbounded rather than risk an input error).
_FLOAT_RANGE = sql.SQL("BETWEEN 1e-300 AND 1e300")


# Current column name -> {spec version: the name files of that version hold it under, or None
# when they do not hold it}, for the columns whose name is not the same in every version.
StatNames: TypeAlias = Mapping[str, Mapping[int, str | None]]


def render(condition: FileCondition, *, renamed: StatNames | None = None) -> sql.Composable:
    """A boolean SQL expression over a ``data_files`` row: false only when the file's
    statistics prove it holds no row ``condition`` asks for.

    Statistics are keyed by the names a file's own spec version gave its columns, and a struct
    leaf's by its dotted path (``context.page.url``). A column in ``renamed`` is looked up
    under its name in each file's version (its leaves under that name followed by the same
    fields); a file whose version does not hold the column (it was added later) has no
    statistic for it, which proves nothing."""
    return _Renderer(renamed or {}).render(condition)


class _Renderer:
    def __init__(self, renamed: StatNames) -> None:
        self._renamed = renamed

    def render(self, condition: FileCondition) -> sql.Composable:
        if isinstance(condition, MayAll):
            if not condition.children:
                return _TRUE
            return _group(sql.SQL(" AND ").join(self.render(c) for c in condition.children))
        if isinstance(condition, MayAny):
            if not condition.children:
                return _FALSE
            return _group(sql.SQL(" OR ").join(self.render(c) for c in condition.children))
        stats = self._stats(condition.column)
        if isinstance(condition, MayBeNull):
            proof = sql.SQL("{} = 0").format(_null_count(stats))
            return _may(proof)
        if isinstance(condition, MayBeNotNull):
            return _may(_all_null(stats))
        if isinstance(condition, MayHoldAnyOf):
            return _may_hold(condition, stats)
        return _may_compare(condition, stats)

    def _stats(self, key: str) -> sql.Composable:
        column, dot, leaf = key.partition(".")
        versions: Mapping[int, str | None] | None
        if key in self._renamed:  # a column, or a struct leaf mapped by id
            versions, dot, leaf = self._renamed[key], "", ""
        else:  # a leaf of a renamed column, under the column's old name
            versions = self._renamed.get(column)
        if versions is None:
            return sql.SQL("(column_stats -> {})").format(sql.Literal(key))
        cases = [
            sql.SQL("WHEN {} THEN column_stats -> {}").format(
                sql.Literal(v), sql.Literal(name + dot + leaf)
            )
            for v, name in sorted(versions.items())
            if name is not None
        ]
        if not cases:
            return sql.SQL("(NULL::jsonb)")
        return sql.SQL("(CASE spec_version {} END)").format(sql.SQL(" ").join(cases))


def _group(expression: sql.Composable) -> sql.Composable:
    return sql.SQL("({})").format(expression)


def _may(proof: sql.Composable) -> sql.Composable:
    return sql.SQL("NOT coalesce({}, false)").format(proof)


def _null_count(stats: sql.Composable) -> sql.Composable:
    entry = sql.SQL("{} -> 'null_count'").format(stats)
    return sql.SQL("(CASE WHEN jsonb_typeof({e}) = 'number' THEN ({e})::numeric END)").format(
        e=entry
    )


def _all_null(stats: sql.Composable) -> sql.Composable:
    return sql.SQL("(row_count > 0 AND {} >= row_count)").format(_null_count(stats))


def _bound(
    stats: sql.Composable, end: Literal["min", "max"], kind: StatKind
) -> sql.Composable | None:
    """The statistic as a comparable SQL value (NULL unless it has the kind's form); None
    when this end never bounds the column."""
    if kind == "float" and end == "max":
        return None
    entry = sql.SQL("{} -> {}").format(stats, sql.Literal(end))
    text = sql.SQL("{} ->> {}").format(stats, sql.Literal(end))
    if kind == "integer":
        return sql.SQL("(CASE WHEN jsonb_typeof({e}) = 'number' THEN ({e})::numeric END)").format(
            e=entry
        )
    if kind == "float":
        # A float8 statistic read back from its shortest decimal form is the same double.
        return sql.SQL(
            "(CASE WHEN jsonb_typeof({e}) <> 'number' THEN NULL"
            " WHEN ({e})::numeric = 0 THEN 0::float8"
            " WHEN abs(({e})::numeric) {range} THEN ({e})::numeric::float8 END)"
        ).format(e=entry, range=_FLOAT_RANGE)
    if kind == "decimal":
        return sql.SQL(
            "(CASE WHEN jsonb_typeof({e}) = 'string' AND {t} ~ {form} THEN ({t})::numeric END)"
        ).format(e=entry, t=text, form=sql.Literal(_DECIMAL_FORM))
    if kind == "boolean":
        return sql.SQL("(CASE WHEN jsonb_typeof({e}) = 'boolean' THEN ({e})::boolean END)").format(
            e=entry
        )
    if kind == "text":
        return sql.SQL(
            "(CASE WHEN jsonb_typeof({e}) = 'string' THEN ({t}) COLLATE \"C\" END)"
        ).format(e=entry, t=text)
    form = _ISO_FORMS[kind]
    return sql.SQL(
        "(CASE WHEN jsonb_typeof({e}) = 'string' AND {t} ~ {form} THEN ({t}) COLLATE \"C\" END)"
    ).format(e=entry, t=text, form=sql.Literal(form))


def _constant(kind: StatKind, value: StatValue) -> sql.Composable | None:
    """The constant as a SQL literal comparable with :func:`_bound`; None when it cannot be
    written (then the comparison proves nothing)."""
    if kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
        return sql.SQL("{}::numeric").format(sql.Literal(value))
    if kind == "decimal" and isinstance(value, Decimal) and value.is_finite():
        return sql.SQL("{}::numeric").format(sql.Literal(value))
    if kind == "float" and isinstance(value, float):
        return sql.SQL("{}::float8").format(sql.Literal(value))
    if kind == "boolean" and isinstance(value, bool):
        return sql.SQL("{}::boolean").format(sql.Literal(value))
    if kind == "text" and isinstance(value, str):
        return _text(value)
    if kind == "date" and isinstance(value, date) and not isinstance(value, datetime):
        return _text(value.isoformat())
    if kind == "time" and isinstance(value, time) and value.tzinfo is None:
        return _text(value.isoformat())
    if kind == "timestamp" and isinstance(value, datetime) and value.tzinfo is None:
        return _text(value.isoformat())
    if kind == "timestamptz" and isinstance(value, datetime) and value.tzinfo is not None:
        return _text(value.astimezone(UTC).isoformat())
    return None


def _text(value: str) -> sql.Composable | None:
    if "\x00" in value:
        return None  # Postgres text cannot hold it; such a constant prunes nothing
    return sql.SQL('({}::text COLLATE "C")').format(sql.Literal(value))


def _may_compare(condition: MayCompare, stats: sql.Composable) -> sql.Composable:
    value = _constant(condition.kind, condition.value)
    if value is None:
        return _TRUE
    low = _bound(stats, "min", condition.kind)
    high = _bound(stats, "max", condition.kind)
    proofs: list[sql.Composable] = [_all_null(stats)]
    op = condition.op
    if op in ("=", "<", "<=") and low is not None:
        proofs.append(sql.SQL("{} {} {}").format(low, sql.SQL(">" if op != "<" else ">="), value))
    if op in ("=", ">", ">=") and high is not None:
        proofs.append(sql.SQL("{} {} {}").format(high, sql.SQL("<" if op != ">" else "<="), value))
    if op == "!=" and low is not None and high is not None:
        proofs.append(sql.SQL("({l} = {v} AND {h} = {v})").format(l=low, h=high, v=value))
    return _may(sql.SQL(" OR ").join(proofs))


def _may_hold(condition: MayHoldAnyOf, stats: sql.Composable) -> sql.Composable:
    pairs: list[int] = []
    for value in condition.values:
        if isinstance(value, bool) or not isinstance(value, str | int):
            return _TRUE
        pairs.extend(hash_pair(value))
    if not pairs:
        return _FALSE
    entry = sql.SQL("{} ->> 'membership'").format(stats)
    return sql.SQL("coalesce(membership_may_contain({}, {}::numeric[]), true)").format(
        entry, sql.Literal(pairs)
    )


def condition_columns(condition: FileCondition) -> Sequence[str]:
    """The columns ``condition`` reads statistics of."""
    if isinstance(condition, MayAll | MayAny):
        return sorted({c for child in condition.children for c in condition_columns(child)})
    return [condition.column]
