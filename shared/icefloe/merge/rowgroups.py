"""Value-aligned row groups: cut sorted rows so that each row-group key value sits in one group.

Rows arrive sorted by the row-group key. Consecutive key values are packed into one row group
up to a target row count; a value is never split across row groups unless its own rows pass
the row-group cap (then it fills cap-sized groups of its own). With min/max statistics per row
group, a point query on the key then reads one row group per file. Without a row-group key,
groups are cut by size only.

:func:`pack_runs` is the pure rule; :class:`RowGroupCutter` applies it to a stream of batches,
holding back only the rows whose group is not decided yet.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from icefloe.datafiles import key_values
from icefloe.errors import InvalidArgumentError


def pack_runs(run_lengths: Sequence[int], *, target_rows: int, max_rows: int) -> list[int]:
    """Row-group sizes for runs of equal key values, in order.

    A run joins the open group if the group stays within ``target_rows``; otherwise the group
    closes and the run opens the next one. A run longer than ``max_rows`` is cut into
    ``max_rows``-sized groups (its remainder opens a group like any run).
    """
    if target_rows < 1 or max_rows < target_rows:
        raise InvalidArgumentError(
            f"need 1 <= target_rows <= max_rows, got {target_rows}, {max_rows}"
        )
    groups: list[int] = []
    open_rows = 0
    for length in run_lengths:
        if length <= 0:
            raise InvalidArgumentError(f"run lengths must be positive, got {length}")
        if open_rows and open_rows + length > target_rows:
            groups.append(open_rows)
            open_rows = 0
        while length > max_rows:
            if open_rows:
                groups.append(open_rows)
                open_rows = 0
            groups.append(max_rows)
            length -= max_rows
        open_rows += length
    if open_rows:
        groups.append(open_rows)
    return groups


def run_lengths(column: pa.Array | pa.ChunkedArray) -> list[int]:
    """Lengths of the runs of equal values in ``column`` (nulls equal each other)."""
    n = len(column)
    if n == 0:
        return []
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(array.type):  # compare values, not the dictionary's indices
        array = array.dictionary_decode()
    # Dictionary indices are equal exactly when the values are (nulls get an index too).
    indices = pc.dictionary_encode(array, null_encoding="encode").indices
    changed = pc.not_equal(indices.slice(1), indices.slice(0, n - 1))
    starts = [0, *(i + 1 for i in pc.indices_nonzero(changed).to_pylist()), n]
    return [b - a for a, b in itertools.pairwise(starts)]


class RowGroupCutter:
    """Turns sorted record batches into row-group tables (see the module docstring).

    Each run of equal keys is looked at once, when it completes: the cutter keeps the rows of
    the open group (complete runs, held back in case the next run joins them) and of the last
    run (which the next batch may continue), and applies :func:`pack_runs`' rule run by run.
    """

    def __init__(self, *, key: str | None, target_rows: int, max_rows: int) -> None:
        if target_rows < 1 or max_rows < target_rows:
            raise InvalidArgumentError(
                f"need 1 <= target_rows <= max_rows, got {target_rows}, {max_rows}"
            )
        self._key = key
        self._target = target_rows
        self._max = max_rows
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._open = 0  # rows of complete runs in the open group
        self._tail = 0  # rows of the last run, which may continue
        self._tail_value: object = None

    def push(self, batch: pa.RecordBatch) -> Iterator[pa.Table]:
        """Row groups that ``batch`` completes (possibly none)."""
        if batch.num_rows == 0:
            return
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        if self._key is None:
            while self._pending_rows >= self._target:
                yield self._take(self._target)
            return
        column = key_values(batch, self._key)
        runs = run_lengths(column)
        if self._tail and column[0].as_py() == self._tail_value:
            self._tail += runs[0]  # the last run goes on
            runs = runs[1:]
        for run in runs:
            if self._tail:
                yield from self._complete(self._tail)
            self._tail = run
        self._tail_value = column[len(column) - 1].as_py()
        # A run past the cap is split anyway: emit the full pieces it has already.
        if self._tail > self._max:
            if self._open:
                yield self._take(self._open)
                self._open = 0
            while self._tail > self._max:
                yield self._take(self._max)
                self._tail -= self._max

    def finish(self) -> Iterator[pa.Table]:
        """The row groups of whatever is still held back."""
        if not self._pending_rows:
            return
        if self._key is None:
            while self._pending_rows:
                yield self._take(min(self._target, self._pending_rows))
            return
        if self._tail:
            yield from self._complete(self._tail)
            self._tail = 0
        if self._open:
            yield self._take(self._open)
            self._open = 0

    def _complete(self, length: int) -> Iterator[pa.Table]:
        """A run of ``length`` rows at the front of the held-back rows after the open group
        is complete: :func:`pack_runs`' rule for one run."""
        if self._open and self._open + length > self._target:
            yield self._take(self._open)
            self._open = 0
        while length > self._max:
            if self._open:
                yield self._take(self._open)
                self._open = 0
            yield self._take(self._max)
            length -= self._max
        self._open += length

    def _take(self, rows: int) -> pa.Table:
        """Remove and return the first ``rows`` held-back rows."""
        table = pa.Table.from_batches(self._pending)
        head, rest = table.slice(0, rows), table.slice(rows)
        self._pending = rest.to_batches()
        self._pending_rows -= rows
        return head.combine_chunks()
