"""Nested columns (STRUCT, MAP, lists of anything) typed from JSON, strictly at every leaf.

A nested value is read as JSON (as every field is) and typed leaf by leaf with the checks a
top-level column of the leaf's type gets (:func:`~icefloe.ingest.columns.json_leaf_value`,
:func:`~icefloe.ingest.columns.value_checks`): ``"7"`` and ``3.7`` are no INTEGER, a number no
VARCHAR, text is bounded in size. A non-object where a struct or map is expected, a non-array
where a list is, a key a struct does not declare, a map key that is not of the key type (or
given twice) make the value bad. An absent key and JSON null are NULL at every level: a NULL
struct is not a struct of NULLs, a NULL list is not ``[]``.

The clean path is cheap: each column's JSON is parsed once into a tree of JSON leaves
(``json_transform`` with the type's shape), once more for the JSON types of its inner nodes
(``json_type`` over all their paths at once; wildcard paths under lists and maps) and once for
the keys of its structs (``json_keys``). The conversion's scan computes only one code per
column, ``nested``, from those. The paths at fault are named by :mod:`nested_diagnosis`, run
only over the failing rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from icefloe.duck import ident
from icefloe.ingest.columns import (
    ColumnSQL,
    json_leaf_value,
    json_member,
    present_ident,
    value_checks,
)
from icefloe.ingest.nested_diagnosis import FEW_KEYS, diagnosis_sql
from icefloe.spec import Column
from icefloe.spec.type_tree import Leaf, ListOf, MapOf, Struct, TypeNode, is_nested_text
from icefloe.spec.types import is_integer, is_list, type_tree

# An exact decimal integer, as a JSON object's key must spell an integer map key.
INTEGER_KEY = "-?(0|[1-9][0-9]*)"


def is_nested_column(column: Column) -> bool:
    """Whether the column is converted here: it holds a STRUCT or MAP anywhere in its type, or
    it is a list (a list of leaves too: each element is typed and checked as a column of its
    type is, and a bad one is named by its path, ``tags[2]``)."""
    return is_nested_text(column.type) or is_list(column.type)


def nested_json_column(
    col: Column, *, max_value_bytes: int, unknown_kept: bool = False, marker: str | None = None
) -> ColumnSQL:
    """SQL over the JSON-typed raw column named like ``col``, whose type is nested. A key a
    struct does not declare refuses the batch, unless ``unknown_kept`` (the table keeps unknown
    fields) and the struct is met once per row: its unknown keys are then the overflow
    column's (:func:`kept_unknown_entries`). Under a list or a map they are refused still.
    ``marker``: see :func:`~icefloe.ingest.columns.json_leaf_value`."""
    tree = type_tree(col.type)
    r = ident(col.name)
    parsed, types, keys = (_alias(col.name, tag) for tag in ("parsed", "types", "keys"))
    walk = _Walk()
    walk.nodes(tree, "$", repeated=False)
    # The root is an inner node: walk.types starts with it.
    parsing = [
        (parsed, f"json_transform({r}, '{_shape(tree)}')"),
        (types, f"json_type({r}, [{', '.join(_lit(p) for p, _ in walk.types)}])"),
    ]
    if walk.keys:
        parsing.append((keys, f"json_keys({r}, [{', '.join(_lit(p) for p, _ in walk.keys)}])"))
    shape_bad = [
        f"coalesce(list_extract({types}, {n}) NOT IN {_allowed(node)}, false)"
        for n, (_, node) in enumerate(walk.types, start=1)
    ]
    shape_bad += [
        f"coalesce({_keys_bad(node, f'list_extract({keys}, {n})', kept=unknown_kept)}, false)"
        for n, (_, node) in enumerate(walk.keys, start=1)
    ]
    for n, (path, node) in enumerate(walk.repeated, start=1):
        node_types = _alias(col.name, f"types{n}")
        parsing.append((node_types, f"json_type({r}, {_lit(path)})"))
        shape_bad.append(
            f"coalesce(list_bool_or(list_transform({node_types},"
            f" lambda t: t NOT IN {_allowed(node)})), false)"
        )
        if isinstance(node, Struct):
            node_keys = _alias(col.name, f"keys{n}")
            parsing.append((node_keys, f"json_keys({r}, {_lit(path)})"))
            shape_bad.append(
                f"coalesce(list_bool_or(list_transform({node_keys},"
                f" lambda k: {_keys_bad(node, 'k', kept=False)})), false)"
            )
    nodes = _OncePerRow(col.name, tree, parsed, _Typed(max_value_bytes, marker))
    missing = "NULL" if col.nullable else "'missing'"
    error = (
        f"CASE WHEN NOT {present_ident(col.name)} THEN {missing}"
        f" WHEN {' OR '.join([*shape_bad, nodes.bad()])} THEN 'nested' END"
    )
    return ColumnSQL(
        column=col,
        value=nodes.value(),
        present=f"coalesce(list_extract({types}, 1) <> 'NULL', false)",
        error=error,
        layers=(tuple(parsing), tuple(nodes.parsed_layer), tuple(nodes.typed_layer)),
        diagnosis=diagnosis_sql(
            tree,
            r,
            col.name,
            max_value_bytes=max_value_bytes,
            unknown_kept=unknown_kept,
            marker=marker,
        ),
    )


def _alias(name: str, tag: str) -> str:
    return f'"__{tag}_' + ident(name)[1:]


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _known(node: Struct) -> str:
    return "[" + ", ".join(_lit(name) for name, _ in node.fields) + "]"


def _keys_bad(node: Struct, keys: str, *, kept: bool) -> str:
    """SQL true when an object's ``keys`` hold one twice, or (unless unknown keys are
    ``kept``) one the struct does not declare."""
    # Lambdas over the keys with IN lists: a third of list_has_all's and list_distinct's cost,
    # for the few keys of most objects. Past FEW_KEYS, their work (and the copies of the keys
    # each is given) grow with the square of the keys' number: the distinct ones are counted.
    if kept:
        return _repeats(keys)
    few = f"list_bool_or(list_transform({keys}, lambda x, xi: x NOT IN ({_names(node)}) OR list_position({keys}, x) <> xi))"
    many = f"(list_bool_or(list_transform({keys}, lambda x: x NOT IN ({_names(node)}))) OR list_unique({keys}) <> len({keys}))"
    return f"CASE WHEN len({keys}) <= {FEW_KEYS} THEN {few} ELSE {many} END"


def _repeats(keys: str) -> str:
    """SQL true when the object keys ``keys`` (a list without NULLs) hold one twice; NULL
    when ``keys`` is NULL. Linear in the keys past :data:`FEW_KEYS` of them."""
    return (
        f"CASE WHEN len({keys}) <= {FEW_KEYS}"
        f" THEN list_bool_or(list_transform({keys}, lambda x, xi: list_position({keys}, x) <> xi))"
        f" ELSE list_unique({keys}) <> len({keys}) END"
    )


def _names(node: Struct) -> str:
    return ", ".join(_lit(name) for name, _ in node.fields)


def _allowed(node: TypeNode) -> str:
    return "('ARRAY', 'NULL')" if isinstance(node, ListOf) else "('OBJECT', 'NULL')"


@dataclass
class _Walk:
    """The inner nodes of a type by JSON path: ``types`` and ``keys`` (structs) of the nodes
    met once per row, each looked up in one call; ``repeated``, the nodes under a list or a
    map, each looked up by a wildcard path."""

    def __post_init__(self) -> None:
        self.types: list[tuple[str, TypeNode]] = []
        self.keys: list[tuple[str, Struct]] = []
        self.repeated: list[tuple[str, TypeNode]] = []

    def nodes(self, node: TypeNode, path: str, *, repeated: bool) -> None:
        if isinstance(node, Leaf):
            return
        if repeated:
            self.repeated.append((path, node))
        else:
            self.types.append((path, node))
            if isinstance(node, Struct):
                self.keys.append((path, node))
        if isinstance(node, Struct):
            for name, child in node.fields:
                self.nodes(child, f'{path}."{name}"', repeated=repeated)
        elif isinstance(node, ListOf):
            self.nodes(node.element, f"{path}[*]", repeated=True)
        else:
            self.nodes(node.value, f"{path}.*", repeated=True)


def _shape(node: TypeNode) -> str:
    """The ``json_transform`` shape that parses a value into JSON leaves (a map stays JSON:
    its keys are checked before it is parsed, as duplicates fail the parse)."""
    if isinstance(node, Struct):
        return "{" + ", ".join(f'"{name}": {_shape(child)}' for name, child in node.fields) + "}"
    if isinstance(node, ListOf):
        return f"[{_shape(node.element)}]"
    return '"JSON"'


def map_shape(node: MapOf) -> str:
    """The ``json_transform`` shape of a map whose keys are checked: its values' JSON trees."""
    value_type = _shape_type(node.value).replace('"', '\\"')  # quoted names, in a JSON string
    return f'"MAP(VARCHAR, {value_type})"'


