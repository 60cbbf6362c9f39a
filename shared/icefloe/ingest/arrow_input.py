"""The fast path for typed Arrow input: prove a batch clean with Arrow compute, or step aside.

A caller's Arrow table whose columns already have the exact types the DuckDB conversion would
produce needs no conversion, only checks: nulls in NOT NULL columns, finite floats, dates and
timestamps in years 1 to 9999, value sizes, NUL in identity partition values. When every check
passes, the columns are used as they are (absent nullable columns become nulls). Anything else
(another type, an unknown column, a value that fails a check) returns None, and the DuckDB
conversion, which names the row and field at fault, decides. JSON columns are always checked
by that conversion (JSON text must be parsed), over their own columns only.

Also what any Arrow input goes through before the conversion reads it: two columns or struct
fields of one name (:func:`duplicate_names`), text that is not UTF-8 at any depth
(:func:`text_not_utf8`), parts of Arrow's null type given the declared type
(:func:`null_children_typed`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import date, datetime

import pyarrow as pa
import pyarrow.compute as pc

from icefloe.errors import RowProblem
from icefloe.ingest.sources import InsertLimits
from icefloe.ingest.strict_json import as_one_value, value_bytes
from icefloe.spec import Column, TableSpec
from icefloe.spec.type_tree import Leaf, ListOf, MapOf, Struct, TypeNode
from icefloe.spec.types import type_tree

# The Arrow type the DuckDB conversion gives each column type it can be skipped for.
ARROW_TYPES: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "UTINYINT": pa.uint8(),
    "USMALLINT": pa.uint16(),
    "UINTEGER": pa.uint32(),
    "UBIGINT": pa.uint64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us"),
}
_BOUNDS: dict[str, tuple[pa.Scalar, pa.Scalar]] = {
    "DATE": (pa.scalar(date(1, 1, 1)), pa.scalar(date(9999, 12, 31))),
    "TIMESTAMP": (
        pa.scalar(datetime(1, 1, 1), pa.timestamp("us")),
        pa.scalar(datetime(9999, 12, 31, 23, 59, 59, 999999), pa.timestamp("us")),
    ),
}


def json_columns_to_check(spec: TableSpec, table: pa.Table) -> list[Column]:
    """The JSON columns present in ``table``: the ones the fast path leaves to DuckDB."""
    return [c for c in spec.columns if c.type == "JSON" and c.name in table.column_names]


def proven_clean(
    spec: TableSpec,
    table: pa.Table,
    *,
    limits: InsertLimits,
    partition_sources: Collection[str],
) -> pa.Table | None:
    """The columns of ``spec``, in order, as the conversion would give them, if Arrow's checks
    prove the batch holds no bad value; None when the conversion must decide. JSON columns
    are passed as they are: their text is the caller's to check."""
    names = set(table.column_names)
    if not names <= set(spec.column_names):
        return None  # an unknown column: the conversion names it
    columns: dict[str, pa.ChunkedArray] = {}
    for col in spec.columns:
        target = ARROW_TYPES.get(col.type)
        if col.name not in names:
            if not col.nullable or target is None:
                return None
            columns[col.name] = pa.chunked_array([pa.nulls(table.num_rows, target)])
            continue
        values = table.column(col.name)
        if target is None or values.type != target:
            return None
        if col.type != "JSON" and not _holds(
            col, values, limits=limits, partition_source=col.name in partition_sources
        ):
            return None
        columns[col.name] = values
    return pa.table(columns)


