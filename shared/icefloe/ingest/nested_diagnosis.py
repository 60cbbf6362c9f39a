"""What is wrong in a nested JSON value, path by path: run only over the rows the conversion
found bad (:mod:`~icefloe.ingest.nested_json`), so it may parse each level again.

The SQL gives a list of ``(path, kind, type)``: the path as messages show it
(``context.page.url``, ``tags[2].v`` with 0-based indices, ``m['a']``), the error kind (the
conversion's codes, plus ``unknown`` for a key a struct does not declare, ``key`` for a map key
that is not of the key type, ``duplicate`` for a map key given twice), and the type expected
there.
"""

from __future__ import annotations

from icefloe.ingest.columns import (
    json_leaf_value,
    json_offset_out_of_range,
    value_checks,
)
from icefloe.spec.type_tree import Leaf, ListOf, MapOf, Struct, TypeNode, format_type

_PROBLEM = "STRUCT(path VARCHAR, kind VARCHAR, type VARCHAR)"
_NONE = f"CAST([] AS {_PROBLEM}[])"
_INTEGER_KEY = "-?(0|[1-9][0-9]*)"
# Up to this many keys, an object's repeated ones are found by a lambda over them.
FEW_KEYS = 64


def diagnosis_sql(
    node: TypeNode,
    r: str,
    name: str,
    *,
    max_value_bytes: int,
    unknown_kept: bool = False,
    marker: str | None = None,
) -> str:
    """SQL of the problems of the JSON expression ``r`` as a value of type ``node``, for the
    column ``name``. ``unknown_kept``: the table keeps unknown fields, and those of structs met
    once per row are kept, not problems; those under a list or a map are (kind ``unkept``).
    ``marker``: see :func:`~icefloe.ingest.columns.json_leaf_value`."""
    return _Diagnosis(max_value_bytes, unknown_kept, marker).of(node, r, _lit(name), depth=0)


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _one(path: str, kind: str, type_text: str) -> str:
    return f"[struct_pack(path := {path}, kind := '{kind}', type := {_lit(type_text)})]"


def _absent(r: str) -> str:
    return f"({r} IS NULL OR json_type({r}) = 'NULL')"


def _twice(keys: str, path: str, k: str, *, map_key: bool = False) -> str:
    """SQL of a ``duplicate`` problem for each key given twice in an object's ``keys``."""
    spot = f"{path} || '[''' || {k} || ''']'" if map_key else f"{path} || '.' || {k}"
    few = (
        f"list_filter(list_distinct({keys}),"
        f" lambda {k}: len(list_filter({keys}, lambda q: q = {k})) > 1)"
    )
    # Past a few keys, the lambda's look-ups (and the copies of the keys it is given) grow with
    # the square of their number: the keys are sorted, and each equal to the next is repeated.
    s = f"list_sort({keys})"
    many = (
        f"list_sort(list_distinct(list_transform(list_filter(list_zip({s}, {s}[2:]),"
        f" lambda p: p[1] = p[2]), lambda p: p[1])))"
    )
    given_twice = f"CASE WHEN len({keys}) <= {FEW_KEYS} THEN {few} ELSE {many} END"
    return (
        f"list_transform({given_twice}, lambda {k}:"
        f" struct_pack(path := {spot}, kind := 'duplicate', type := ''))"
    )


class _Diagnosis:
    def __init__(self, max_value_bytes: int, unknown_kept: bool, marker: str | None) -> None:
        self._max_value_bytes = max_value_bytes
        self._unknown_kept = unknown_kept
        self._marker = marker

    def of(self, node: TypeNode, r: str, path: str, *, depth: int, repeated: bool = False) -> str:
        if isinstance(node, Leaf):
            return self._leaf(node.name, r, path)
        type_text = format_type(node)
        expected = "ARRAY" if isinstance(node, ListOf) else "OBJECT"
        head = (
            f"CASE WHEN {_absent(r)} THEN {_NONE}"
            f" WHEN json_type({r}) <> '{expected}' THEN {_one(path, 'type', type_text)}"
        )
        if isinstance(node, Struct):
            k = f"k{depth}"
            known = "[" + ", ".join(_lit(n) for n, _ in node.fields) + "]"
            unknown_kind = "unkept" if self._unknown_kept else "unknown"
            unknown = (
                f"list_transform(list_filter(json_keys({r}), lambda {k}: NOT list_contains({known}, {k})),"
                f" lambda {k}: struct_pack(path := {path} || '.' || {k}, kind := '{unknown_kind}', type := ''))"
            )
            if self._unknown_kept and not repeated:
                unknown = _NONE  # kept in the overflow column
            twice = _twice(f"json_keys({r})", path, k)
            fields = [
                self.of(
                    child,
                    f"json_extract({r}, {_lit(f'$.{chr(34)}{field}{chr(34)}')})",
                    f"{path} || {_lit('.' + field)}",
                    depth=depth,
                    repeated=repeated,
                )
                for field, child in node.fields
            ]
            return f"{head} ELSE flatten([{twice}, {unknown}, {', '.join(fields)}]) END"
        e, i = f"e{depth}", f"i{depth}"
        if isinstance(node, ListOf):
            element_path = f"{path} || '[' || CAST({i} - 1 AS VARCHAR) || ']'"
            inner = self.of(node.element, e, element_path, depth=depth + 1, repeated=True)
            return (
                f"{head} ELSE flatten(list_transform(CAST({r} AS JSON[]), lambda {e}, {i}: {inner}))"
                " END"
            )
        return f"{head} ELSE {self._map(node, r, path, depth=depth)} END"

    def _map(self, node: MapOf, r: str, path: str, *, depth: int) -> str:
        keys = f"json_keys({r})"
        twice = _twice(keys, path, f"k{depth}", map_key=True)
        # Each entry as a (key, value) pair, the values all taken in one parse: a look-up per
        # key would parse the object once per key.
        z = f"z{depth}"
        k, value = f"{z}[1]", f"{z}[2]"
        entry_path = f"{path} || '[''' || {k} || ''']'"
        key_type = node.key.name if isinstance(node.key, Leaf) else "VARCHAR"
        key_bad = _NONE
        if key_type != "VARCHAR":
            fits = f"regexp_full_match({k}, '{_INTEGER_KEY}') AND TRY_CAST({k} AS {key_type}) IS NOT NULL"
            key_bad = (
                f"CASE WHEN NOT ({fits}) THEN {_one(entry_path, 'key', key_type)} ELSE {_NONE} END"
            )
        inner = self.of(node.value, value, entry_path, depth=depth + 1, repeated=True)
        pairs = f"list_zip({keys}, json_extract({r}, '$.*'))"
        entries = f"flatten(list_transform({pairs}, lambda {z}: flatten([{key_bad}, {inner}])))"
        return f"flatten([{twice}, {entries}])"

    def _leaf(self, kind: str, r: str, path: str) -> str:
        v = json_leaf_value(r, kind, marker=self._marker)
        branches = [f"WHEN {_absent(r)} THEN {_NONE}"]
        offset = json_offset_out_of_range(r, kind)
        if offset is not None:
            branches.append(f"WHEN {offset} THEN {_one(path, 'offset', kind)}")
        branches.append(f"WHEN ({v}) IS NULL THEN {_one(path, 'type', kind)}")
        branches += [
            f"WHEN {condition} THEN {_one(path, code, kind)}"
            for condition, code in value_checks(
                kind, f"({v})", max_value_bytes=self._max_value_bytes
            )
        ]
        return f"CASE {' '.join(branches)} ELSE {_NONE} END"
