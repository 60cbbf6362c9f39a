"""What each reference to a lake table in a query filters on, as DuckDB itself binds it.

Nothing here interprets SQL. The query is planned by DuckDB over stand-in tables that have the
lake tables' columns and types (and no statistics, so no filter is folded away), and the filters
DuckDB's optimizer pushes into each table scan are read from the serialized logical plan
(``json_serialize_plan``). Those filters are already typed: a ``CAST(2.4 AS INTEGER)`` arrives
as the INTEGER 2, a DATE compared with a TIMESTAMP column as a TIMESTAMP, ``v + 1 > 3`` as
``v > 2``. A filter pushed into a scan holds for every row that scan contributes to the answer,
so a file whose statistics prove that no row can pass it is not needed by that scan.

Every scan of a table is reported on its own (a subquery, a CTE, a self-join, each side of a
UNION); a table's files are the union of what its scans need. Anything not understood, a filter
kind, a type or a plan that does not serialize, counts as "reads everything".
"""

from __future__ import annotations

import json
import logging
import struct
import threading
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, TypeAlias

import duckdb

from icefloe import duck
from icefloe.duck import ident, string_literal
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.query.lru import LruCache
from icefloe.query.sql_refs import SqlRefs, analyze, walk
from icefloe.spec import TableSpec
from icefloe.spec.types import INTEGER_TYPES

logger = logging.getLogger(__name__)

STANDIN_SCHEMA = "icefloe_standin"
# Optimizers the planner runs without. Statistics of the (empty) stand-ins must not fold
# filters into an empty result. The other three move no filter (join sides, column pruning,
# late materialization of top-N), and with them DuckDB could not serialize some plans (a
# scalar subquery in a SELECT list, CTEs, ORDER BY ... LIMIT), which then read every file.
PLANNER_OFF = (
    "statistics_propagation",
    "build_side_probe_side",
    "unused_columns",
    "late_materialization",
)

# Statements whose references are remembered (the parse of a repeated query is skipped).
ANALYZED_STATEMENTS = 256

CompareOp = Literal["=", "!=", "<", "<=", ">", ">="]
_COMPARISONS: dict[str, CompareOp] = {
    "COMPARE_EQUAL": "=",
    "COMPARE_NOTEQUAL": "!=",
    "COMPARE_LESSTHAN": "<",
    "COMPARE_LESSTHANOREQUALTO": "<=",
    "COMPARE_GREATERTHAN": ">",
    "COMPARE_GREATERTHANOREQUALTO": ">=",
}

# DuckDB's logical type ids of the column types whose statistics are compared.
_TYPE_IDS: dict[str, str] = {t: t for t in INTEGER_TYPES} | {
    "FLOAT": "FLOAT",
    "DOUBLE": "DOUBLE",
    "VARCHAR": "VARCHAR",
    "BOOLEAN": "BOOLEAN",
    "DATE": "DATE",
    "TIME": "TIME",
    "TIMESTAMP": "TIMESTAMP",
    "TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE",
}


@dataclass(frozen=True, slots=True)
class Compare:
    """``column op value``; ``value`` is in the column's comparison domain (see
    :func:`icefloe.query.pruning.stat_value`)."""

    op: CompareOp
    value: Any


@dataclass(frozen=True, slots=True)
class InList:
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class IsNull:
    pass


@dataclass(frozen=True, slots=True)
class IsNotNull:
    pass


