"""Random tables and random SELECTs for the differential pruning test.

In the spirit of SQLancer's query partitioning and NoREC: the same query is answered twice,
once by the engine with pruning and once over every file of the same snapshot, and the two
answers must be the same multiset of rows. Everything follows from one seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from icefloe.ingest import Inserter
from icefloe.merge import MergeWorker, merge_locally
from icefloe.metastore.store import MetaStore
from icefloe.spec import Column, SizeTargets, TableSpec
from icefloe.spec.evolution import (
    AddColumn,
    DropColumn,
    RenameColumn,
    SchemaChange,
    WidenColumn,
    evolve,
)
from icefloe.storage import ObjectStore
from support.nested_fuzz import NestedPredicates, nested_edge_values, nested_values

TABLE = "f"
# Nested columns, in both tables (the schema changes never touch them): struct leaves whose
# statistics prune, and a map and a list of structs whose predicates must prune nothing.
NESTED_COLUMNS = (
    "ctx STRUCT(s VARCHAR, n INTEGER, sub STRUCT(d DATE, f DOUBLE, t TIMESTAMP, z TIMESTAMPTZ),"
    " amt DECIMAL(10,2), ok BOOLEAN), mp MAP(VARCHAR, INTEGER), items STRUCT(k VARCHAR, v BIGINT)[]"
)
# Generated columns, in both tables (computed at insert from columns the changes never touch):
# their statistics prune as a stored column's do.
GI = "gi BIGINT AS (CAST(i AS BIGINT) * 3 - 7)"
GK_EXPRESSION = "upper(k) || ':' || CAST(CAST(ts AS DATE) AS VARCHAR)"
GENERATED_COLUMNS = f"{GI}, gk VARCHAR AS ({GK_EXPRESSION})"
SCHEMA = (
    "ts TIMESTAMP NOT NULL, tz TIMESTAMPTZ, d DATE, k VARCHAR NOT NULL, i INTEGER, b BIGINT,"
    " x DOUBLE, r FLOAT, m DECIMAL(10,2), s VARCHAR, flag BOOLEAN, "
    + NESTED_COLUMNS
    + ", "
    + GENERATED_COLUMNS
)
KEYS = ("alpha", "beta", "gamma")
START = datetime(2026, 10, 30)
DAYS = 5
INT_EDGES = (-2147483648, 2147483647, 0, -1, 1)
# Insert refuses NaN and infinities, so files hold only finite floats: the extremes of each
# width, signed zeros and subnormals.
FLOAT_EDGES = (-0.0, 0.0, 1e308, -1.7976931348623157e308, -1e-308, 5e-324)
REAL_EDGES = (3.4028234663852886e38, -1.401298464324817e-45, -0.0, 0.5)
# '%' is the meta store driver's placeholder mark: a literal holding it must stay itself.
STRING_EDGES = (
    *("", " ", "a'b", "Zürich", "日本", "\u00ff", "z" * 300, "a" * 257 + "b"),
    *("100%", "%%", "%(x)s", "%s"),
)


def spec() -> TableSpec:
    return TableSpec.create(
        name=TABLE,
        schema=SCHEMA,
        partition_by="day(ts), k",
        # Integer row-group key: files carry membership filters of i.
        row_group_by="i",
        # Small row groups: many files hold several.
        sizes=SizeTargets(row_group_max_rows=16),
    )


def fill_table(
    meta: MetaStore, objects: ObjectStore, rng: random.Random, *, count: int, merged: int
) -> None:
    """Create the table and insert ``count`` random batches: the first ``merged`` of them
    merged until quiet, the rest left as small files."""
    meta.create_table(spec())
    inserter = Inserter(meta=meta, objects=objects)
    generated = batches(rng, count=count)
    try:
        for rows in generated[:merged]:
            inserter.insert_rows(TABLE, rows)
        merge_locally(meta=meta, worker=MergeWorker(meta=meta, objects=objects), until_quiet=True)
        for rows in generated[merged:]:
            inserter.insert_rows(TABLE, rows)
    finally:
        inserter.close()


# The evolved table: the same final columns as SCHEMA, reached through two schema changes,
# so that its live files hold four layouts (see fill_evolved_table).
EVOLVED_SCHEMA = (
    "ts TIMESTAMP NOT NULL, tz TIMESTAMPTZ, d DATE, k VARCHAR NOT NULL, i INTEGER, b INTEGER,"
    " x_old DOUBLE, r FLOAT, m DECIMAL(9,2), s2 VARCHAR, s VARCHAR, " + NESTED_COLUMNS + ", " + GI
)
CHANGES_TO_V2: list[SchemaChange] = [
    WidenColumn("b", "BIGINT"),
    WidenColumn("m", "DECIMAL(10,2)"),
    RenameColumn("x_old", "x"),
    AddColumn(Column("flag", "BOOLEAN")),
]
# The old s (a decoy whose values sort apart from the real ones) makes way for s2, and d is
# dropped and added again: neither the old values nor their statistics may ever be read for
# the columns that now bear those names. Generated column gk is added: files of versions 1
# and 2 lack it, and every reader computes it for their rows.
CHANGES_TO_V3: list[SchemaChange] = [
    DropColumn("s"),
    RenameColumn("s2", "s"),
    DropColumn("d"),
    AddColumn(Column("d", "DATE")),
    AddColumn(Column("gk", "VARCHAR", expression=GK_EXPRESSION)),
]


# A widening alone: files of versions 3 and 4 differ only in r's type (FLOAT, then DOUBLE), so
# they cannot share one scan.
CHANGES_TO_V4: list[SchemaChange] = [WidenColumn("r", "DOUBLE")]


def fill_evolved_table(
    meta: MetaStore, objects: ObjectStore, rng: random.Random, *, count: int
) -> None:
    """Create the table at EVOLVED_SCHEMA and insert ``count`` random batches: a sixth merged
    at version 1, then small files at versions 1, 2, 3 and 4 (merges of files of several
    versions are tested in test_schema_evolution; here every layout must stay live)."""
    evolved = TableSpec.create(
        name=TABLE,
        schema=EVOLVED_SCHEMA,
        partition_by="day(ts), k",
        row_group_by="i",
        sizes=SizeTargets(row_group_max_rows=16),
    )
    meta.create_table(evolved)
    inserter = Inserter(meta=meta, objects=objects)
    worker = MergeWorker(meta=meta, objects=objects)
    generated = batches(rng, count=count)
    # merged: batches [0, step); version 2 from 2 * step, 3 from 4 * step, 4 from 5 * step
    step = count // 6
    try:
        for n, rows in enumerate(generated):
            changes = {2 * step: CHANGES_TO_V2, 4 * step: CHANGES_TO_V3, 5 * step: CHANGES_TO_V4}
            if n in changes:
                meta.alter_table(TABLE, lambda current, c=changes[n]: evolve(current, c))
            version = 1 if n < 2 * step else 2 if n < 4 * step else 3 if n < 5 * step else 4
            inserter.insert_rows(TABLE, [_at_version(row, version) for row in rows])
            if n + 1 == step:
                merge_locally(meta=meta, worker=worker, until_quiet=True)
    finally:
        inserter.close()


def _at_version(row: dict[str, object], version: int) -> dict[str, object]:
    """A generated row as the evolved table's schema at ``version`` names and holds it."""
    row = dict(row)
    if version < 3:
        real = row.pop("s")
        row["s2"] = real
        row["s"] = None if real is None else "~" + str(real)[::-1]
        # The d that version 3 drops is never NULL: its statistics (no NULL) would prune the
        # old files from `d IS NULL` if they were ever taken for the new d's, which is NULL
        # in every old row.
        row["d"] = str(row["ts"])[:10]
    if version < 2:
        row["x_old"] = row.pop("x")
        row.pop("flag")
        m = row["m"]
        if isinstance(m, float) and abs(m) >= 1e7:
            row["m"] = None  # DECIMAL(9,2) cannot hold it
    return row