def _holds(
    col: Column, values: pa.ChunkedArray, *, limits: InsertLimits, partition_source: bool
) -> bool:
    """Whether every value of a column of the right type passes the conversion's checks."""
    if not col.nullable and values.null_count > 0:
        return False
    if values.null_count == len(values):
        return True
    if col.type in ("FLOAT", "DOUBLE"):
        return bool(pc.all(pc.is_finite(values)).as_py())
    if col.type in _BOUNDS:
        low, high = _BOUNDS[col.type]
        extremes = pc.min_max(values)  # compared in Arrow: Python has no year 10000
        return bool(
            pc.greater_equal(extremes["min"], low).as_py()
            and pc.less_equal(extremes["max"], high).as_py()
        )
    if col.type == "VARCHAR":
        longest = pc.max(pc.binary_length(values)).as_py()
        if longest is not None and longest > limits.max_value_bytes:
            return False
        if partition_source and pc.any(pc.match_substring(values, "\x00")).as_py():
            return False
        if not utf8_valid(values):
            return False  # the conversion refuses it, naming the row
    return True


def utf8_valid(values: pa.ChunkedArray) -> bool:
    """Whether every value of a string column is UTF-8 (a caller's Arrow memory need not be:
    stored as it is, it would make the table's files unreadable). Each chunk's bytes are
    validated as one value, in a fraction of a millisecond a megabyte; only text that is not
    ASCII then needs each value validated (a character could be split between two values)."""
    for chunk in values.chunks:
        data = value_bytes(chunk)
        if data is None:
            return False
        whole = as_one_value(data).view(pa.large_string())
        try:
            whole.validate(full=True)
        except pa.ArrowInvalid:
            return False
        if pc.utf8_length(whole)[0].as_py() == data.size:
            continue  # ASCII: no character to split
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid:
            return False
    return True


def duplicate_names(table: pa.Table) -> list[RowProblem]:
    """A problem for each name that two columns of ``table``, or two fields of one of its
    structs (at any depth), share: which of them the name means cannot be told."""
    problems = _twice(table.column_names, "")
    pending: list[tuple[pa.DataType, str]] = [(f.type, f.name) for f in table.schema]
    while pending:  # (how deep a type nests is bounded before: see sources.arrow_batch)
        kind, path = pending.pop(0)
        if isinstance(kind, pa.BaseExtensionType):
            pending.append((kind.storage_type, path))
        elif isinstance(kind, pa.DictionaryType | pa.RunEndEncodedType):
            pending.append((kind.value_type, path))
        elif isinstance(kind, pa.StructType):
            names = [kind.field(i).name for i in range(kind.num_fields)]
            problems += _twice(names, path)
            pending += [(kind.field(i).type, f"{path}.{name}") for i, name in enumerate(names)]
        elif isinstance(kind, pa.MapType):
            pending += [(kind.key_type, f"{path}.key"), (kind.item_type, f"{path}[]")]
        elif isinstance(kind, _LIST_TYPES):
            pending.append((kind.value_type, f"{path}[]"))
    return problems


_LIST_TYPES = (
    pa.ListType,
    pa.LargeListType,
    pa.FixedSizeListType,
    pa.ListViewType,
    pa.LargeListViewType,
)


def _twice(names: list[str], parent: str) -> list[RowProblem]:
    """A problem for each of ``names`` given more than once (once each)."""
    seen: set[str] = set()
    twice: dict[str, None] = {}
    for name in names:
        if name in seen:
            twice[name] = None
        seen.add(name)
    return [
        RowProblem(
            row=None,
            field=f"{parent}.{name}" if parent else name,
            message="more than one "
            + ("field" if parent else "column")
            + " of this name (which one it means cannot be told)",
        )
        for name in twice
    ]


NOT_UTF8 = "bytes that are not UTF-8"
_NOT_UTF8_AT = re.compile(r"Invalid UTF8 sequence at string index (\d+)")