@dataclass(frozen=True, slots=True)
class AllOf:
    children: tuple[ScanFilter, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    children: tuple[ScanFilter, ...]


@dataclass(frozen=True, slots=True)
class Opaque:
    """A filter DuckDB applies that pruning does not interpret: it may pass any row."""


ScanFilter: TypeAlias = Compare | InList | IsNull | IsNotNull | AllOf | AnyOf | Opaque
# One scan of a table: per column, a filter every row the scan contributes passes.
ScanFilters: TypeAlias = Mapping[str, ScanFilter]


@dataclass(frozen=True, slots=True)
class TableScans:
    """The scans of one table in a query's plan. ``scans`` is None when the plan could not be
    read: then the whole table is needed."""

    table: str
    scans: tuple[ScanFilters, ...] | None
    # What determines these scans (the SQL and the view definitions), when known: plans of
    # the same key over the same snapshot are the same.
    key: Hashable | None = field(default=None, compare=False)

    @property
    def reads_everything(self) -> bool:
        return self.scans is None or any(not s for s in self.scans)

    @property
    def filtered_columns(self) -> frozenset[str]:
        """The columns whose statistics can prune (none when some scan reads everything)."""
        if self.scans is None or self.reads_everything:
            return frozenset()
        return frozenset(column for scan in self.scans for column in scan)


def standin_columns(spec: TableSpec) -> list[tuple[str, str]]:
    """The columns a query sees for a table, in order: the spec's, then the row id."""
    return [(c.name, c.type) for c in spec.columns] + [(ROW_ID_COLUMN, "BLOB")]


class ScanPlanner:
    """One DuckDB connection that plans queries over stand-in tables, kept for the process
    (every query engine shares :func:`shared_scan_planner`; opening a DuckDB costs about
    20 ms).

    The connection has no data and no external access; it shares the query connections'
    session settings (UTC), so that time literals bind to the same instants. What it holds
    (stand-ins, views over them) depends only on the specs it is given, which
    :meth:`scans` sets up under the same lock as the planning, so engines of different
    lakes with tables of the same name can share it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._standins: dict[str, tuple[tuple[str, str], ...]] = {}
        self._refs: LruCache[str, SqlRefs] = LruCache(ANALYZED_STATEMENTS)

    def analyze(self, sql: str) -> SqlRefs:
        """The names ``sql`` reaches, parsed by this planner's connection (a statement asked
        again is not parsed again)."""
        refs = self._refs.get(sql)
        if refs is None:
            with self._lock:
                refs = analyze(sql, con=self._connection())
            self._refs.put(sql, refs)
        return refs

    def scans(
        self, sql: str, views: Mapping[str, str], *, specs: Iterable[TableSpec] = ()
    ) -> dict[str, TableScans]:
        """Per table, its scans in ``sql``'s optimized plan. ``views`` maps each lake table the
        query names to the view text the query will see, written over
        ``{STANDIN_SCHEMA}.<table>`` (see :func:`icefloe.query.views.view_sql`). The stand-in
        of each of ``specs`` is (re-)created first, in the same hold of the lock (see
        :meth:`prepare`)."""
        with self._lock:
            for spec in specs:
                self._prepare(spec)
            con = self._connection()
            try:
                for view in views.values():
                    con.execute(view)
                raw = con.execute(
                    "SELECT json_serialize_plan(?, skip_null := true, skip_empty := true,"
                    " optimize := true)",
                    [sql],
                ).fetchone()
            except duckdb.Error as e:
                logger.debug("scan planning failed, reading every file: %s", e)
                return {name: TableScans(name, None) for name in views}
        plan = json.loads(raw[0]) if raw is not None else {"error": True}
        if plan.get("error"):
            logger.debug("plan not serializable, reading every file: %s", plan.get("error_message"))
            return {name: TableScans(name, None) for name in views}
        found: dict[str, list[ScanFilters]] = {name: [] for name in views}
        for get in _gets(plan.get("plans", [])):
            data = get.get("function_data") or {}
            name = str(data.get("table"))
            if data.get("schema") != STANDIN_SCHEMA or name not in found:
                continue
            columns = self._standins[name]
            found[name].append(_scan_filters(get.get("table_filters") or {}, columns))
        # A table named by the SQL but absent from the plan is read whole: the cautious choice.
        return {
            name: TableScans(name, tuple(scans) if scans else None) for name, scans in found.items()
        }

    def prepare(self, spec: TableSpec) -> None:
        """Create (or re-create, after a schema change) the table's stand-in."""
        with self._lock:
            self._prepare(spec)

    def _prepare(self, spec: TableSpec) -> None:
        columns = tuple(standin_columns(spec))
        if self._standins.get(spec.name) == columns:
            return
        con = self._connection()
        definition = ", ".join(f"{ident(c)} {t}" for c, t in columns)
        con.execute(f"CREATE OR REPLACE TABLE {STANDIN_SCHEMA}.{ident(spec.name)} ({definition})")
        self._standins[spec.name] = columns

    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            con = duck.connect(threads=1)
            con.execute(f"SET disabled_optimizers = {string_literal(','.join(PLANNER_OFF))}")
            con.execute(f"CREATE SCHEMA {STANDIN_SCHEMA}")
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            self._con = con
        return self._con


