"""What each reference to a lake table in a query filters on, as DuckDB itself binds it.

Nothing here interprets SQL. The query is planned by DuckDB over stand-in tables that have the
lake tables' columns and types (and no statistics, so no filter is folded away), and the filters
DuckDB's optimizer pushes into each table scan are read from the serialized logical plan
(``json_serialize_plan``). Those filters are already typed: a ``CAST(2.4 AS INTEGER)`` arrives
as the INTEGER 2, a DATE compared with a TIMESTAMP column as a TIMESTAMP, ``v + 1 > 3`` as
``v > 2``. A filter pushed into a scan holds for every row that scan contributes to the answer,
so a file whose statistics prove that no row can pass it is not needed by that scan. Filters on
the leaves of STRUCT columns are keyed by the leaf's dotted path (``context.page.url``, see
:mod:`icefloe.query.nested_filters`).

Every scan of a table is reported on its own (a subquery, a CTE, a self-join, each side of a
UNION); a table's files are the union of what its scans need. Anything not understood, a filter
kind, a type or a plan that does not serialize, counts as "reads everything".
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import duckdb

from icefloe import duck
from icefloe.duck import ident, string_literal
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.query.column_filters import (
    AllOf,
    AnyOf,
    Compare,
    CompareOp,
    InList,
    IsNotNull,
    IsNull,
    Opaque,
    ScanFilter,
    ScanFilters,
    column_filter,
    constant_value,
    float_key,
)
from icefloe.query.lru import LruCache
from icefloe.query.nested_filters import struct_leaf_filters
from icefloe.query.sql_refs import SqlRefs, analyze, walk
from icefloe.spec import TableSpec
from icefloe.spec.type_tree import Struct
from icefloe.spec.types import type_tree

# The filter model lives in icefloe.query.column_filters; it is named here too, where the
# scans that hold it are made.
__all__ = [
    "STANDIN_SCHEMA",
    "AllOf",
    "AnyOf",
    "Compare",
    "CompareOp",
    "InList",
    "IsNotNull",
    "IsNull",
    "Opaque",
    "ScanFilter",
    "ScanFilters",
    "ScanPlanner",
    "TableScans",
    "constant_value",
    "float_key",
    "shared_scan_planner",
    "standin_columns",
]

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
        """The columns, and dotted struct-leaf paths, whose statistics can prune (none when some
        scan reads everything)."""
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
        try:
            return self._decode(raw[0] if raw is not None else None, views)
        except RecursionError:
            # A plan nested deeper than Python's JSON reader (or the filter decoding) may go.
            logger.debug("scan plan nests too deeply to read, reading every file")
            return {name: TableScans(name, None) for name in views}

    def _decode(self, raw: str | None, views: Mapping[str, str]) -> dict[str, TableScans]:
        # No plan, or one that is not a JSON object (DuckDB serializes a plan holding a BIT or
        # BIGNUM constant as ''), is a plan not serialized: every file is read.
        try:
            plan = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            plan = None
        if not isinstance(plan, dict) or plan.get("error"):
            message = plan.get("error_message") if isinstance(plan, dict) else repr(raw)[:80]
            logger.debug("plan not serializable, reading every file: %s", message)
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
    """Per column, or per dotted leaf path of a STRUCT column, the filter the scan's rows pass
    (only those understood: see :mod:`icefloe.query.nested_filters` for struct leaves)."""
    found: dict[str, list[ScanFilter]] = {}
    for entry in table_filters.get("filters", []):
        key = entry.get("key")
        if not isinstance(key, int) or not 0 <= key < len(columns):
            continue
        name, column_type = columns[key]
        value = entry.get("value") or {}
        tree = type_tree(column_type)
        if isinstance(tree, Struct):
            for path, condition in struct_leaf_filters(value, column=name, tree=tree).items():
                found.setdefault(path, []).append(condition)
            continue
        decoded = column_filter(value, column_type)
        if not isinstance(decoded, Opaque):
            found.setdefault(name, []).append(decoded)
    return {
        name: conditions[0] if len(conditions) == 1 else AllOf(tuple(conditions))
        for name, conditions in found.items()
    }