def text_not_utf8(name: str, column: pa.ChunkedArray) -> RowProblem | None:
    """The first value of the column ``name`` holding text that is not UTF-8 (a caller's Arrow
    memory need not be), wherever it is in a nested type: a struct field, a list element, a
    map key or value, a dictionary's value; by row and path (``tags[2]``, ``st.a``,
    ``m['k']``, ``m['k'].a``). None when there is none. Each chunk is checked whole by Arrow's
    full validation; only one that fails it is looked through. A chunk that fails it for
    another reason, or whose text lies in a type not looked through (a union, a run-end
    encoding, a list view), is refused as not valid Arrow data."""
    if not _holds_text(column.type):
        return None
    start = 0
    for chunk in column.chunks:
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid as e:
            try:
                found = _first_not_utf8(chunk)
            except _NotLookedThrough:
                found = None
            else:
                if found is None and _NOT_UTF8_AT.search(str(e)):
                    start += len(chunk)
                    continue  # only behind NULLs (a NULL struct's field, a NULL list's values)
            if found is None:
                return RowProblem(row=None, field=name, message=f"not valid Arrow data: {e}")
            return RowProblem(row=start + found.index, field=name + found.path, message=found.why)
        start += len(chunk)
    return None


class _NotLookedThrough(Exception):
    """Text in a type :func:`_first_not_utf8` does not look through, or an Arrow validation
    failure that is not about UTF-8."""


@dataclass(frozen=True, slots=True)
class _Found:
    index: int  # of the value in the array looked through
    path: str  # below that value: "" for the value itself
    why: str


def _is_text(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
    )


def _holds_text(kind: pa.DataType) -> bool:
    """Whether a value of an Arrow type may hold text, at any depth."""
    return _holds_leaf(kind, _is_text)


def _holds_leaf(kind: pa.DataType, leaf: Callable[[pa.DataType], bool]) -> bool:
    """Whether a value of an Arrow type may hold a value of a type ``leaf`` picks, at any
    depth."""
    if leaf(kind):
        return True
    if isinstance(kind, pa.BaseExtensionType):
        return _holds_leaf(kind.storage_type, leaf)
    if isinstance(kind, pa.DictionaryType | pa.RunEndEncodedType):
        return _holds_leaf(kind.value_type, leaf)
    if isinstance(kind, pa.MapType):
        return _holds_leaf(kind.key_type, leaf) or _holds_leaf(kind.item_type, leaf)
    if isinstance(kind, _LIST_TYPES):
        return _holds_leaf(kind.value_type, leaf)
    return any(_holds_leaf(kind.field(i).type, leaf) for i in range(kind.num_fields))


def _first_not_utf8(values: pa.Array) -> _Found | None:
    """The first value of ``values`` (a NULL one never) holding text that is not UTF-8, and
    where in it; None when there is none."""
    kind = values.type
    if isinstance(values, pa.ExtensionArray):
        return _first_not_utf8(values.storage)
    if not _holds_text(kind):
        return None
    if _is_text(kind):
        try:
            values.validate(full=True)  # (the bytes behind a NULL are not looked at)
        except pa.ArrowInvalid as e:
            at = _NOT_UTF8_AT.search(str(e))
            if at is None:
                raise _NotLookedThrough from e
            return _Found(int(at.group(1)), "", NOT_UTF8)
        return None
    if isinstance(values, pa.DictionaryArray):
        try:
            values.dictionary.validate(full=True)
        except pa.ArrowInvalid:
            return _first_not_utf8(values.dictionary_decode())  # (only the values used)
        return None
    if isinstance(values, _NESTED_ARRAYS):
        return _first_below(values, _first_not_utf8)
    raise _NotLookedThrough  # a union, a run-end encoding, a list view


_NESTED_ARRAYS = (pa.StructArray, pa.ListArray, pa.LargeListArray, pa.FixedSizeListArray)


