"""Filters on struct leaves, as DuckDB's planner pushes them into a scan, decoded per dotted leaf
path; every other predicate on a nested column decodes to nothing (the scan reads any row)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import duckdb
import pytest

from icefloe import duck
from icefloe.duck import ident, string_literal
from icefloe.query.nested_filters import struct_leaf_filters
from icefloe.query.scan_filters import (
    PLANNER_OFF,
    STANDIN_SCHEMA,
    AllOf,
    AnyOf,
    Compare,
    InList,
    IsNotNull,
    IsNull,
    ScanFilter,
    ScanPlanner,
    standin_columns,
)
from icefloe.query.views import standin_source, view_sql
from icefloe.spec import TableSpec
from icefloe.spec.type_tree import Struct
from icefloe.spec.types import type_tree
from support.scan_filter_semantics import passes

CTX = "STRUCT(ip VARCHAR, page STRUCT(url VARCHAR, n INTEGER), d DATE, amount DECIMAL(9,2))"
SPEC = TableSpec.create(
    name="ev",
    schema=(
        f"ts TIMESTAMP NOT NULL, ctx {CTX}, tags STRUCT(k VARCHAR, v INTEGER)[],"
        " m MAP(VARCHAR, INTEGER)"
    ),
)
URL_P1: Mapping[str, ScanFilter] = {"ctx.page.url": Compare("=", "/p1")}
DAY_2026_01_02 = (date(2026, 1, 2) - date(1970, 1, 1)).days
TS_2026 = (datetime(2026, 1, 1) - datetime(1970, 1, 1)).days * 86_400_000_000

# Predicate -> what the scan's filter decodes to, per leaf path ({}: nothing; the scan reads
# every row). Measured forms: /work/plans/issue33/plan.md, "What DuckDB pushes into the scan".
DECODED: list[tuple[str, Mapping[str, ScanFilter]]] = [
    # The three spellings, and their mixtures
    ("ctx.page.url = '/p1'", URL_P1),
    ("ctx['page']['url'] = '/p1'", URL_P1),
    ("struct_extract(struct_extract(ctx, 'page'), 'url') = '/p1'", URL_P1),
    ("ctx['page'].url = '/p1'", URL_P1),
    ("ctx.page['url'] = '/p1'", URL_P1),
    ("(ctx).page.url = '/p1'", URL_P1),
    ("ev.ctx.page.url = '/p1'", URL_P1),
    ("CTX.PAGE.URL = '/p1'", URL_P1),  # DuckDB's names are case-insensitive; paths are the spec's
    ("ctx['PAGE']['Url'] = '/p1'", URL_P1),
    ("'/p1' = ctx['page']['url']", URL_P1),
    ("'/p1' < ctx['page']['url']", {"ctx.page.url": Compare(">", "/p1")}),
    # By position: a STRUCT_EXTRACT without a name, or struct_extract_at in an expression
    ("struct_extract_at(ctx, 1) = '1.2.3.4'", {"ctx.ip": Compare("=", "1.2.3.4")}),
    ("struct_extract_at(ctx, 2).url = '/p1'", URL_P1),
    (
        "struct_extract_at(struct_extract_at(ctx, 2), 1) IN ('/a', '/b')",
        {"ctx.page.url": InList(("/a", "/b"))},
    ),
    # IN, IS [NOT] NULL, BETWEEN
    ("ctx.page.url IN ('/a', '/b')", {"ctx.page.url": InList(("/a", "/b"))}),
    ("ctx.page.url IS NULL", {"ctx.page.url": IsNull()}),
    ("ctx['page']['url'] IS NOT NULL", {"ctx.page.url": IsNotNull()}),
    (
        "ctx.page.n BETWEEN 3 AND 9",
        {"ctx.page.n": AllOf((Compare(">=", 3), Compare("<=", 9)))},
    ),
    # AND of two leaves (one CONJUNCTION_AND under the column), with a flat column beside
    (
        "ctx.page.n > 5 AND ctx.ip = 'x'",
        {"ctx.page.n": Compare(">", 5), "ctx.ip": Compare("=", "x")},
    ),
    (
        "ctx.page.url = '/a' AND ctx['ip'] = 'x' AND ts > TIMESTAMP '2026-01-01'",
        {
            "ts": Compare(">", TS_2026),
            "ctx.page.url": Compare("=", "/a"),
            "ctx.ip": Compare("=", "x"),
        },
    ),
    (
        "ctx.page.url IN ('/a', '/b') AND ctx.ip IS NULL",
        {"ctx.page.url": InList(("/a", "/b")), "ctx.ip": IsNull()},
    ),
    # OR of one leaf is kept, OR across two leaves is not
    (
        "ctx.page.url = '/a' OR ctx.page.url = '/b'",
        {"ctx.page.url": AnyOf((Compare("=", "/a"), Compare("=", "/b")))},
    ),
    (
        "ctx.page.n BETWEEN 1 AND 3 OR ctx.page.n = 9",
        {
            "ctx.page.n": AnyOf(
                (AllOf((Compare(">=", 1), Compare("<=", 3))), Compare("=", 9)),
            )
        },
    ),
    ("ctx.ip = 'a' OR ctx.page.url = '/b'", {}),
    # Constants arrive typed as the leaf (folded casts), or the leaf is cast: then nothing
    ("ctx.page.n::BIGINT = 2", {"ctx.page.n": Compare("=", 2)}),
    ("ctx.page.n + 1 > 3", {"ctx.page.n": Compare(">", 2)}),
    ("ctx.d = DATE '2026-01-02'", {"ctx.d": Compare("=", DAY_2026_01_02)}),
    ("ctx.amount > 1.5", {"ctx.amount": Compare(">", Decimal("1.50"))}),
    ("ctx.page.n = 2.0", {}),
    ("ctx['page']['n'] > 2.5", {}),
    # Maps, lists, whole structs, other functions
    ("m['a'] = 1", {}),
    ("element_at(m, 'a')[1] = 1", {}),
    ("tags[1].k = 'x'", {}),
    ("list_contains(tags, {'k': 'x', 'v': 1})", {}),
    ("ctx.page.url LIKE '/p%'", {}),
    ("ctx.page IS NULL", {}),
    ("ctx IS NOT NULL", {}),
    ("ctx.page = {'url': '/a', 'n': 1}", {}),
    ("lower(ctx.page.url) = '/p1'", {}),
]


@pytest.fixture(scope="module")
def planner() -> ScanPlanner:
    planner = ScanPlanner()
    planner.prepare(SPEC)
    return planner


def decoded(planner: ScanPlanner, where: str) -> Mapping[str, ScanFilter]:
    view = view_sql(SPEC, standin_source(SPEC.name), None, replace=True)
    found = planner.scans(f"SELECT * FROM ev WHERE {where}", {"ev": view})["ev"]
    assert found.scans is not None and len(found.scans) == 1, where
    return found.scans[0]


@pytest.mark.parametrize(("where", "expected"), DECODED, ids=[w for w, _ in DECODED])
def test_each_predicate_form_decodes_to_its_leaf_filters_or_to_nothing(
    planner: ScanPlanner, where: str, expected: dict[str, ScanFilter]
) -> None:
    found = decoded(planner, where)
    assert dict(found) == expected


# -- the decoded filters hold for every row DuckDB answers -------------------------------------

ROWS = [
    "(TIMESTAMP '2026-01-01 00:00', NULL, NULL, NULL)",
    "(TIMESTAMP '2026-01-01 01:00', {'ip': NULL, 'page': NULL, 'd': NULL, 'amount': NULL},"
    " [], MAP {})",
    "(TIMESTAMP '2026-01-02 00:00', {'ip': 'x', 'page': {'url': NULL, 'n': NULL},"
    " 'd': DATE '2026-01-02', 'amount': 1.50}, NULL, MAP {'a': 1})",
    "(TIMESTAMP '2026-01-03 00:00', {'ip': '1.2.3.4', 'page': {'url': '/p1', 'n': 2},"
    " 'd': DATE '2026-01-03', 'amount': 2.00}, [{'k': 'x', 'v': 1}], MAP {'a': 2})",
    "(TIMESTAMP '2025-12-31 00:00', {'ip': 'a', 'page': {'url': '/a', 'n': 9},"
    " 'd': DATE '2025-12-31', 'amount': 0.10}, [{'k': 'y', 'v': 2}], NULL)",
    "(TIMESTAMP '2026-02-01 00:00', {'ip': 'x', 'page': {'url': '/b', 'n': 5},"
    " 'd': NULL, 'amount': 9.99}, [NULL], MAP {'b': 3})",
    "(TIMESTAMP '2026-02-02 00:00', {'ip': 'b', 'page': {'url': '/p10', 'n': 3},"
    " 'd': DATE '2026-01-02', 'amount': 1.51}, NULL, NULL)",
]


@pytest.fixture(scope="module")
def rows() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duck.connect(threads=1)
    columns = ", ".join(f"{ident(c.name)} {c.type}" for c in SPEC.columns)
    con.execute(f"CREATE TABLE ev ({columns})")
    con.execute(f"INSERT INTO ev VALUES {', '.join(ROWS)}")
    yield con
    con.close()


def domain(value: Any) -> Any:
    """A leaf value in the scan filters' comparison domain."""
    if isinstance(value, datetime):
        return (value - datetime(1970, 1, 1)) // timedelta(microseconds=1)
    if isinstance(value, date):
        return (value - date(1970, 1, 1)).days
    return value


