"""The shape of an Arrow input as the batch limits see it: its size decoded (a dictionary,
run-end or view column measured as the values it stands for, without decoding it) and how
deep its types nest, as JSON values and as Arrow's C data interface carries them."""

from __future__ import annotations

import math
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc

_TAKE_SLICE = 1 << 20  # dictionary indices measured this many at a time


def decoded_nbytes(data: pa.Table | pa.RecordBatch | pa.ChunkedArray | pa.Array) -> int:
    """About how many bytes ``data`` takes once decoded, as plain Arrow columns of the same
    values: what its conversion holds. A dictionary, run-end encoded or view column counts
    each row's value (one 4 MB dictionary value in 100 rows is 400 MB), not the encoded
    buffers that ``nbytes`` counts once; measured from the indices, runs and view lengths,
    without decoding. Other columns are their ``nbytes``."""
    if isinstance(data, pa.Table | pa.RecordBatch):
        return sum(decoded_nbytes(column) for column in data.columns)
    if isinstance(data, pa.ChunkedArray):
        if not _encoded(data.type):
            return int(data.nbytes)
        return sum(decoded_nbytes(chunk) for chunk in data.chunks)
    return _array_bytes(data)


def _encoded(data_type: pa.DataType) -> bool:
    """Whether a dictionary, run-end encoded or view type is in ``data_type`` (at any depth)."""
    stack = [data_type]
    while stack:
        kind = stack.pop()
        if isinstance(kind, pa.DictionaryType | pa.RunEndEncodedType) or _is_view(kind):
            return True
        if isinstance(kind, pa.BaseExtensionType):
            stack.append(kind.storage_type)
        elif isinstance(kind, pa.MapType):
            stack += [kind.key_type, kind.item_type]
        else:
            stack += [kind.field(i).type for i in range(kind.num_fields)]
    return False


def _is_view(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string_view(kind) or pa.types.is_binary_view(kind))


def _array_bytes(array: pa.Array) -> int:
    kind = array.type
    if not _encoded(kind):
        return int(array.nbytes)
    if isinstance(array, pa.ExtensionArray):
        return _array_bytes(array.storage)
    if isinstance(array, pa.DictionaryArray):
        sizes = _value_sizes(array.dictionary)
        if isinstance(sizes, float):
            return math.ceil(sizes * len(array))
        indices = array.indices
        total = 0
        for start in range(0, len(indices), _TAKE_SLICE):
            picked = pc.sum(pc.take(sizes, indices.slice(start, _TAKE_SLICE))).as_py()
            total += picked or 0
        return total
    if isinstance(array, pa.RunEndEncodedArray):
        lengths, values = _runs(array)
        sizes = _value_sizes(values)
        if isinstance(sizes, float):
            return math.ceil(sizes * len(array))
        return int(pc.sum(pc.multiply(sizes, lengths)).as_py() or 0)
    if _is_view(kind):
        lengths = _view_lengths(array)
        return int(pc.sum(lengths).as_py() or 0) + 4 * (len(array) + 1)
    if isinstance(array, pa.StructArray):
        return sum(_array_bytes(array.field(i)) for i in range(kind.num_fields))
    if isinstance(array, pa.ListArray | pa.LargeListArray | pa.FixedSizeListArray | pa.MapArray):
        width = 8 if isinstance(array, pa.LargeListArray) else 4
        return _array_bytes(array.flatten()) + width * (len(array) + 1)
    return int(array.nbytes)  # (a union, a list view: as they are)


def _value_sizes(values: pa.Array) -> pa.Array | float:
    """What each of ``values`` takes decoded: an int64 array, or one size for all."""
    if isinstance(values, pa.ExtensionArray):
        return _value_sizes(values.storage)
    kind = values.type
    if _is_view(kind):
        return pc.add(_view_lengths(values), 4)
    if pa.types.is_binary(kind) or pa.types.is_string(kind):
        return pc.add(pc.binary_length(values).cast(pa.int64()).fill_null(0), 4)
    if pa.types.is_large_binary(kind) or pa.types.is_large_string(kind):
        return pc.add(pc.binary_length(values).cast(pa.int64()).fill_null(0), 8)
    if isinstance(values, pa.DictionaryArray):
        inner = _value_sizes(values.dictionary)
        if isinstance(inner, float):
            return inner
        return pc.take(inner, values.indices).fill_null(0)
    if len(values) == 0:
        return 0.0
    if isinstance(values, pa.StructArray) and _encoded(kind):
        parts = [_value_sizes(values.field(i)) for i in range(kind.num_fields)]
        if all(isinstance(p, float) for p in parts):
            return float(sum(cast(float, p) for p in parts))
        total: pa.Array = pa.repeat(pa.scalar(0, pa.int64()), len(values))
        for part in parts:
            total = pc.add(total, part)
        return total
    # A fixed width, or (nested values: rare) each value taken for the average one.
    return _array_bytes(values) / len(values)