def _first_below(values: pa.Array, find: Callable[[pa.Array], _Found | None]) -> _Found | None:
    """The first value of a struct, map or list array whose fields, keys, values or elements
    ``find`` finds something in, by its path below the value; None for any other array."""
    kind = values.type
    if isinstance(values, pa.StructArray):
        found: _Found | None = None
        for i, child in enumerate(values.flatten()):  # (a NULL struct's fields are NULL)
            hit = find(child)
            if hit is not None and (found is None or hit.index < found.index):
                found = _Found(hit.index, f".{kind.field(i).name}{hit.path}", hit.why)
        return found
    if isinstance(values, pa.MapArray):  # (before lists: a MapArray is a ListArray)
        entries, parents = _elements(values)
        keys, items = entries.flatten()
        key_hit, item_hit = find(keys), find(items)
        if key_hit is not None and (item_hit is None or key_hit.index <= item_hit.index):
            entry, below, why = key_hit.index, "", f"map key: {key_hit.why}"
        elif item_hit is not None:
            entry, below, why = item_hit.index, item_hit.path, item_hit.why
        else:
            return None
        return _Found(parents[entry].as_py(), f"['{_key_text(keys, entry)}']{below}", why)
    if isinstance(values, pa.ListArray | pa.LargeListArray | pa.FixedSizeListArray):
        elements, parents = _elements(values)
        hit = find(elements)
        if hit is None:
            return None
        row, position = _position_in_list(parents, hit.index)
        return _Found(row, f"[{position}]{hit.path}", hit.why)
    return None


def _elements(
    lists: pa.ListArray | pa.LargeListArray | pa.FixedSizeListArray | pa.MapArray,
) -> tuple[pa.Array, pa.Array]:
    """The elements of the lists that are not NULL, and the index of the list of each (in
    Arrow alone: the Lambda layer ships no numpy)."""
    if isinstance(lists, pa.FixedSizeListArray):
        size = lists.type.list_size
        start = lists.offset * size
        offsets = pa.array(range(start, start + (len(lists) + 1) * size, size), pa.int64())
    else:
        offsets = lists.offsets.cast(pa.int64())  # (the slice's own, into the whole values)
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    elements = lists.values.slice(first, last - first)
    # Each list's index, once per element it spans (NULL lists included, as the offsets do).
    spans = pa.LargeListArray.from_arrays(pc.subtract(offsets, first), pa.nulls(last - first))
    parents = pc.list_parent_indices(spans)
    if lists.null_count:
        kept = pc.take(lists.is_valid(), parents)
        elements, parents = elements.filter(kept), parents.filter(kept)
    return elements, parents


def _position_in_list(parents: pa.Array, element: int) -> tuple[int, int]:
    """The list an element (an index into the elements) belongs to, and its place there."""
    row = parents[element].as_py()
    return row, element - pc.index(parents, row).as_py()


def _key_text(keys: pa.Array, at: int) -> str:
    """A map key as a path shows it (bytes that are not UTF-8 escaped)."""
    if isinstance(keys, pa.DictionaryArray):
        keys = keys.dictionary_decode()
    key = keys[at]
    try:
        return str(key.as_py())
    except UnicodeDecodeError:
        raw: bytes = key.as_buffer().to_pybytes()
        return raw.decode("utf-8", "backslashreplace")


def null_children_typed(spec: TableSpec, table: pa.Table) -> pa.Table:
    """``table`` with each part of Arrow's null type (what pyarrow infers for a struct field,
    a list element or a map value that is None in every row) inside a column of the spec
    given the type the column declares there: all NULL either way, but DuckDB reads the null
    type as INTEGER, which a nested column's declared shape would refuse."""
    for i, name in enumerate(table.column_names):
        kind = table.schema.field(i).type
        if name not in spec.column_names or not _holds_null(kind):
            continue
        typed = _nulls_typed(kind, type_tree(spec.column(name).type))
        if not typed.equals(kind):
            table = table.set_column(
                i, table.schema.field(i).with_type(typed), table.column(i).cast(typed)
            )
    return table


def _holds_null(kind: pa.DataType) -> bool:
    if pa.types.is_null(kind):
        return True
    if isinstance(kind, pa.MapType):
        return _holds_null(kind.item_type)
    if isinstance(kind, pa.ListType | pa.LargeListType | pa.FixedSizeListType):
        return _holds_null(kind.value_type)
    if isinstance(kind, pa.StructType):
        return any(_holds_null(kind.field(i).type) for i in range(kind.num_fields))
    return False