def leaf(row: Mapping[str, Any], path: str) -> Any:
    value: Any = row
    for name in path.split("."):
        value = None if value is None else value[name]
    return value


@pytest.mark.parametrize(
    ("where", "expected"), [(w, e) for w, e in DECODED if e], ids=[w for w, e in DECODED if e]
)
def test_every_row_duckdb_answers_passes_the_decoded_filters(
    planner: ScanPlanner, rows: duckdb.DuckDBPyConnection, where: str, expected: Any
) -> None:
    found = decoded(planner, where)
    cursor = rows.execute(f"SELECT ts, ctx FROM ev WHERE {where}")
    names = [d[0] for d in cursor.description]
    answered = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    rejected = rows.execute(f"SELECT count(*) FROM ev WHERE NOT coalesce({where}, false)")
    assert rejected.fetchone() != (0,), "the rows must tell a filter from none"
    for row in answered:
        for path, condition in found.items():
            assert passes(domain(leaf(row, path)), condition), (where, row, path)


# -- the serialized names the decoding keys on --------------------------------------------------


def _expression(e: Mapping[str, Any]) -> str:
    kind = e["expression_class"]
    if kind == "BOUND_REF":
        return f"ref{e['index']}:{e['return_type']['id']}"
    if kind == "BOUND_CONSTANT":
        return f"{e['value']['value']!r}:{e['value']['type']['id']}"
    if kind == "BOUND_FUNCTION":
        args = ", ".join(_expression(c) for c in e["children"])
        return f"{e['name']}({args}):{e['return_type']['id']}"
    if kind == "BOUND_COMPARISON":
        return f"{e['type']}({_expression(e['left'])}, {_expression(e['right'])})"
    if kind in ("BOUND_OPERATOR", "BOUND_CONJUNCTION"):
        return f"{e['type']}({', '.join(_expression(c) for c in e['children'])})"
    if kind == "BOUND_CAST":
        return f"CAST({_expression(e['child'])} AS {e['return_type']['id']})"
    return str(kind)