def _shape_type(node: TypeNode) -> str:
    if isinstance(node, Struct):
        return "STRUCT(" + ", ".join(f'"{n}" {_shape_type(c)}' for n, c in node.fields) + ")"
    if isinstance(node, ListOf):
        return f"{_shape_type(node.element)}[]"
    return "JSON"


def map_keys_fit(node: MapOf, keys: str, *, var: str) -> str:
    """SQL true when the JSON object keys ``keys`` are all distinct and spell keys of the map's
    key type (an integer exactly: no sign but ``-``, no leading zero, in range)."""
    distinct = f"NOT coalesce({_repeats(keys)}, false)"
    key_type = node.key.name if isinstance(node.key, Leaf) else ""
    if not is_integer(key_type):
        return distinct
    fits = (
        f"regexp_full_match({var}, '{INTEGER_KEY}') AND TRY_CAST({var} AS {key_type}) IS NOT NULL"
    )
    return f"({distinct} AND coalesce(list_bool_and(list_transform({keys}, lambda {var}: {fits})), true))"


class _Typed:
    """The typed value of a parsed tree, and whether any leaf of it is bad."""

    def __init__(self, max_value_bytes: int, marker: str | None) -> None:
        self._max_value_bytes = max_value_bytes
        self._marker = marker

    def value(self, node: TypeNode, p: str, *, depth: int) -> str:
        if isinstance(node, Leaf):
            return json_leaf_value(p, node.name, marker=self._marker)
        if isinstance(node, Struct):
            fields = ", ".join(
                f"{ident(name)} := {self.value(child, f'struct_extract({p}, {_lit(name)})', depth=depth)}"
                for name, child in node.fields
            )
            return f"CASE WHEN {p} IS NOT NULL THEN struct_pack({fields}) END"
        e = f"e{depth}"
        if isinstance(node, ListOf):
            return (
                f"list_transform({p}, lambda {e}: {self.value(node.element, e, depth=depth + 1)})"
            )
        key_type = node.key.name if isinstance(node.key, Leaf) else "VARCHAR"
        key = f"{e}.key" if key_type == "VARCHAR" else f"CAST({e}.key AS {key_type})"
        entries = (
            f"list_transform(map_entries(json_transform({p}, '{map_shape(node)}')), lambda {e}:"
            f" struct_pack(key := {key}, value := {self.value(node.value, f'{e}.value', depth=depth + 1)}))"
        )
        fit = map_keys_fit(node, f"json_keys({p})", var=f"k{depth}")
        return f"CASE WHEN json_type({p}) = 'OBJECT' AND {fit} THEN map_from_entries({entries}) END"

    def bad(self, node: TypeNode, p: str, v: str, *, depth: int) -> str:
        """SQL true when a leaf of the parsed tree ``p`` is present but its typed value in ``v``
        is NULL or fails a check, or a map's keys do not fit (the shapes are checked apart)."""
        if isinstance(node, Leaf):
            checks = value_checks(node.name, v, max_value_bytes=self._max_value_bytes)
            failing = " OR ".join([f"{v} IS NULL", *(condition for condition, _ in checks)])
            return f"({p} IS NOT NULL AND ({failing}))"
        if isinstance(node, Struct):
            return (
                "("
                + " OR ".join(
                    self.bad(
                        child,
                        f"struct_extract({p}, {_lit(name)})",
                        f"struct_extract({v}, {_lit(name)})",
                        depth=depth,
                    )
                    for name, child in node.fields
                )
                + ")"
            )
        e, i = f"e{depth}", f"i{depth}"
        if isinstance(node, ListOf):
            inner = self.bad(node.element, e, f"list_extract({v}, {i})", depth=depth + 1)
            return f"coalesce(list_bool_or(list_transform({p}, lambda {e}, {i}: {inner})), false)"
        inner = self.bad(node.value, e, f"list_extract(map_values({v}), {i})", depth=depth + 1)
        values = f"map_values(json_transform({p}, '{map_shape(node)}'))"
        fit = map_keys_fit(node, f"json_keys({p})", var=f"k{depth}")
        return (
            f"CASE WHEN coalesce(json_type({p}) <> 'OBJECT', true) THEN false"
            f" WHEN NOT {fit} THEN true"
            f" ELSE coalesce(list_bool_or(list_transform({values}, lambda {e}, {i}: {inner})), false) END"
        )