def _nulls_typed(kind: pa.DataType, node: TypeNode) -> pa.DataType:
    """``kind`` with each null type in it that ``node`` declares a type for given that type."""
    if pa.types.is_null(kind):
        return _arrow_type(node)
    if isinstance(kind, pa.StructType) and isinstance(node, Struct):
        declared = dict(node.fields)
        fields = [kind.field(i) for i in range(kind.num_fields)]
        return pa.struct(
            [
                f.with_type(_nulls_typed(f.type, declared[f.name])) if f.name in declared else f
                for f in fields
            ]
        )
    if isinstance(kind, pa.MapType) and isinstance(node, MapOf):
        item = kind.item_field.with_type(_nulls_typed(kind.item_type, node.value))
        return pa.map_(kind.key_field, item, keys_sorted=kind.keys_sorted)
    if isinstance(kind, pa.ListType | pa.LargeListType | pa.FixedSizeListType) and isinstance(
        node, ListOf
    ):
        element = kind.value_field.with_type(_nulls_typed(kind.value_type, node.element))
        if isinstance(kind, pa.LargeListType):
            return pa.large_list(element)
        if isinstance(kind, pa.FixedSizeListType):
            return pa.list_(element, kind.list_size)
        return pa.list_(element)
    return kind


def _arrow_type(node: TypeNode) -> pa.DataType:
    """An Arrow type of the declared type's shape whose NULL the conversion reads as a NULL of
    it (a leaf the fast path has no type for: text, which every leaf type takes)."""
    if isinstance(node, Leaf):
        return ARROW_TYPES.get(node.name, pa.string())
    if isinstance(node, Struct):
        return pa.struct([(name, _arrow_type(child)) for name, child in node.fields])
    if isinstance(node, ListOf):
        return pa.list_(_arrow_type(node.element))
    return pa.map_(_arrow_type(node.key), _arrow_type(node.value))


# -- what DuckDB cannot read, and TIME values outside the day ----------------------------------


def unreadable_types(table: pa.Table) -> list[RowProblem]:
    """A problem for each column (or part of one, at any depth) of an Arrow type DuckDB
    cannot read: a half float, a 256-bit decimal, a dense union, a struct with no fields.
    DuckDB's scan fails on them with its own errors, before any row is looked at."""
    problems = []
    for name, kind in zip(table.column_names, table.schema.types, strict=True):
        found = _unreadable(kind)
        if found is not None:
            path, why = found
            problems.append(RowProblem(row=None, field=name + path, message=why))
    return problems


def _unreadable(data_type: pa.DataType) -> tuple[str, str] | None:
    """Where in ``data_type`` (a path below it) a type DuckDB cannot read is, and why."""
    pending: list[tuple[pa.DataType, str]] = [(data_type, "")]
    while pending:  # (how deep a type nests is bounded before: see sources.arrow_batch)
        kind, path = pending.pop(0)
        if pa.types.is_float16(kind):
            return path, "Arrow type float16 (a half float) is not supported: cast it to float32"
        if pa.types.is_decimal256(kind):
            return path, (
                f"Arrow type {kind} is not supported (decimals up to 38 digits are:"
                " cast it to decimal128)"
            )
        if isinstance(kind, pa.UnionType) and kind.mode == "dense":
            return path, "Arrow type dense_union is not supported"
        if isinstance(kind, pa.StructType) and kind.num_fields == 0:
            return path, "Arrow type struct<> (a struct with no fields) is not supported"
        if isinstance(kind, pa.BaseExtensionType):
            pending.append((kind.storage_type, path))
        elif isinstance(kind, pa.DictionaryType | pa.RunEndEncodedType):
            pending.append((kind.value_type, path))
        elif isinstance(kind, pa.StructType):
            pending += [(f.type, f"{path}.{f.name}") for f in kind]
        elif isinstance(kind, pa.MapType):
            pending += [(kind.key_type, f"{path}.key"), (kind.item_type, f"{path}[]")]
        elif isinstance(kind, _LIST_TYPES):
            pending.append((kind.value_type, f"{path}[]"))
        elif isinstance(kind, pa.UnionType):
            pending += [(f.type, f"{path}.{f.name}") for f in kind]
    return None


