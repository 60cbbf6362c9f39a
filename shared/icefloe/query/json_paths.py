"""The JSON paths a table's recent rows hold (``icefloe table paths``): what to declare as a
generated column.

The newest files of the head snapshot (by the snapshot that added them) are read up to a row
cap, and DuckDB's ``json_tree`` lists every path in every value of the JSON column. Paths are
reported with list positions folded (``$.items[*].sku``), the share of rows holding each, the
JSON types seen, the type a generated column would take, and, for a path outside lists, the
declaration that makes one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from icefloe import duck
from icefloe.duck import ident, string_literal
from icefloe.errors import InvalidInputError
from icefloe.metastore.store import MetaStore
from icefloe.query.views import files_source
from icefloe.spec.type_tree import field_sql
from icefloe.storage import ObjectStore

# Each node's path, built from its parent's: json_tree's own ``fullkey`` does not quote keys
# (a key ``a.b`` reads as ``a`` then ``b``). A key that is not a plain name is quoted, with
# its backslashes and quotes escaped; list positions fold to ``[*]``.
_SEGMENT = (
    "CASE WHEN named.type = 'ARRAY' THEN '[*]'"
    " WHEN regexp_full_match(n.key, '[A-Za-z_][A-Za-z0-9_]*') THEN '.' || n.key"
    " ELSE '.\"' || replace(replace(n.key, '\\', '\\\\'), '\"', '\\\"') || '\"' END"
)
_PATHS = (
    "WITH RECURSIVE named(r, id, type, path) AS ("
    " SELECT r, id, type, '$' FROM nodes WHERE parent IS NULL"
    " UNION ALL"
    f" SELECT n.r, n.id, n.type, named.path || {_SEGMENT}"
    " FROM nodes n JOIN named ON n.r = named.r AND n.parent = named.id)"
    " SELECT path, count(DISTINCT r) AS rows, histogram(type) AS types FROM named"
    " WHERE path <> '$' GROUP BY path ORDER BY rows DESC, path"
)
# JSON types json_tree reports, as the column type that holds every value of them.
_NUMBERS = {"UBIGINT": "BIGINT", "BIGINT": "BIGINT", "DOUBLE": "DOUBLE"}
_NAME_PART = re.compile(r"[^0-9a-zA-Z]+")


@dataclass(frozen=True, slots=True)
class JsonPath:
    """One path and what the sampled rows hold at it."""

    path: str  # "$.user.plan"; list positions folded to [*]
    rows: int  # sampled rows that hold it (null included)
    share: float  # rows / the sampled rows with a value in the column
    types: dict[str, int]  # JSON type (json_tree's: VARCHAR, BIGINT, OBJECT, NULL, ...) -> count
    type: str | None  # the generated column's type: BIGINT, DOUBLE, BOOLEAN, VARCHAR or JSON
    declaration: str | None  # "user_plan VARCHAR AS (properties->>'$.user.plan')"


@dataclass(frozen=True, slots=True)
class JsonPathReport:
    table: str
    column: str
    files_read: int
    rows_read: int  # sampled rows with a value in the column
    paths: tuple[JsonPath, ...]  # most common first


def json_paths(
    *,
    meta: MetaStore,
    objects: ObjectStore,
    table: str,
    column: str | None = None,
    max_files: int = 10,
    max_rows: int = 100_000,
    configure: Callable[[Any], None] | None = None,
) -> JsonPathReport:
    """The paths in ``column`` (by default the table's one JSON column that is not generated)
    over the newest ``max_files`` files, ``max_rows`` rows at most."""
    if max_files < 1 or max_rows < 1:
        raise InvalidInputError("table paths: --files and --rows must be positive")
    spec = meta.get_table(table).spec
    json_columns = [c.name for c in spec.columns if c.type == "JSON" and not c.generated]
    if column is None:
        if len(json_columns) != 1:
            raise InvalidInputError(
                f"table paths: {table!r} has {len(json_columns)} JSON columns"
                f"{' (' + ', '.join(json_columns) + ')' if json_columns else ''}; name one"
                " with --column"
            )
        column = json_columns[0]
    elif column not in json_columns:
        raise InvalidInputError(
            f"table paths: {column!r} is not a JSON column of {table!r}"
            f" (its JSON columns: {', '.join(json_columns) or 'none'})"
        )
    files = sorted(meta.files(table), key=lambda f: (f.begin_snapshot, f.file_id), reverse=True)
    newest = files[:max_files]
    source = files_source(spec, [(objects.uri(f.path), f.spec_version) for f in newest])
    if source is None:
        return JsonPathReport(table, column, 0, 0, ())
    con = duck.connect()
    try:
        if configure is not None:
            configure(con)
        con.execute(
            f"CREATE TEMP TABLE sampled AS SELECT row_number() OVER () AS r, {ident(column)} AS j"
            f" FROM (SELECT {ident(column)} FROM {source} WHERE {ident(column)} IS NOT NULL"
            f" LIMIT {int(max_rows)})"
        )
        count = con.execute("SELECT count(*) FROM sampled").fetchone()
        rows_read = int(count[0]) if count else 0
        con.execute(
            "CREATE TEMP TABLE nodes AS"
            " SELECT s.r, t.id, t.parent, t.key, t.type FROM sampled s, json_tree(s.j) t"
        )
        found = con.execute(_PATHS).fetchall()
    finally:
        con.close()
    paths = tuple(
        _path(column, str(path), int(rows), dict(types), rows_read) for path, rows, types in found
    )
    return JsonPathReport(table, column, len(newest), rows_read, paths)


def _path(column: str, path: str, rows: int, types: dict[str, int], total: int) -> JsonPath:
    kind = inferred_type(types)
    declaration = None
    # A path through the empty key (``$.""``) is one DuckDB's JSON paths cannot express.
    if kind is not None and "[*]" not in path and '.""' not in path:
        name = _NAME_PART.sub("_", path.removeprefix("$.")).strip("_").lower() or "value"
        if not name[0].isalpha():
            name = "p_" + name
        read = f"{field_sql(column)}->>{string_literal(path)}"
        if kind == "JSON":
            value = f"{field_sql(column)}->{string_literal(path)}"
        elif kind == "VARCHAR":
            value = read
        else:
            value = f"TRY_CAST({read} AS {kind})"
        declaration = f"{name} {kind} AS ({value})"
    return JsonPath(path, rows, round(rows / total, 4) if total else 0.0, types, kind, declaration)


def inferred_type(types: dict[str, int]) -> str | None:
    """The column type that holds every non-null value seen (None: only nulls were seen):
    integers BIGINT, numbers DOUBLE, booleans BOOLEAN, text VARCHAR, anything mixed or nested
    JSON."""
    seen = {t for t in types if t != "NULL"}
    if not seen:
        return None
    if seen <= _NUMBERS.keys():
        return "DOUBLE" if "DOUBLE" in seen else "BIGINT"
    if seen == {"BOOLEAN"}:
        return "BOOLEAN"
    if seen == {"VARCHAR"}:
        return "VARCHAR"
    return "JSON"
