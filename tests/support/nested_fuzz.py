"""The nested columns of the differential's random tables (see query_fuzz.NESTED_COLUMNS): their
random values, and random predicates reaching into them in every spelling DuckDB accepts.

``ctx`` is a STRUCT whose leaves follow each batch's centre (so files have narrow leaf ranges
that statistics can tell apart); ``mp`` is a MAP and ``items`` a list of structs, whose
predicates DuckDB cannot push as leaf filters: they must prune nothing and stay correct.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

INT_EDGES = (-2147483648, 2147483647, 0, -1, 1)
BIGINT_EDGES = (-9223372036854775808, 9223372036854775807, 0)
FLOAT_EDGES = (-0.0, 0.0, 1e308, -1.7976931348623157e308, -1e-308, 5e-324)
STRING_EDGES = ("", " ", "a'b", "Zürich", "日本", "\u00ff", "z" * 300, "a" * 257 + "b")
DATE_EDGES = ("0001-01-01", "9999-12-31", "1970-01-01")
TIMESTAMP_EDGES = ("0001-01-01T00:00:00", "9999-12-31T23:59:59.999999", "1970-01-01T00:00:00")
DECIMAL_EDGES = (99999999.99, -99999999.99, 0.0)
MAP_KEYS = ("a", "b", "c")


@dataclass(frozen=True)
class StructLeaf:
    """A leaf of ``ctx``: its field path, and the flat column whose literals suit its type."""

    path: tuple[str, ...]
    literal_like: str

    @property
    def positions(self) -> tuple[int, ...]:
        """1-based field positions, as ``struct_extract_at`` takes them."""
        return tuple(POSITIONS[self.path[: n + 1]] for n in range(len(self.path)))


POSITIONS = {
    ("s",): 1,
    ("n",): 2,
    ("sub",): 3,
    ("sub", "d"): 1,
    ("sub", "f"): 2,
    ("sub", "t"): 3,
    ("sub", "z"): 4,
    ("amt",): 4,
    ("ok",): 5,
}
LEAVES = (
    StructLeaf(("s",), "s"),
    StructLeaf(("n",), "i"),
    StructLeaf(("n",), "i"),
    StructLeaf(("sub", "d"), "d"),
    StructLeaf(("sub", "d"), "d"),
    StructLeaf(("sub", "f"), "x"),
    StructLeaf(("sub", "t"), "ts"),
    StructLeaf(("sub", "z"), "tz"),
    StructLeaf(("amt",), "m"),
    StructLeaf(("ok",), "flag"),
)


# -- values -----------------------------------------------------------------------------------


def _maybe(rng: random.Random, value: object, null_share: float = 0.1) -> object:
    return None if rng.random() < null_share else value


def nested_values(rng: random.Random, *, ts: datetime, v: int, prefix: str) -> dict[str, object]:
    """One row's ``ctx``, ``mp`` and ``items`` around the batch's centre ``v``: NULL structs,
    structs of NULLs, NULL inner structs, NULL and empty maps and lists, absent keys."""
    out: dict[str, object] = {
        "ctx": _ctx(rng, ts=ts, v=v, prefix=prefix),
        "mp": rng.choice(
            (None, {}, {"a": v}, {"a": v, "b": _maybe(rng, v + 1)}, {"c": -v, "a": v % 7})
        ),
        "items": rng.choice(
            (
                None,
                [],
                [{"k": prefix, "v": v * 1000}],
                [None, {"k": None, "v": v}, {"k": prefix + "x", "v": None}],
            )
        ),
    }
    # An absent nested column is NULL, as an explicit null is.
    return {k: value for k, value in out.items() if value is not None or rng.random() < 0.5}


def _ctx(rng: random.Random, *, ts: datetime, v: int, prefix: str) -> object:
    shape = rng.random()
    if shape < 0.08:
        return None
    if shape < 0.12:
        return {"s": None, "n": None, "sub": None, "amt": None, "ok": None}
    sub: object
    if rng.random() < 0.1:
        sub = None
    elif rng.random() < 0.05:
        sub = {"d": None, "f": None, "t": None, "z": None}
    else:
        moment = ts + timedelta(minutes=rng.randint(-600, 600))
        sub = {
            "d": _maybe(rng, (ts.date() + timedelta(days=rng.randint(-2, 2))).isoformat()),
            "f": _maybe(rng, v / 7 + rng.random()),
            "t": _maybe(rng, moment.isoformat()),
            "z": _maybe(rng, moment.replace(tzinfo=UTC).isoformat()),
        }
    ctx = {
        "s": _maybe(rng, prefix + "".join(rng.choice("abcxyz") for _ in range(rng.randint(0, 3)))),
        "n": _maybe(rng, v + rng.randint(-5, 5)),
        "sub": sub,
        "amt": _maybe(rng, v / 4),
        "ok": _maybe(rng, v % 3 == 0),
    }
    # A field left out of the object is NULL too.
    return {k: value for k, value in ctx.items() if value is not None or rng.random() < 0.7}


def nested_edge_values(rng: random.Random) -> dict[str, object]:
    """Edge values of every leaf (extremes, signed zeros, subnormals, odd strings)."""
    return {
        "ctx": {
            "s": rng.choice(STRING_EDGES),
            "n": rng.choice(INT_EDGES),
            "sub": {
                "d": rng.choice(DATE_EDGES),
                "f": rng.choice(FLOAT_EDGES),
                "t": rng.choice(TIMESTAMP_EDGES),
                "z": rng.choice(TIMESTAMP_EDGES) + "+00:00",
            },
            "amt": rng.choice(DECIMAL_EDGES),
            "ok": rng.choice((True, False, None)),
        },
        "mp": {rng.choice(STRING_EDGES): rng.choice(INT_EDGES), "a": rng.choice(INT_EDGES)},
        "items": [{"k": rng.choice(STRING_EDGES), "v": rng.choice(BIGINT_EDGES)}, None],
    }


# -- predicates -------------------------------------------------------------------------------


@dataclass
class NestedPredicates:
    """Atoms over the nested columns. ``literal(column)`` draws a literal suited to a flat
    column; ``op()`` a comparison operator. ``leaf_atoms``/``other_atoms`` count what was drawn
    (struct-leaf atoms, and map, list or whole-struct atoms), for the caller to reset."""

    rng: random.Random
    literal: Callable[[str], str]
    op: Callable[[], str]
    leaf_atoms: int = 0
    other_atoms: int = 0

    def atom(self, alias: str) -> str:
        if self.rng.random() < 0.78:
            self.leaf_atoms += 1
            return self._leaf_atom(alias)
        self.other_atoms += 1
        return self._other_atom(alias)

    def leaf_ref(self, alias: str, leaf: StructLeaf) -> str:
        """The leaf in one of the spellings DuckDB accepts: dots, brackets, struct_extract,
        struct_extract_at, parentheses and mixtures; field names in any case."""
        rng = self.rng
        ref = f"{alias}.ctx" if alias else "ctx"
        if rng.random() < 0.15:
            ref = f"({ref})"
        for name, position in zip(leaf.path, leaf.positions, strict=True):
            if rng.random() < 0.1:
                name = name.upper()
            form = rng.randrange(8)
            if form < 3:
                ref = f"{ref}.{name}"
            elif form < 5:
                ref = f"{ref}['{name}']"
            elif form < 7:
                ref = f"struct_extract({ref}, '{name}')"
            else:
                ref = f"struct_extract_at({ref}, {position})"
        return ref

    def _leaf_atom(self, alias: str) -> str:
        rng = self.rng
        leaf = rng.choice(LEAVES)
        ref = self.leaf_ref(alias, leaf)
        like = leaf.literal_like
        if like == "flag":
            return rng.choice(
                (
                    f"{ref}",
                    f"NOT {ref}",
                    f"{ref} = {rng.choice(('true', 'false'))}",
                    f"{ref} IS {rng.choice(('', 'NOT '))}{rng.choice(('NULL', 'TRUE', 'FALSE'))}",
                    f"{ref} IN (true, {rng.choice(('false', 'NULL'))})",
                )
            )
        kind = rng.random()
        if kind < 0.12:
            return f"{ref} IS {rng.choice(('', 'NOT '))}NULL"
        if kind < 0.24:
            low, high = self.literal(like), self.literal(like)
            return f"{ref} {rng.choice(('', 'NOT '))}BETWEEN {low} AND {high}"
        if kind < 0.36:
            values = ", ".join(self.literal(like) for _ in range(rng.randint(1, 4)))
            return f"{ref} {rng.choice(('', '', 'NOT '))}IN ({values})"
        if kind < 0.48:
            # An OR of one leaf (spelled two ways), or of two leaves.
            other = leaf if rng.random() < 0.6 else rng.choice(LEAVES)
            if other.literal_like == "flag":
                other = leaf
            second = self.leaf_ref(alias, other)
            return (
                f"({ref} {self.op()} {self.literal(like)}"
                f" OR {second} {self.op()} {self.literal(other.literal_like)})"
            )
        if like == "s" and kind < 0.56:
            pattern = rng.choice("abcdefgh") + rng.choice(("%", "_%", "x%", "%z", ""))
            return f"{ref} {rng.choice(('', 'NOT '))}LIKE '{pattern}'"
        if like == "i" and kind < 0.62:
            return f"{ref} {self.op()} {rng.randint(-520, 520)}.0"
        if like == "i" and kind < 0.66:
            return f"CAST({ref} AS BIGINT) {self.op()} {self.literal('i')}"
        if like == "ts" and kind < 0.62:
            return f"CAST({ref} AS DATE) {self.op()} {self.literal('d')}"
        if like == "d" and kind < 0.62:
            return f"{ref} + 1 {self.op()} {self.literal('d')}"
        if kind < 0.7 and leaf.path[0] == "sub":
            # Another leaf of the same column, ANDed inside one predicate.
            other = rng.choice([leaf for leaf in LEAVES if leaf.literal_like != "flag"])
            return (
                f"({ref} {self.op()} {self.literal(like)}"
                f" AND {self.leaf_ref(alias, other)} {self.op()} {self.literal(other.literal_like)})"
            )
        literal = self.literal(like)
        if rng.random() < 0.5:
            return f"{ref} {self.op()} {literal}"
        return f"{literal} {self.op()} {ref}"

    def _other_atom(self, alias: str) -> str:
        rng = self.rng
        p = f"{alias}." if alias else ""
        key = rng.choice((*MAP_KEYS, "zz"))
        number = rng.randint(-520, 520)
        text = self.literal("s")
        return rng.choice(
            (
                # whole structs
                f"{p}ctx IS {rng.choice(('', 'NOT '))}NULL",
                f"{p}ctx.sub IS {rng.choice(('', 'NOT '))}NULL",
                f"{p}ctx['sub'] IS {rng.choice(('', 'NOT '))}NULL",
                f"struct_extract({p}ctx, 'sub') IS NOT NULL",
                f"{p}ctx.sub = {{'d': DATE '2026-10-31', 'f': 1.0, 't': NULL, 'z': NULL}}",
                # maps
                f"{p}mp['{key}'] {self.op()} {number}",
                f"{p}mp['{key}'] IS {rng.choice(('', 'NOT '))}NULL",
                f"{p}mp['{key}'] IN ({number}, {number + 1})",
                f"map_contains({p}mp, '{key}')",
                f"cardinality({p}mp) {self.op()} {rng.randint(0, 2)}",
                f"{p}mp IS {rng.choice(('', 'NOT '))}NULL",
                # lists of structs
                f"{p}items[1].k = {text}",
                f"{p}items[1]['v'] {self.op()} {number * 1000}",
                f"{p}items[2] IS {rng.choice(('', 'NOT '))}NULL",
                f"list_contains(list_transform({p}items, lambda e: e.k), {text})",
                f"len({p}items) {self.op()} {rng.randint(0, 3)}",
                f"{p}items IS {rng.choice(('', 'NOT '))}NULL",
                f"list_contains({p}items, {{'k': {text}, 'v': {number * 1000}}})",
            )
        )