# Units of each Arrow time unit in a day: a TIME is from 00:00:00 up to, not including,
# 24:00:00 (Python's datetime.time cannot hold 24:00:00, so neither could the values,
# statistics and partition values read back).
_DAY: dict[str, int] = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400 * 10**9}
TIME_OUT_OF_RANGE = "a TIME must be from 00:00:00 up to (not including) 24:00:00"


def time_out_of_range(name: str, column: pa.ChunkedArray) -> RowProblem | None:
    """The first value of the column ``name`` holding a time (Arrow time32 or time64, any
    unit) outside ``[00:00:00, 24:00:00)``, wherever it is in a nested type (a struct field,
    a list element, a map key or value, a dictionary's value, a run-end encoded or sparse
    union's value), by row and path as :func:`text_not_utf8` names them. None when there is
    none. Arrow holds a time as any integer; DuckDB stores one past the day as garbage."""
    if not _holds_time(column.type):
        return None
    start = 0
    for chunk in column.chunks:
        found = _first_bad_time(chunk)
        if found is not None:
            return RowProblem(row=start + found.index, field=name + found.path, message=found.why)
        start += len(chunk)
    return None


def _holds_time(kind: pa.DataType) -> bool:
    """Whether a value of an Arrow type may hold a time, at any depth."""
    return _holds_leaf(kind, pa.types.is_time)


def _first_bad_time(values: pa.Array) -> _Found | None:
    """The first value of ``values`` (a NULL one never) holding a time outside the day, and
    where in it; None when there is none."""
    kind = values.type
    if isinstance(values, pa.ExtensionArray):
        return _first_bad_time(values.storage)
    if not _holds_time(kind):
        return None
    if pa.types.is_time(kind):
        return _first_time_outside_day(values)
    if isinstance(values, pa.DictionaryArray):
        if _first_bad_time(values.dictionary) is None:
            return None
        return _first_bad_time(values.dictionary_decode())  # (only the values used)
    if isinstance(values, pa.RunEndEncodedArray):
        return _first_bad_time(pc.run_end_decode(values))
    if isinstance(values, pa.ListViewArray | pa.LargeListViewArray):
        as_list = pa.list_ if isinstance(values, pa.ListViewArray) else pa.large_list
        return _first_bad_time(values.cast(as_list(kind.value_field)))
    if isinstance(values, pa.UnionArray):  # sparse: each child's values of its own rows
        found: _Found | None = None
        for i, field in enumerate(kind):
            rows = pc.indices_nonzero(pc.equal(values.type_codes, kind.type_codes[i]))
            hit = _first_bad_time(values.field(i).take(rows))
            if hit is not None and (found is None or rows[hit.index].as_py() < found.index):
                found = _Found(rows[hit.index].as_py(), f".{field.name}{hit.path}", hit.why)
        return found
    return _first_below(values, _first_bad_time)


def _first_time_outside_day(values: pa.Array) -> _Found | None:
    kind = values.type
    day = _DAY[kind.unit]
    ticks = values.view(pa.int32() if kind.bit_width == 32 else pa.int64())
    outside = pc.or_(pc.less(ticks, 0), pc.greater_equal(ticks, day))
    at = pc.index(outside, True).as_py()  # (a NULL's ticks give NULL: never found)
    if at < 0:
        return None
    return _Found(at, "", f"{TIME_OUT_OF_RANGE}; got {_ticks_text(ticks[at].as_py(), day)}")


def _ticks_text(ticks: int, day: int) -> str:
    """A time of ``ticks`` units (``day`` of them a day) as text, hours past 23 and all."""
    per_second = day // 86_400
    sign = "-" if ticks < 0 else ""
    seconds, fraction = divmod(abs(ticks), per_second)
    text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    if fraction:
        text += f".{fraction:0{len(str(per_second)) - 1}d}".rstrip("0")
    return text