class _OncePerRow:
    """The nodes of a nested column met once per row (the root, and what structs hold), each
    a column of its own: ``parsed_layer`` takes each out of the parsed tree once, and
    ``typed_layer`` types each that is not a struct (a leaf, or a list or map, typed with
    its elements). Each node is taken out by its whole ``struct_extract`` chain from the
    parsed root (an alias of the same layer cannot be read there), once. :meth:`value` packs
    the typed ones into the column's structs, and :meth:`bad` tests each by name: a wide
    struct's value and checks then repeat no chain, which DuckDB would bind and deduplicate
    once per use."""

    def __init__(self, name: str, tree: TypeNode, parsed: str, typed: _Typed) -> None:
        self._name = name
        self._tree = tree
        self._typed = typed
        self._parsed: dict[tuple[str, ...], str] = {(): parsed}
        self._values: dict[tuple[str, ...], str] = {}
        self.parsed_layer: list[tuple[str, str]] = []
        self.typed_layer: list[tuple[str, str]] = []
        self._add(tree, (), parsed)

    def _add(self, node: TypeNode, path: tuple[str, ...], expression: str) -> None:
        """``node`` at ``path``, taken out of the parsed tree by ``expression``."""
        if path:
            alias = _alias(self._name, f"p{len(self.parsed_layer)}")
            self.parsed_layer.append((alias, expression))
            self._parsed[path] = alias
        if isinstance(node, Struct):
            for field, child in node.fields:
                child_expression = f"struct_extract({expression}, {_lit(field)})"
                self._add(child, (*path, field), child_expression)
            return
        alias = _alias(self._name, f"v{len(self.typed_layer)}")
        self.typed_layer.append((alias, self._typed.value(node, self._parsed[path], depth=0)))
        self._values[path] = alias

    def value(self) -> str:
        """The column's typed value, over the layers' columns."""
        return self._value(self._tree, ())

    def _value(self, node: TypeNode, path: tuple[str, ...]) -> str:
        if not isinstance(node, Struct):
            return self._values[path]
        fields = ", ".join(
            f"{ident(name)} := {self._value(child, (*path, name))}" for name, child in node.fields
        )
        return f"CASE WHEN {self._parsed[path]} IS NOT NULL THEN struct_pack({fields}) END"

    def bad(self) -> str:
        """SQL true when a part of the value met once per row is present but typed to NULL
        or fails a check (see :meth:`_Typed.bad`)."""
        return "(" + " OR ".join(self._bad(self._tree, ())) + ")"

    def _bad(self, node: TypeNode, path: tuple[str, ...]) -> Iterator[str]:
        if not isinstance(node, Struct):
            yield self._typed.bad(node, self._parsed[path], self._values[path], depth=0)
            return
        for name, child in node.fields:
            yield from self._bad(child, (*path, name))


