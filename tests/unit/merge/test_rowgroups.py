"""Value-aligned row groups: packing runs of equal keys, and cutting a stream of batches."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefloe.errors import InvalidArgumentError
from icefloe.merge.rowgroups import RowGroupCutter, pack_runs, run_lengths

PROPERTY = settings(max_examples=200, deadline=None)


@st.composite
def limits(draw: st.DrawFn) -> tuple[int, int]:
    """(target_rows, max_rows) with 1 <= target <= max, sometimes equal."""
    target = draw(st.integers(min_value=1, max_value=24))
    return target, draw(st.sampled_from([target, target + 1, 2 * target, target + 17]))


@dataclass(frozen=True)
class Segment:
    """Part of one run that lies in one group."""

    run: int
    rows: int
    whole: bool  # the group holds the entire run


def _segments(runs: Sequence[int], groups: Sequence[int]) -> list[list[Segment]]:
    """Each group as the run pieces it holds (groups must cover the runs exactly)."""
    out: list[list[Segment]] = []
    run, left = 0, runs[0] if runs else 0
    for size in groups:
        pieces: list[Segment] = []
        while size:
            take = min(size, left)
            pieces.append(Segment(run, take, whole=take == runs[run]))
            size -= take
            left -= take
            if not left:
                run += 1
                left = runs[run] if run < len(runs) else 0
        out.append(pieces)
    return out


def _boundaries(sizes: Iterable[int]) -> list[int]:
    return list(itertools.accumulate(sizes))


# --- pack_runs ----------------------------------------------------------------------------

runs_strategy = st.lists(st.integers(min_value=1, max_value=60), max_size=40)


@PROPERTY
@given(runs_strategy, limits())
def test_packed_groups_cover_every_row_once(runs: list[int], lim: tuple[int, int]) -> None:
    target, cap = lim
    groups = pack_runs(runs, target_rows=target, max_rows=cap)
    assert sum(groups) == sum(runs)
    assert all(size > 0 for size in groups)
    assert (groups == []) == (runs == [])


@PROPERTY
@given(runs_strategy, limits())
def test_a_run_is_split_only_when_longer_than_max_rows(
    runs: list[int], lim: tuple[int, int]
) -> None:
    target, cap = lim
    groups = pack_runs(runs, target_rows=target, max_rows=cap)
    run_ends = set(_boundaries(runs))
    starts = [0, *_boundaries(runs)]
    for cut in _boundaries(groups):
        if cut in run_ends:
            continue
        # then the cut lies inside a run past the cap ...
        i = next(i for i, length in enumerate(runs) if starts[i] < cut < starts[i + 1])
        assert runs[i] > cap
        # ... at a whole number of cap-sized pieces from the run's start
        assert (cut - starts[i]) % cap == 0


@PROPERTY
@given(runs_strategy, limits())
def test_a_long_run_fills_cap_sized_groups_of_its_own(
    runs: list[int], lim: tuple[int, int]
) -> None:
    target, cap = lim
    groups = pack_runs(runs, target_rows=target, max_rows=cap)
    for pieces in _segments(runs, groups):
        for piece in pieces:
            if runs[piece.run] > cap and len(pieces) > 1:
                # a piece sharing its group is the run's last piece (the remainder)
                assert piece is pieces[0]
    long_runs = [i for i, length in enumerate(runs) if length > cap]
    for i in long_runs:
        held = [p.rows for g in _segments(runs, groups) for p in g if p.run == i]
        assert held[:-1] == [cap] * (len(held) - 1)
        assert 0 < held[-1] <= cap


@PROPERTY
@given(runs_strategy, limits())
def test_no_group_passes_the_target_unless_it_is_one_run_and_never_the_cap(
    runs: list[int], lim: tuple[int, int]
) -> None:
    target, cap = lim
    groups = pack_runs(runs, target_rows=target, max_rows=cap)
    for size, pieces in zip(groups, _segments(runs, groups), strict=True):
        assert size <= cap
        assert size <= max(target, max(runs[p.run] for p in pieces))
        if len(pieces) > 1:
            assert size <= target


@PROPERTY
@given(runs_strategy, limits())
def test_consecutive_runs_are_packed_greedily(runs: list[int], lim: tuple[int, int]) -> None:
    target, cap = lim
    groups = pack_runs(runs, target_rows=target, max_rows=cap)
    segments = _segments(runs, groups)
    for (g1, first), (_, second) in itertools.pairwise(zip(groups, segments, strict=True)):
        # then the next group's first piece would not have fitted in this group
        assert g1 + second[0].rows > target
        if all(p.whole for p in first) and all(p.whole for p in second):
            assert g1 + runs[second[0].run] > target


@pytest.mark.parametrize(
    ("runs", "target", "cap", "expected"),
    [
        ([], 5, 5, []),
        ([3, 3, 3], 6, 10, [6, 3]),
        ([1, 1, 1, 1, 1], 2, 2, [2, 2, 1]),
        ([12], 10, 20, [12]),  # one run past the target but within the cap stays whole
        ([25], 10, 10, [10, 10, 5]),
        ([20], 10, 10, [10, 10]),
        ([2, 25, 2], 10, 10, [2, 10, 10, 7]),  # the remainder opens a group others join
        ([4, 7, 4], 10, 30, [4, 7, 4]),
        ([1, 30, 1], 5, 30, [1, 30, 1]),
    ],
)
def test_pack_runs_examples(runs: list[int], target: int, cap: int, expected: list[int]) -> None:
    assert pack_runs(runs, target_rows=target, max_rows=cap) == expected


@pytest.mark.parametrize(
    ("runs", "target", "cap", "message"),
    [
        ([1], 0, 5, "target_rows"),
        ([1], 5, 4, "target_rows"),
        ([1, 0], 5, 5, "positive"),
        ([-3], 5, 5, "positive"),
    ],
)
def test_pack_runs_rejects_bad_arguments(
    runs: list[int], target: int, cap: int, message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        pack_runs(runs, target_rows=target, max_rows=cap)


# --- run_lengths --------------------------------------------------------------------------


def _reference_runs(values: Sequence[object]) -> list[int]:
    return [len(list(group)) for _, group in itertools.groupby(values)]


def _chunked(values: Sequence[object], cuts: Sequence[int], type_: pa.DataType) -> pa.ChunkedArray:
    edges = [0, *sorted(min(c, len(values)) for c in cuts), len(values)]
    return pa.chunked_array(
        [pa.array(values[a:b], type=type_) for a, b in itertools.pairwise(edges)], type=type_
    )


small_ints = st.one_of(st.none(), st.integers(min_value=-2, max_value=2))
short_strings = st.one_of(st.none(), st.sampled_from(["", "a", "b", "é", "a" * 20]))


@PROPERTY
@given(st.lists(small_ints, max_size=40))
def test_run_lengths_of_ints_match_groupby_with_nulls_equal(values: list[int | None]) -> None:
    assert run_lengths(pa.array(values, type=pa.int64())) == _reference_runs(values)


@PROPERTY
@given(st.lists(short_strings, max_size=40))
def test_run_lengths_of_strings_match_groupby_with_nulls_equal(values: list[str | None]) -> None:
    assert run_lengths(pa.array(values, type=pa.string())) == _reference_runs(values)
    assert run_lengths(pa.array(values, type=pa.large_string())) == _reference_runs(values)


@PROPERTY
@given(
    st.lists(small_ints, max_size=40),
    st.lists(st.integers(min_value=0, max_value=60), max_size=5),
)
def test_run_lengths_of_a_chunked_array_ignore_chunk_borders(
    values: list[int | None], cuts: list[int]
) -> None:
    # given runs that may straddle chunk borders (and empty chunks)
    column = _chunked(values, cuts, pa.int64())
    assert run_lengths(column) == _reference_runs(values)


def test_run_lengths_examples() -> None:
    assert run_lengths(pa.array([], type=pa.int64())) == []
    assert run_lengths(pa.chunked_array([], type=pa.string())) == []
    assert run_lengths(pa.array([None, None, None])) == [3]
    assert run_lengths(pa.array([1, None, None, 1])) == [1, 2, 1]
    assert run_lengths(pa.array(["x", "x", "y", None])) == [2, 1, 1]
    assert run_lengths(pa.chunked_array([["a", "a"], [], ["a", "b"]])) == [3, 1]
    assert run_lengths(pa.array([7])) == [1]


def test_run_lengths_of_a_sliced_array_see_only_the_slice() -> None:
    array = pa.array([1, 1, 2, 2, 2, 3, 3])
    assert run_lengths(array.slice(1, 5)) == [1, 3, 1]


@pytest.mark.parametrize(
    "array",
    [
        pa.array(["a", None, None, "b"]).dictionary_encode(),
        pa.DictionaryArray.from_arrays(pa.array([0, None, 0]), pa.array(["a"])),
        pa.DictionaryArray.from_arrays(pa.array([0, 1]), pa.array(["a", "a"])),
    ],
)
def test_run_lengths_of_a_dictionary_array_follow_its_values(array: pa.DictionaryArray) -> None:
    assert run_lengths(array) == _reference_runs(array.to_pylist())


# --- RowGroupCutter -----------------------------------------------------------------------


@st.composite
def sorted_streams(
    draw: st.DrawFn, *, keys: st.SearchStrategy[object] | None = None
) -> tuple[list[object], list[int]]:
    """Sorted key values (nulls last, as DuckDB sorts) and batch sizes (some empty)."""
    values = draw(
        st.lists(st.integers(min_value=0, max_value=12) if keys is None else keys, max_size=120)
    )
    nulls = draw(st.integers(min_value=0, max_value=8)) if draw(st.booleans()) else 0
    column: list[object] = [*sorted(values), *([None] * nulls)]  # type: ignore[type-var]
    cuts = draw(st.lists(st.integers(min_value=0, max_value=len(column)), max_size=12).map(sorted))
    edges = [0, *cuts, len(column)]
    return column, [b - a for a, b in itertools.pairwise(edges)]


def _batches(
    column: Sequence[object], sizes: Sequence[int], type_: pa.DataType
) -> list[pa.RecordBatch]:
    out, start = [], 0
    for size in sizes:
        out.append(
            pa.record_batch(
                {
                    "k": pa.array(column[start : start + size], type=type_),
                    "row": pa.array(range(start, start + size), type=pa.int64()),
                }
            )
        )
        start += size
    return out


def _cut(cutter: RowGroupCutter, batches: Iterable[pa.RecordBatch]) -> list[pa.Table]:
    groups: list[pa.Table] = []
    for batch in batches:
        groups.extend(cutter.push(batch))
    groups.extend(cutter.finish())
    return groups


def _check_stream(
    column: list[object], sizes: list[int], lim: tuple[int, int], type_: pa.DataType
) -> list[pa.Table]:
    target, cap = lim
    groups = _cut(
        RowGroupCutter(key="k", target_rows=target, max_rows=cap), _batches(column, sizes, type_)
    )
    # then the groups, concatenated, are the input rows in their order
    assert all(g.num_rows > 0 for g in groups)
    assert [r for g in groups for r in g.column("row").to_pylist()] == list(range(len(column)))
    assert [v for g in groups for v in g.column("k").to_pylist()] == column
    assert all(g.schema.names == ["k", "row"] for g in groups)
    # and their sizes are those of packing all the runs at once
    runs = run_lengths(pa.array(column, type=type_))
    assert [g.num_rows for g in groups] == pack_runs(runs, target_rows=target, max_rows=cap)
    return groups


@PROPERTY
@given(sorted_streams(), limits())
def test_streamed_int_keys_cut_like_packing_all_runs_at_once(
    stream: tuple[list[object], list[int]], lim: tuple[int, int]
) -> None:
    column, sizes = stream
    _check_stream(column, sizes, lim, pa.int64())


@PROPERTY
@given(sorted_streams(keys=st.sampled_from(["", "a", "ab", "b", "zz"])), limits())
def test_streamed_string_keys_cut_like_packing_all_runs_at_once(
    stream: tuple[list[object], list[int]], lim: tuple[int, int]
) -> None:
    column, sizes = stream
    _check_stream(column, sizes, lim, pa.string())


@PROPERTY
@given(sorted_streams(keys=st.integers(min_value=0, max_value=3)), limits())
def test_a_key_value_sits_in_one_group_unless_its_run_passes_the_cap(
    stream: tuple[list[object], list[int]], lim: tuple[int, int]
) -> None:
    # given few distinct keys, so that runs often pass the cap
    column, sizes = stream
    groups = _check_stream(column, sizes, lim, pa.int64())
    _, cap = lim
    counts = {value: column.count(value) for value in set(column)}
    for value, count in counts.items():
        holding = [g.column("k").to_pylist() for g in groups if value in g.column("k").to_pylist()]
        if count > cap:
            # then each full cap-sized group holds only that value; the remainder may share
            alone = [g for g in holding if set(g) == {value}]
            assert len(alone) >= count // cap
            assert all(len(g) == cap for g in holding[:-1])
        else:
            assert len(holding) == 1


@PROPERTY
@given(
    st.lists(st.integers(min_value=0, max_value=40), max_size=12),
    st.integers(min_value=1, max_value=25),
)
def test_without_a_key_groups_are_target_sized_but_the_last(sizes: list[int], target: int) -> None:
    column = list(range(sum(sizes)))
    groups = _cut(
        RowGroupCutter(key=None, target_rows=target, max_rows=target + 5),
        _batches(column, sizes, pa.int64()),
    )
    lengths = [g.num_rows for g in groups]
    assert all(n == target for n in lengths[:-1])
    assert (lengths == []) == (column == [])
    if lengths:
        assert 0 < lengths[-1] <= target
    assert [r for g in groups for r in g.column("row").to_pylist()] == column


def test_push_holds_back_the_open_group_until_a_later_run_closes_it() -> None:
    cutter = RowGroupCutter(key="k", target_rows=4, max_rows=8)
    first, second = _batches([1, 1, 2, 2, 3, 3, 4], [3, 4], pa.int64())
    # the first batch ends inside the run of 2s: nothing is decided yet
    assert list(cutter.push(first)) == []
    # the 3s close the group [1, 1, 2, 2]; the group the 3s opened is still open
    assert [g.column("k").to_pylist() for g in cutter.push(second)] == [[1, 1, 2, 2]]
    assert [g.column("k").to_pylist() for g in cutter.finish()] == [[3, 3, 4]]
    # and nothing is left afterwards
    assert list(cutter.finish()) == []


def test_push_emits_cap_sized_pieces_of_a_long_run_as_they_arrive() -> None:
    cutter = RowGroupCutter(key="k", target_rows=2, max_rows=3)
    (batch,) = _batches([0, 5, 5, 5, 5, 5, 5, 5], [8], pa.int64())
    pushed = [g.column("k").to_pylist() for g in cutter.push(batch)]
    # given one 0 and seven 5s: the 0 closes, two full pieces of 5s go out at once
    assert pushed == [[0], [5, 5, 5], [5, 5, 5]]
    # and the last 5 waits, since more 5s might follow
    assert [g.column("k").to_pylist() for g in cutter.finish()] == [[5]]


def test_empty_batches_and_streams_yield_nothing() -> None:
    for key in ("k", None):
        cutter = RowGroupCutter(key=key, target_rows=3, max_rows=3)
        (empty,) = _batches([], [0], pa.int64())
        assert list(cutter.push(empty)) == []
        assert list(cutter.finish()) == []


@pytest.mark.parametrize(("target", "cap"), [(0, 5), (5, 4), (-1, -1)])
def test_cutter_rejects_bad_limits(target: int, cap: int) -> None:
    with pytest.raises(InvalidArgumentError, match="target_rows"):
        RowGroupCutter(key="k", target_rows=target, max_rows=cap)
