"""Random tables and random delete predicates for the differential delete test.

The predicates cover NULLs (literals, IN lists holding NULL, IS [NOT] DISTINCT FROM), the
partition columns (``k``, and ``ts`` through ``day(ts)``), JSON paths into ``p``, CASE and
COALESCE, LIKE, and, now and then, a call of a DuckDB function whose stability is not
CONSISTENT, drawn from ``duckdb_functions()`` when the test runs (a delete must refuse those).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import duckdb

from icefloe.ingest import Inserter
from icefloe.merge import MergeWorker, merge_locally
from icefloe.metastore.store import MetaStore
from icefloe.spec import SizeTargets, TableSpec
from icefloe.storage import ObjectStore

SCHEMA = (
    "ts TIMESTAMP NOT NULL, k VARCHAR NOT NULL, i INTEGER, x DOUBLE, s VARCHAR, p JSON,"
    " flag BOOLEAN"
)
COLUMNS = ("ts", "k", "i", "x", "s", "p", "flag")
KEYS = ("alpha", "beta")
START = datetime(2026, 11, 1)
DAYS = 2
JSON_KEYS = ("a", "n", "tags", "deep")


def unstable_functions() -> list[str]:
    """Every scalar function DuckDB does not mark CONSISTENT, as this DuckDB lists them."""
    con = duckdb.connect()
    try:
        rows = con.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions()"
            " WHERE function_type = 'scalar' AND stability <> 'CONSISTENT' ORDER BY 1"
        ).fetchall()
    finally:
        con.close()
    return [str(r[0]) for r in rows]


def table_spec(name: str) -> TableSpec:
    return TableSpec.create(
        name=name,
        schema=SCHEMA,
        partition_by="day(ts), k",
        row_group_by="i",
        sizes=SizeTargets(row_group_max_rows=16),
    )


def fill(
    meta: MetaStore, objects: ObjectStore, rng: random.Random, *, name: str, batches: int
) -> None:
    """Create table ``name`` and insert ``batches`` random batches, the first half merged."""
    meta.create_table(table_spec(name))
    inserter = Inserter(meta=meta, objects=objects)
    try:
        for number in range(batches):
            inserter.insert_rows(name, [_row(rng) for _ in range(rng.randint(4, 30))])
            if number == batches // 2:
                merge_locally(
                    meta=meta, worker=MergeWorker(meta=meta, objects=objects), until_quiet=True
                )
    finally:
        inserter.close()


def _maybe(rng: random.Random, value: object, share: float = 0.15) -> object:
    return None if rng.random() < share else value


def _text(rng: random.Random) -> str:
    """Three characters, now and then a '%' (the placeholder mark of the meta store's driver)."""
    return rng.choice("abc%") + "".join(rng.choice("xyz%") for _ in range(2))


def _row(rng: random.Random) -> dict[str, object]:
    ts = START + timedelta(days=rng.randrange(DAYS), seconds=rng.randrange(86400))
    v = rng.randint(-30, 30)
    payload: dict[str, object] = {}
    if rng.random() < 0.8:
        payload["a"] = rng.choice(("x", "y", "z", "", None))
    if rng.random() < 0.8:
        # Mostly integers; now and then text, so a cast of the path can fail.
        payload["n"] = rng.randint(-5, 5) if rng.random() < 0.97 else "five"
    if rng.random() < 0.5:
        payload["tags"] = [rng.choice(("red", "blue", "green")) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.3:
        payload["deep"] = {"level": {"v": rng.randint(0, 3)}}
    return {
        "ts": ts.isoformat(),
        "k": rng.choice(KEYS),
        "i": _maybe(rng, v),
        "x": _maybe(rng, v / 3 + rng.random()),
        "s": _maybe(rng, _text(rng)),
        "p": _maybe(rng, json.dumps(payload) if rng.random() < 0.95 else "null"),
        "flag": _maybe(rng, v % 2 == 0),
    }


@dataclass
class PredicateGenerator:
    """Random boolean expressions over the table's columns."""

    rng: random.Random
    unstable: list[str] = field(default_factory=list)
    unstable_share: float = 0.08

    def predicate(self) -> tuple[str, str | None]:
        """A predicate, and the unstable function it calls (None when it calls none)."""
        text = self._tree(0)
        if self.unstable and self.rng.random() < self.unstable_share:
            name = self.rng.choice(self.unstable)
            call = f"({name}() IS NULL)" if self.rng.random() < 0.5 else f"({name}() = {name}())"
            text = f"({text} {self.rng.choice(('AND', 'OR'))} {call})"
            return text, name
        return text, None

    def _tree(self, depth: int) -> str:
        rng = self.rng
        if depth < 2 and rng.random() < 0.4:
            left, right = self._tree(depth + 1), self._tree(depth + 1)
            text = f"({left} {rng.choice(('AND', 'AND', 'OR'))} {right})"
            return f"NOT {text}" if rng.random() < 0.15 else text
        return self._atom()

    def _atom(self) -> str:
        rng = self.rng
        kind = rng.randrange(15)
        if kind == 0:
            return f"{rng.choice(COLUMNS)} IS {rng.choice(('', 'NOT '))}NULL"
        if kind == 1:
            values = [str(rng.randint(-30, 30)) for _ in range(rng.randint(1, 3))]
            if rng.random() < 0.5:
                values.append("NULL")
            return f"i {rng.choice(('', 'NOT '))}IN ({', '.join(values)})"
        if kind == 2:
            other = rng.choice(("NULL", str(rng.randint(-30, 30))))
            return f"i IS {rng.choice(('', 'NOT '))}DISTINCT FROM {other}"
        if kind == 3:
            keys = ", ".join(f"'{k}'" for k in rng.sample((*KEYS, "delta"), rng.randint(1, 2)))
            return rng.choice((f"k IN ({keys})", f"k = '{rng.choice(KEYS)}'", "k <> 'beta'"))
        if kind == 4:
            day = (START + timedelta(days=rng.randint(-1, DAYS))).date().isoformat()
            return rng.choice(
                (
                    f"CAST(ts AS DATE) {self._op()} DATE '{day}'",
                    f"ts {self._op()} TIMESTAMP '{day} {rng.randrange(24):02d}:00:00'",
                    f"date_trunc('day', ts) = '{day}'",
                )
            )
        if kind == 5:
            # DuckDB binds the JSON arrows more loosely than AND: unparenthesized,
            # `c AND p->>'$.a' = 'x'` means `(c AND p) ->> '$.a' = 'x'` (kept now and then).
            path = "p->>'$.a'" if rng.random() < 0.1 else "(p->>'$.a')"
            return f"{path} {rng.choice(('=', '<>'))} '{rng.choice(('x', 'y', ''))}'"
        if kind == 6:
            cast = rng.choice(("TRY_CAST", "TRY_CAST", "TRY_CAST", "CAST"))
            return f"{cast}((p->>'$.n') AS INTEGER) {self._op()} {rng.randint(-5, 5)}"
        if kind == 7:
            return rng.choice(
                (
                    f"json_extract(p, '$.{rng.choice(JSON_KEYS)}') IS NULL",
                    f"(p->'$.tags'->>0) = '{rng.choice(('red', 'blue'))}'",
                    f"json_array_length(p, '$.tags') {self._op()} {rng.randint(0, 3)}",
                    f"CAST((p->>'$.deep.level.v') AS INTEGER) = {rng.randint(0, 3)}",
                    f"json_exists(p, '$.{rng.choice(JSON_KEYS)}')",
                )
            )
        if kind == 8:
            if rng.random() < 0.5:  # a '%' in a compared literal must stay one character
                return f"s {self._op()} '{_text(rng)}'"
            return f"s {rng.choice(('', 'NOT '))}LIKE '{rng.choice('abc')}{rng.choice(('%', 'x%', '_z'))}'"
        if kind == 9:
            return f"coalesce(i, {rng.randint(-5, 5)}) {self._op()} {rng.randint(-10, 10)}"
        if kind == 10:
            return (
                f"CASE WHEN flag THEN i > {rng.randint(-10, 10)} ELSE x < {rng.randint(-5, 5)} END"
            )
        if kind == 11:
            return rng.choice(("flag", "NOT flag", "flag IS NOT TRUE", "NULL", "true", "false"))
        if kind == 12:
            return f"x {self._op()} {rng.randint(-10, 10)}.5"
        if kind == 13:
            return f"i {self._op()} {rng.choice(('NULL', str(rng.randint(-30, 30))))}"
        low = rng.randint(-30, 30)
        return f"i BETWEEN {low} AND {low + rng.randint(-5, 20)}"

    def _op(self) -> str:
        return self.rng.choice(("=", "<", "<=", ">", ">=", "<>"))