@dataclass(frozen=True, slots=True)
class KeptUnknownSQL:
    """For a table keeping unknown fields, the SQL of one nested column's overflow entry, in
    two steps: ``keys`` (the keys of the column's structs met once per row, one ``json_keys``
    call, selected in a subquery) and ``entry``, reading that subquery's column by name: a list
    of at most one ``(key, value)``, the column's name and an object holding, at their paths,
    the keys those structs do not declare (``{"campaign": {"term": ...}}``); empty when there
    are none. Each struct's keys are read from the one list rather than by a call of their
    own: the expression is bound once per batch, and its size, not the rows, set the cost of
    a small batch of a wide struct."""

    keys: str
    entry: str


def kept_unknown_entries(col: Column, record: str, keys: str) -> KeptUnknownSQL | None:
    """:class:`KeptUnknownSQL` of the nested column ``col`` in the JSON record ``record``,
    with ``keys`` the name its keys' column gets; None when the column has no struct met once
    per row."""
    tree = type_tree(col.type)
    if not isinstance(tree, Struct):
        return None
    structs = list(_once_per_row_structs(tree, (col.name,)))
    at = {names: f"list_extract({keys}, {n})" for n, (names, _) in enumerate(structs, start=1)}
    # Most rows have no unknown key: one test finds those that do; only they build objects.
    any_unknown = " OR ".join(
        f"coalesce(list_bool_or(list_transform({at[names]},"
        f" lambda x: x NOT IN ({_names(node)}))), false)"
        for names, node in structs
    )
    entry = _entry(col.name, _kept_object(tree, (col.name,), record, at))
    return KeptUnknownSQL(
        keys=f"json_keys({record}, [{', '.join(_lit(_json_path(names)) for names, _ in structs)}])",
        entry=f"CASE WHEN {any_unknown} THEN {entry} ELSE [] END",
    )