def _runs(array: pa.RunEndEncodedArray) -> tuple[pa.Array, pa.Array]:
    """The length of each run of a (sliced) run-end encoded array, and each run's value."""
    first, count = array.find_physical_offset(), array.find_physical_length()
    ends = array.run_ends.slice(first, count).cast(pa.int64())
    ends = pc.min_element_wise(pc.subtract(ends, array.offset), len(array))
    starts = pa.concat_arrays([pa.array([0], pa.int64()), ends.slice(0, max(count - 1, 0))])
    return pc.subtract(ends, starts), array.values.slice(first, count)


def _view_lengths(array: pa.Array) -> pa.Array:
    """The byte length of each value of a string or binary view array (0 for a null): the
    first 4 bytes of each 16-byte view."""
    views = array.buffers()[1]
    n = array.offset + len(array)
    words = pa.Array.from_buffers(pa.int32(), 4 * n, [None, views])
    rows = pa.FixedSizeListArray.from_arrays(words, 4).slice(array.offset, len(array))
    lengths = pc.list_element(rows, 0).cast(pa.int64())
    valid = pc.is_valid(array)
    return pc.if_else(valid, pc.max_element_wise(lengths, 0), 0)


# How deep a column's Arrow type can nest, in the levels of Arrow's C data interface (through
# which DuckDB reads it): pyarrow's import refuses a schema of 64 levels, the table's own
# included.
ARROW_MAX_LEVELS = 62


def exports_deeper_than(data_type: pa.DataType, limit: int) -> bool:
    """Whether an Arrow type has more than ``limit`` levels below it as Arrow's C data
    interface exports it: each child type a level (a map's entries and its key and value
    two), a dictionary's values one, an extension type none. Walked without recursion."""
    stack: list[tuple[pa.DataType, int]] = [(data_type, 0)]
    while stack:
        kind, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(kind, pa.BaseExtensionType):
            stack.append((kind.storage_type, depth))
        elif isinstance(kind, pa.DictionaryType):
            stack.append((kind.value_type, depth + 1))
        elif isinstance(kind, pa.RunEndEncodedType):
            stack += [(kind.run_end_type, depth + 1), (kind.value_type, depth + 1)]
        elif isinstance(kind, pa.MapType):
            stack += [(kind.key_type, depth + 2), (kind.item_type, depth + 2)]
        else:
            stack += [(kind.field(i).type, depth + 1) for i in range(kind.num_fields)]
    return False


def nests_deeper_than(data_type: pa.DataType, limit: int) -> bool:
    """Whether an Arrow type nests more than ``limit`` levels, a level being what a JSON value
    of it nests: a list, a struct, a map (a dictionary, union, run-end or extension type adds
    none). Walked without recursion, and without printing the type (which recurses)."""
    stack: list[tuple[pa.DataType, int]] = [(data_type, 0)]
    while stack:
        kind, depth = stack.pop()
        if isinstance(kind, pa.BaseExtensionType):
            stack.append((kind.storage_type, depth))
            continue
        if isinstance(kind, pa.DictionaryType):
            stack.append((kind.value_type, depth))
            continue
        if isinstance(kind, pa.RunEndEncodedType):
            stack.append((kind.value_type, depth))
            continue
        if isinstance(kind, pa.MapType):
            children = [kind.key_type, kind.item_type]
        else:
            children = [kind.field(i).type for i in range(kind.num_fields)]
        if not children:
            continue
        level = depth if isinstance(kind, pa.UnionType) else depth + 1
        if level > limit:
            return True
        stack.extend((child, level) for child in children)
    return False