def _table_filter(f: Mapping[str, Any]) -> str:
    kind = f["filter_type"]
    if kind == "STRUCT_EXTRACT":
        inner = _table_filter(f["child_filter"])
        return f"STRUCT_EXTRACT[{f['child_idx']}, {f.get('child_name')}]({inner})"
    if kind == "CONSTANT_COMPARISON":
        c = f["constant"]
        return f"{f['comparison_type']} {c['value']!r}:{c['type']['id']}"
    if kind.startswith("CONJUNCTION_"):
        return f"{kind}({', '.join(_table_filter(c) for c in f['child_filters'])})"
    if kind == "EXPRESSION_FILTER":
        return f"EXPRESSION({_expression(f['expr'])})"
    return str(kind)


@pytest.fixture(scope="module")
def raw_planner() -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection set up as the scan planner's (same optimizers off, same stand-in and view),
    to read the plan as DuckDB serializes it."""
    con = duck.connect(threads=1)
    con.execute(f"SET disabled_optimizers = {string_literal(','.join(PLANNER_OFF))}")
    con.execute(f"CREATE SCHEMA {STANDIN_SCHEMA}")
    columns = ", ".join(f"{ident(c)} {t}" for c, t in standin_columns(SPEC))
    con.execute(f"CREATE TABLE {standin_source(SPEC.name)} ({columns})")
    con.execute(view_sql(SPEC, standin_source(SPEC.name), None))
    yield con
    con.close()


PAGE_URL = (
    "struct_extract(struct_extract(ref0:STRUCT, 'page':VARCHAR):STRUCT, 'url':VARCHAR):VARCHAR"
)
SERIALIZED = [
    (
        "ctx.page.url = '/p1'",
        "STRUCT_EXTRACT[1, page](STRUCT_EXTRACT[0, url](COMPARE_EQUAL '/p1':VARCHAR))",
    ),
    ("struct_extract_at(ctx, 1) = 'x'", "STRUCT_EXTRACT[0, None](COMPARE_EQUAL 'x':VARCHAR)"),
    (
        "ctx.page.n > 5 AND ctx.ip = 'x'",
        "CONJUNCTION_AND(STRUCT_EXTRACT[1, page](STRUCT_EXTRACT[1, n](COMPARE_GREATERTHAN"
        " 5:INTEGER)), STRUCT_EXTRACT[0, ip](COMPARE_EQUAL 'x':VARCHAR))",
    ),
    (
        "ctx['page']['url'] = '/p1'",
        "EXPRESSION(COMPARE_EQUAL(array_extract(array_extract(ref0:STRUCT, 'page':VARCHAR)"
        ":STRUCT, 'url':VARCHAR):VARCHAR, '/p1':VARCHAR))",
    ),
    (
        "struct_extract_at(struct_extract_at(ctx, 2), 1) = 'x'",
        "STRUCT_EXTRACT[1, None](STRUCT_EXTRACT[0, None](COMPARE_EQUAL 'x':VARCHAR))",
    ),
    (
        "struct_extract_at(struct_extract_at(ctx, 2), 1) IN ('a', 'b')",
        "EXPRESSION(COMPARE_IN(struct_extract_at(struct_extract_at(ref0:STRUCT, 2:BIGINT)"
        ":STRUCT, 1:BIGINT):VARCHAR, 'a':VARCHAR, 'b':VARCHAR))",
    ),
    (
        "ctx.page.url IN ('/a', '/b')",
        f"EXPRESSION(COMPARE_IN({PAGE_URL}, '/a':VARCHAR, '/b':VARCHAR))",
    ),
    ("ctx.page.url IS NULL", f"EXPRESSION(OPERATOR_IS_NULL({PAGE_URL}))"),
    ("ctx.page.url IS NOT NULL", f"EXPRESSION(OPERATOR_IS_NOT_NULL({PAGE_URL}))"),
    (
        "ctx.page.url = '/a' OR ctx.page.url = '/b'",
        f"EXPRESSION(CONJUNCTION_OR(COMPARE_EQUAL({PAGE_URL}, '/a':VARCHAR),"
        f" COMPARE_EQUAL({PAGE_URL}, '/b':VARCHAR)))",
    ),
    (
        "ctx.page.n = 2.0",
        "EXPRESSION(COMPARE_EQUAL(CAST(struct_extract(struct_extract(ref0:STRUCT,"
        " 'page':VARCHAR):STRUCT, 'n':VARCHAR):INTEGER AS DECIMAL), 20:DECIMAL))",
    ),
    (
        "m['a'] = 1",
        "EXPRESSION(COMPARE_EQUAL(map_extract_value(ref0:MAP, 'a':VARCHAR):INTEGER, 1:INTEGER))",
    ),
    (
        "tags[1].k = 'x'",
        "EXPRESSION(COMPARE_EQUAL(struct_extract(array_extract(ref0:LIST, 1:BIGINT):STRUCT,"
        " 'k':VARCHAR):VARCHAR, 'x':VARCHAR))",
    ),
]


def serialized_filters(con: duckdb.DuckDBPyConnection, where: str) -> list[dict[str, Any]]:
    row = con.execute(
        "SELECT json_serialize_plan(?, skip_null := true, skip_empty := true, optimize := true)",
        [f"SELECT * FROM ev WHERE {where}"],
    ).fetchone()
    assert row is not None
    plan = json.loads(row[0])
    gets = [n for n in _walk(plan["plans"]) if n.get("type") == "LOGICAL_GET"]
    assert len(gets) == 1
    filters: list[dict[str, Any]] = gets[0]["table_filters"]["filters"]
    return filters


@pytest.mark.parametrize(("where", "serialized"), SERIALIZED, ids=[w for w, _ in SERIALIZED])
def test_duckdb_serializes_each_form_as_the_decoding_reads_it(
    raw_planner: duckdb.DuckDBPyConnection, where: str, serialized: str
) -> None:
    # A DuckDB that spells these otherwise (an index base, a function name, a filter kind)
    # fails here, rather than decoding to nothing or, worse, to another leaf.
    filters = serialized_filters(raw_planner, where)
    assert len(filters) == 1
    column = {"m": "m", "t": "tags"}.get(where[0], "ctx")
    assert filters[0]["key"] == SPEC.column_names.index(column)
    assert _table_filter(filters[0]["value"]) == serialized


def _ctx_filter(con: duckdb.DuckDBPyConnection, where: str) -> dict[str, Any]:
    (entry,) = serialized_filters(con, where)
    value: dict[str, Any] = entry["value"]
    return value


def test_a_serialized_form_that_does_not_agree_with_the_column_type_decodes_to_nothing(
    raw_planner: duckdb.DuckDBPyConnection,
) -> None:
    tree = type_tree(CTX)
    assert isinstance(tree, Struct)

    def decode(node: Mapping[str, Any]) -> dict[str, ScanFilter]:
        return struct_leaf_filters(node, column="ctx", tree=tree)

    # Real serialized filters, each changed in one place as another DuckDB might spell it.
    chain = _ctx_filter(raw_planner, "ctx.page.url = '/p1'")
    assert decode(chain) == URL_P1
    leaf = chain["child_filter"]
    for change in ({"child_name": "n"}, {"child_idx": 2}, {"child_idx": 1}, {"child_idx": True}):
        changed = {**chain, "child_filter": {**leaf, **change}}
        assert decode(changed) == {}, change  # another field's name, or a type that disagrees
    assert decode({**chain, "child_idx": 9}) == {}
    # An expression filter below a field is not the column's expression.
    expression = _ctx_filter(raw_planner, "ctx['page']['url'] = '/p1'")
    assert decode(expression) == URL_P1
    assert decode({**chain, "child_filter": expression}) == {}
    outer = expression["expr"]["left"]
    for change in (
        {"name": "list_extract"},
        {"name": "struct_extract_at"},  # a VARCHAR key is no position
        {"children": outer["children"][:1]},
    ):
        changed_expr = {**expression["expr"], "left": {**outer, **change}}
        assert decode({**expression, "expr": changed_expr}) == {}, change
    ref = outer["children"][0]["children"][0]
    assert ref["expression_class"] == "BOUND_REF"
    inner = outer["children"][0]
    changed_inner = {**inner, "children": [{**ref, "index": 1}, inner["children"][1]]}
    changed_expr = {
        **expression["expr"],
        "left": {**outer, "children": [changed_inner, outer["children"][1]]},
    }
    assert decode({**expression, "expr": changed_expr}) == {}
    # Positions past either end of the struct.
    positional = _ctx_filter(
        raw_planner, "struct_extract_at(struct_extract_at(ctx, 2), 1) IN ('a')"
    )
    assert decode(positional) == {"ctx.page.url": InList(("a",))}
    extract = positional["expr"]["children"][0]
    for position in (0, 3):
        key = {**extract["children"][1]}
        key["value"] = {**key["value"], "value": position}
        moved = {**extract, "children": [extract["children"][0], key]}
        children = [moved, *positional["expr"]["children"][1:]]
        assert decode({**positional, "expr": {**positional["expr"], "children": children}}) == {}


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_wide_decimal_constants_decode_exactly() -> None:
    # Decimal's default context keeps 28 digits: a DECIMAL(38,2) constant rounded there would
    # lie beside the files' exact statistics and skip the file holding the value.
    spec = TableSpec.create(
        name="w", schema="ts TIMESTAMP NOT NULL, d DECIMAL(38,2), s STRUCT(d DECIMAL(38,2))"
    )
    planner = ScanPlanner()
    planner.prepare(spec)
    view = view_sql(spec, standin_source("w"), None, replace=True)
    wide = "123456789012345678901234567890123.45"
    for where, path in (
        (f"d = {wide}", "d"),
        (f"s.d = {wide}", "s.d"),
        (f"s['d'] = {wide}", "s.d"),
    ):
        found = planner.scans(f"SELECT 1 FROM w WHERE {where}", {"w": view})["w"].scans
        assert found == ({path: Compare("=", Decimal(wide))},), where