def _once_per_row_structs(
    node: Struct, names: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], Struct]]:
    """The struct ``node`` at the field path ``names`` and the structs inside it through
    structs only."""
    yield names, node
    for name, child in node.fields:
        if isinstance(child, Struct):
            yield from _once_per_row_structs(child, (*names, name))


def _json_path(names: tuple[str, ...]) -> str:
    return "$" + "".join(f'."{name}"' for name in names)


def _entry(key: str, value: str) -> str:
    """SQL of ``[(key, value)]``, or ``[]`` when ``value`` is NULL (``value`` written once:
    the objects nest, and each level naming its child's twice would double the work)."""
    return (
        f"list_filter([struct_pack(key := {_lit(key)}, value := {value})],"
        " lambda x: x.value IS NOT NULL)"
    )


def _kept_object(
    node: Struct, names: tuple[str, ...], record: str, keys_at: dict[tuple[str, ...], str]
) -> str:
    """SQL of the JSON object of the unknown keys at the field path ``names`` and below
    (through structs only), NULL when there are none; ``keys_at``: each struct's keys, as
    SQL."""
    k = "k"
    # Each key once: one given twice is the conversion's to refuse, naming it.
    unknown = (
        f"list_filter(list_distinct(coalesce({keys_at[names]}, [])),"
        f" lambda {k}: NOT list_contains({_known(node)}, {k}))"
    )
    own = (
        f"list_transform({unknown}, lambda {k}: struct_pack(key := {k},"
        f" value := {json_member(record, k, under=names)}))"
    )
    inner = [
        _entry(name, _kept_object(child, (*names, name), record, keys_at))
        for name, child in node.fields
        if isinstance(child, Struct)
    ]
    entries = "flatten([" + ", ".join([own, *inner]) + "])" if inner else own
    return f"nullif(to_json(map_from_entries({entries})), '{{}}')"
