"""Arrow input's values checked at any depth of a nested type before DuckDB reads them, each
column's first bad value named by row and path (``tags[2]``, ``st.a``, ``m['k']``):

- text that is not UTF-8 (:func:`text_not_utf8`): a caller's Arrow memory need not be, DuckDB
  refuses it at the top level without naming it and stores it below, making the table's files
  unreadable;
- a time outside the day (:func:`time_out_of_range`): Arrow holds a time as any integer;
- a map key given twice in one map (:func:`repeated_map_key`): DuckDB refuses the batch without
  naming either.

Each walks struct fields, list elements and map keys and values in Arrow alone (the Lambda
layer ships no numpy).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from icefloe.errors import RowProblem
from icefloe.ingest.arrow_input import LIST_TYPES

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
    if isinstance(kind, LIST_TYPES):
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
    return _first_in_chunks(name, column, _first_bad_time)


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


REPEATED_MAP_KEY = "map key given more than once in its map"


def repeated_map_key(name: str, column: pa.ChunkedArray) -> RowProblem | None:
    """The first value of the column ``name`` holding a map that gives one key twice,
    wherever the map is in a nested type, by row and path as :func:`text_not_utf8` names them
    (the path ends at the key). None when there is none."""
    if not _holds_leaf(column.type, pa.types.is_map):
        return None
    return _first_in_chunks(name, column, _first_repeated_key)


def _first_in_chunks(
    name: str, column: pa.ChunkedArray, find: Callable[[pa.Array], _Found | None]
) -> RowProblem | None:
    """What ``find`` finds first in the column ``name``, chunk by chunk, by row and path."""
    start = 0
    for chunk in column.chunks:
        found = find(chunk)
        if found is not None:
            return RowProblem(row=start + found.index, field=name + found.path, message=found.why)
        start += len(chunk)
    return None


def _first_repeated_key(values: pa.Array) -> _Found | None:
    """The first value of ``values`` holding a map that gives one key twice; None when there
    is none (or the maps are in a type not looked through: DuckDB then refuses the batch)."""
    if isinstance(values, pa.ExtensionArray):
        return _first_repeated_key(values.storage)
    if not _holds_leaf(values.type, pa.types.is_map):
        return None
    below = _first_below(values, _first_repeated_key)
    if not isinstance(values, pa.MapArray):
        return below
    entries, parents = _elements(values)
    keys = entries.field(0)
    if isinstance(keys, pa.DictionaryArray):
        keys = keys.dictionary_decode()
    counts = (
        pa.table({"map": parents, "key": keys, "entry": pa.array(range(len(keys)), pa.int64())})
        .group_by(["map", "key"], use_threads=False)
        .aggregate([("entry", "min"), ("entry", "count")])
    )
    twice = counts.filter(pc.greater(counts["entry_count"], 1))
    if twice.num_rows == 0:
        return below
    first = pc.index(twice["map"], pc.min(twice["map"])).as_py()
    row = twice["map"][first].as_py()
    if below is not None and below.index < row:
        return below
    entry = twice["entry_min"][first].as_py()
    return _Found(row, f"['{_key_text(keys, entry)}']", REPEATED_MAP_KEY)