_shared_lock = threading.Lock()
_shared: ScanPlanner | None = None


def shared_scan_planner() -> ScanPlanner:
    """The process's scan planner, opened on first use and kept."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ScanPlanner()
        return _shared


def _gets(plan: Any) -> Iterator[dict[str, Any]]:
    return (node for node in walk(plan) if node.get("type") == "LOGICAL_GET")


def _scan_filters(
    table_filters: Mapping[str, Any], columns: tuple[tuple[str, str], ...]
) -> dict[str, ScanFilter]:
    result: dict[str, ScanFilter] = {}
    for entry in table_filters.get("filters", []):
        key = entry.get("key")
        if not isinstance(key, int) or not 0 <= key < len(columns):
            continue
        name, column_type = columns[key]
        decoded = _filter(entry.get("value") or {}, column_type)
        if not isinstance(decoded, Opaque):
            result[name] = decoded
    return result


def _filter(node: Mapping[str, Any], column_type: str) -> ScanFilter:
    kind = node.get("filter_type")
    if kind == "CONSTANT_COMPARISON":
        op = _COMPARISONS.get(str(node.get("comparison_type")))
        value = constant_value(node.get("constant") or {}, column_type)
        return Opaque() if op is None or value is _UNKNOWN else Compare(op, value)
    if kind == "IN_FILTER":
        values = [constant_value(v, column_type) for v in node.get("values") or []]
        if not values or any(v is _UNKNOWN for v in values):
            return Opaque()
        return InList(tuple(values))
    if kind == "IS_NULL":
        return IsNull()
    if kind == "IS_NOT_NULL":
        return IsNotNull()
    if kind == "OPTIONAL_FILTER":
        # DuckDB keeps the full predicate in a filter above the scan; the optional one is
        # implied by it and exists precisely to skip data, as here.
        return _filter(node.get("child_filter") or {}, column_type)
    if kind in ("CONJUNCTION_AND", "CONJUNCTION_OR"):
        children = tuple(_filter(c, column_type) for c in node.get("child_filters") or [])
        if kind == "CONJUNCTION_AND":
            known = tuple(c for c in children if not isinstance(c, Opaque))
            return AllOf(known) if known else Opaque()
        if not children or any(isinstance(c, Opaque) for c in children):
            return Opaque()
        return AnyOf(children)
    return Opaque()


class _Unknown:
    pass


_UNKNOWN: Any = _Unknown()


def constant_value(constant: Mapping[str, Any], column_type: str) -> Any:
    """A serialized DuckDB constant in the column's comparison domain, or ``_UNKNOWN`` when its
    type is not the column's (then it is not used) or it is NULL."""
    if constant.get("is_null", False) or "value" not in constant:
        return _UNKNOWN
    logical = constant.get("type") or {}
    type_id = logical.get("id")
    info = logical.get("type_info") or {}
    value = constant["value"]
    if column_type.startswith("DECIMAL("):
        if (
            type_id != "DECIMAL"
            or f"DECIMAL({info.get('width')},{info.get('scale')})" != column_type
        ):
            return _UNKNOWN
        return Decimal(_integer(value)).scaleb(-int(info["scale"]))
    expected = _TYPE_IDS.get(column_type)
    if expected is None or type_id != expected or info.get("alias"):
        return _UNKNOWN
    try:
        if column_type in INTEGER_TYPES or column_type in (
            "DATE",
            "TIME",
            "TIMESTAMP",
            "TIMESTAMPTZ",
        ):
            return _integer(value)
        if column_type == "FLOAT":
            return float_key(_float32(float(value)))
        if column_type == "DOUBLE":
            return float_key(float(value))
        if column_type == "VARCHAR" and isinstance(value, str):
            return value
        if column_type == "BOOLEAN" and isinstance(value, bool):
            return value
    except (TypeError, ValueError, OverflowError):
        return _UNKNOWN
    return _UNKNOWN


def float_key(value: float) -> tuple[int, float]:
    """DuckDB's order of floating-point values: NaN above every number (and equal to itself)."""
    return (1, 0.0) if value != value else (0, value)


def _float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("a boolean is not an integer constant")
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping) and {"upper", "lower"} <= value.keys():
        return int(value["upper"]) * 2**64 + int(value["lower"])
    raise TypeError(f"not an integer constant: {value!r}")