def batches(rng: random.Random, *, count: int) -> list[list[dict[str, object]]]:
    """``count`` insert batches. Each batch draws its values around its own centre, so files
    have narrow, different ranges that statistics can tell apart, and its keys from one to
    all three of KEYS (each file a query reads costs about the same, whatever it holds: a
    batch in fewer partitions leaves fewer, fuller files)."""
    out = []
    for _ in range(count):
        centre = rng.randint(-500, 500)
        prefix = rng.choice("abcdefgh")
        day_from = rng.randrange(DAYS)
        days = rng.choice((1, 1, 2, DAYS))
        keys = rng.sample(KEYS, rng.randint(1, len(KEYS)))
        rows = []
        for _ in range(rng.randint(5, 60)):
            ts = START + timedelta(
                days=day_from + rng.randrange(days), seconds=rng.randrange(86400)
            )
            if ts >= START + timedelta(days=DAYS):
                ts -= timedelta(days=DAYS)
            rows.append(_row(rng, ts, centre, prefix, keys))
        if rng.random() < 0.5:
            rows.append(_edge_row(rng))
        out.append(rows)
    return out


def _maybe(rng: random.Random, value: object, null_share: float = 0.1) -> object:
    return None if rng.random() < null_share else value


def _row(
    rng: random.Random, ts: datetime, centre: int, prefix: str, keys: list[str]
) -> dict[str, object]:
    v = centre + rng.randint(-20, 20)
    tz = ts.replace(tzinfo=UTC) + timedelta(minutes=rng.randint(-600, 600))
    row: dict[str, object] = {
        "ts": ts.isoformat(),
        "tz": _maybe(rng, tz.isoformat()),
        "d": _maybe(rng, (ts.date() + timedelta(days=rng.randint(-3, 3))).isoformat()),
        "k": rng.choice(keys),
        "i": _maybe(rng, v),
        "b": _maybe(rng, v * 1000 + rng.randint(0, 999)),
        "x": _maybe(rng, rng.choice(FLOAT_EDGES) if rng.random() < 0.03 else v / 7 + rng.random()),
        "r": _maybe(rng, round(v / 3, 2)),
        "m": _maybe(rng, v / 4),
        "s": _maybe(rng, prefix + "".join(rng.choice("abcxyz") for _ in range(rng.randint(0, 4)))),
        "flag": _maybe(rng, v % 2 == 0),
    }
    return row | nested_values(rng, ts=ts, v=v, prefix=prefix)


def _edge_row(rng: random.Random) -> dict[str, object]:
    ts = START + timedelta(days=rng.randrange(DAYS), seconds=rng.randrange(86400))
    return {
        "ts": ts.isoformat(),
        "tz": None,
        "d": None,
        "k": rng.choice(KEYS),
        "i": rng.choice(INT_EDGES),
        "b": None,
        "x": rng.choice(FLOAT_EDGES),
        "r": rng.choice(REAL_EDGES),
        "m": rng.choice((99999999.99, -99999999.99, 0.0)),
        "s": rng.choice(STRING_EDGES),
        "flag": None,
        **nested_edge_values(rng),
    }


# -- queries ----------------------------------------------------------------------------------


@dataclass
class QueryGenerator:
    """Random SELECTs over table ``f``: predicates mixing comparisons, BETWEEN, IN, LIKE,
    IS [NOT] NULL, CASTs, arithmetic and NOT/AND/OR, on flat columns and on the leaves of
    nested ones (support.nested_fuzz), inside shapes with subqueries, CTEs, self-joins, set
    operations, lateral joins and windows. After each :meth:`query`, :attr:`nested_leaf_only`
    says whether every atom of it was a predicate on a struct leaf."""

    rng: random.Random
    nested: NestedPredicates = field(init=False)
    flat_atoms: int = 0

    def __post_init__(self) -> None:
        self.nested = NestedPredicates(self.rng, literal=self.literal, op=self._op)

    @property
    def nested_leaf_only(self) -> bool:
        drawn = self.nested
        return drawn.leaf_atoms > 0 and drawn.other_atoms == 0 and self.flat_atoms == 0

    def query(self) -> str:
        self.flat_atoms = self.nested.leaf_atoms = self.nested.other_atoms = 0
        shape: Callable[[], str] = self.rng.choice(
            [
                self._plain,
                self._plain,
                self._plain,
                self._scalar_subquery,
                self._exists,
                self._cte,
                self._self_join,
                self._set_operation,
                self._window,
                self._lateral,
                self._in_subquery,
                self._grouped,
                self._top_n,
                self._qualify,
                self._cte_chain,
                self._correlated_scalar,
                self._quantified,
                self._case_filter,
                self._nested_rows,
                self._nested_aggregates,
            ]
        )
        return shape()

    # shapes

    def _plain(self) -> str:
        return f"SELECT {self._aggregates('f')} FROM f WHERE {self.predicate('f')}"

    def _scalar_subquery(self) -> str:
        return (
            f"SELECT (SELECT count(*) FROM f WHERE {self.predicate('')}) AS inner_n,"
            f" count(*) AS n FROM f WHERE {self.predicate('')}"
        )

    def _exists(self) -> str:
        negate = self.rng.choice(("", "NOT "))
        return (
            f"SELECT count(*) AS n, sum(f.b) AS sb FROM f WHERE {self.predicate('f')} AND {negate}"
            f"EXISTS (SELECT 1 FROM f g WHERE g.k = f.k AND g.i > f.i AND {self.predicate('g')})"
        )

    def _cte(self) -> str:
        return (
            f"WITH c AS (SELECT * FROM f WHERE {self.predicate('f')})"
            f" SELECT count(*) AS n, min(c.s) AS s, max(c.ts) AS ts FROM c"
            f" WHERE {self.predicate('c')}"
        )

    def _self_join(self) -> str:
        kind = self.rng.choice(("JOIN", "LEFT JOIN"))
        return (
            f"SELECT count(*) AS n, count(b.i) AS nb FROM f a {kind} f b"
            f" ON a.k = b.k AND a.i = b.i AND {self.predicate('b')}"
            f" WHERE {self.predicate('a')}"
        )

    def _set_operation(self) -> str:
        op = self.rng.choice(("UNION", "UNION ALL", "EXCEPT", "INTERSECT"))
        return (
            f"SELECT count(*) AS n, count(DISTINCT v) AS nd FROM ("
            f"SELECT i AS v FROM f WHERE {self.predicate('f')} {op}"
            f" SELECT i AS v FROM f WHERE {self.predicate('f')}) u"
        )

    def _window(self) -> str:
        return (
            "SELECT sum(c) AS total, max(rk) AS top FROM (SELECT count(*) OVER (PARTITION BY k"
            " ORDER BY ts, _row_id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS c,"
            f" rank() OVER (ORDER BY i) AS rk FROM f WHERE {self.predicate('f')})"
        )

    def _lateral(self) -> str:
        return (
            f"SELECT count(*) AS n, sum(l.n) AS ln FROM f, LATERAL (SELECT count(*) AS n FROM f g"
            f" WHERE g.k = f.k AND g.ts < f.ts AND {self.predicate('g')}) l"
            f" WHERE {self.predicate('f')}"
        )

    def _in_subquery(self) -> str:
        return (
            f"SELECT count(*) AS n FROM f WHERE f.i IN (SELECT g.i + 1 FROM f g WHERE"
            f" {self.predicate('g')}) AND {self.predicate('f')}"
        )

    def _grouped(self) -> str:
        return (
            f"SELECT k, count(*) AS n, min(i) AS lo, max(s) AS hi FROM f"
            f" WHERE {self.predicate('f')} GROUP BY k HAVING count(*) > {self.rng.randint(0, 3)}"
        )

    def _top_n(self) -> str:
        # ORDER BY ... LIMIT over a unique order (the row id breaks ties).
        direction = self.rng.choice(("ASC", "DESC"))
        return (
            f"SELECT i, s, ts FROM f WHERE {self.predicate('f')}"
            f" ORDER BY i {direction} NULLS LAST, _row_id LIMIT {self.rng.randint(1, 7)}"
        )

    def _qualify(self) -> str:
        return (
            f"SELECT k, i FROM f WHERE {self.predicate('f')}"
            " QUALIFY row_number() OVER (PARTITION BY k ORDER BY i NULLS LAST, _row_id) <= 2"
        )

    def _cte_chain(self) -> str:
        return (
            f"WITH a AS (SELECT * FROM f WHERE {self.predicate('f')}),"
            f" b AS (SELECT * FROM a WHERE {self.predicate('a')}),"
            f" c AS (SELECT * FROM f WHERE {self.predicate('f')})"
            " SELECT (SELECT count(*) FROM b) AS nb, (SELECT count(*) FROM c) AS nc,"
            " (SELECT count(*) FROM a) AS na"
        )

    def _correlated_scalar(self) -> str:
        return (
            f"SELECT count(*) AS n, sum(m) AS sm FROM (SELECT f.i, (SELECT max(g.m) FROM f g"
            f" WHERE g.k = f.k AND {self.predicate('g')}) AS m FROM f WHERE {self.predicate('f')})"
        )

    def _quantified(self) -> str:
        quantifier = self.rng.choice(("ANY", "ALL"))
        return (
            f"SELECT count(*) AS n FROM f WHERE f.i {self._op()} {quantifier}"
            f" (SELECT g.i FROM f g WHERE {self.predicate('g')}) AND {self.predicate('f')}"
        )

    def _case_filter(self) -> str:
        return (
            f"SELECT count(*) AS n FROM f WHERE CASE WHEN {self.predicate('f')} THEN"
            f" {self.predicate('f')} ELSE coalesce({self.predicate('f')}, false) END"
        )

    def _nested_rows(self) -> str:
        # Whole nested values compared row by row (the row id makes the LIMIT deterministic).
        return (
            f"SELECT _row_id, ctx, mp, items, ctx.sub AS sub FROM f WHERE {self.predicate('f')}"
            f" ORDER BY _row_id LIMIT {self.rng.randint(1, 40)}"
        )

    def _nested_aggregates(self) -> str:
        return (
            "SELECT count(ctx) AS nc, min(ctx.sub.d) AS d, max(ctx['sub']['t']) AS t,"
            " sum(ctx.n) AS sn, min(ctx.s) AS s, max(mp['a']) AS ma, sum(len(items)) AS li,"
            f" count(DISTINCT ctx.sub) AS ns FROM f WHERE {self.predicate('f')}"
        )

    def _aggregates(self, alias: str) -> str:
        p = f"{alias}." if alias else ""
        return self.rng.choice(
            (
                "count(*) AS n",
                f"count(*) AS n, sum({p}i) AS si, min({p}s) AS s, max({p}ts) AS ts",
                f"count({p}x) AS nx, min({p}x) AS lo, max({p}x) AS hi, sum({p}m) AS sm",
                f"count(*) AS n, min({p}tz) AS tz, max({p}d) AS d, bool_or({p}flag) AS f",
            )
        )

    # predicates

    def predicate(self, alias: str, depth: int = 0) -> str:
        rng = self.rng
        if depth < 2 and rng.random() < 0.45:
            combine = rng.choice(("AND", "AND", "OR"))
            left = self.predicate(alias, depth + 1)
            right = self.predicate(alias, depth + 1)
            text = f"({left} {combine} {right})"
            return f"NOT {text}" if rng.random() < 0.15 else text
        return self._atom(alias)

    def _atom(self, alias: str) -> str:
        rng = self.rng
        if rng.random() < 0.35:
            return self.nested.atom(alias)
        self.flat_atoms += 1
        column = rng.choice(
            ("ts", "ts", "tz", "d", "i", "i", "b", "x", "r", "m", "s", "s", "k", "gi", "gk")
        )
        ref = f"{alias}.{column}" if alias else column
        kind = rng.random()
        if kind < 0.08:
            return f"{ref} IS {rng.choice(('', 'NOT '))}NULL"
        if column == "s" and kind < 0.25:
            pattern = rng.choice("abcdefgh") + rng.choice(("%", "_%", "x%", "%z", ""))
            return f"{ref} {rng.choice(('', 'NOT '))}LIKE '{pattern}'"
        if kind < 0.35:
            low, high = self.literal(column), self.literal(column)  # low > high is valid SQL
            return f"{ref} {rng.choice(('', 'NOT '))}BETWEEN {low} AND {high}"
        if kind < 0.45:
            values = ", ".join(self.literal(column) for _ in range(rng.randint(1, 4)))
            return f"{ref} {rng.choice(('', '', 'NOT '))}IN ({values})"
        if column in ("i", "b") and kind < 0.55:
            return f"{ref} {rng.choice(('+', '-'))} {rng.randint(1, 9)} {self._op()} {self.literal(column)}"
        if column == "ts" and kind < 0.6:
            return f"CAST({ref} AS DATE) {self._op()} {self.literal('d')}"
        if column == "ts" and kind < 0.65:
            return f"date_trunc('hour', {ref}) {self._op()} {self.literal('ts')}"
        literal = self.literal(column)
        if rng.random() < 0.5:
            return f"{ref} {self._op()} {literal}"
        return f"{literal} {self._op()} {ref}"

    def _op(self) -> str:
        return self.rng.choice(("=", "<", "<=", ">", ">=", "<>"))

    def literal(self, column: str) -> str:
        rng = self.rng
        if column in ("ts", "tz", "d"):
            moment = START + timedelta(
                days=rng.randint(-1, DAYS), seconds=rng.choice((0, 0, rng.randrange(86400)))
            )
            form = rng.randrange(6)
            if form == 0:
                return f"'{moment.isoformat(sep=' ')}'"
            if form == 1:
                return f"CAST('{moment.isoformat(sep=' ')}' AS DATE)"
            if form == 2:
                return f"DATE '{moment.date().isoformat()}'"
            if form == 3:
                zone = rng.choice(("+00", "+05", "-08", "+05:30"))
                return f"TIMESTAMPTZ '{moment.isoformat(sep=' ')}{zone}'"
            if form == 4:
                return f"TIMESTAMP '{moment.isoformat(sep=' ')}'"
            return f"'{moment.date().isoformat()}'"
        if column == "gk":
            day = (START + timedelta(days=rng.randint(-1, DAYS))).date()
            return f"'{rng.choice(KEYS).upper()}:{day}'"
        if column in ("i", "b", "m", "x", "r", "gi"):
            scale = {"b": 1000, "gi": 3}.get(column, 1)
            value = rng.randint(-520, 520) * scale
            form = rng.randrange(8)
            if form == 0:
                return f"CAST({value + rng.random():.2f} AS INTEGER)"
            if form == 1:
                return f"{value}.5"
            if form == 2:
                return f"'{value}'"
            if form == 3 and column in ("i", "x", "r"):
                return rng.choice(
                    ("2147483647", "-2147483648", "'nan'::DOUBLE", "'inf'::DOUBLE", "1e308")
                )
            if form == 4:
                return f"CAST({value} AS BIGINT)"
            if form == 5:
                return f"{value / 4}"
            return str(value)
        if column == "k":
            return f"'{rng.choice((*KEYS, 'zeta', 'Alpha'))}'"
        if rng.random() < 0.15:
            edge = rng.choice(STRING_EDGES)
            return "'" + edge.replace("'", "''") + "'"
        return (
            "'"
            + rng.choice("abcdefghz")
            + "".join(rng.choice("abcxyz") for _ in range(rng.randint(0, 3)))
            + "'"
        )


def canonical(rows: list[tuple[object, ...]]) -> list[str]:
    """Rows as a sorted list of their reprs: a multiset, insensitive to row order."""
    return sorted(repr(tuple(_canonical_value(v) for v in row)) for row in rows)


def _canonical_value(value: object) -> object:
    """One spelling per value: structs (dicts, in field order) and lists recursively, maps
    (Arrow gives them as lists of (key, value) tuples) as lists sorted by key."""
    if isinstance(value, dict):
        return {k: _canonical_value(v) for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        return sorted((repr(_canonical_value(k)), _canonical_value(v)) for k, v in value)
    if isinstance(value, list):
        return [_canonical_value(v) for v in value]
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, float) and value == 0:
        return 0.0  # min/max may pick -0.0 or 0.0: they are equal, and which is read first varies
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value
