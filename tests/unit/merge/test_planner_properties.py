"""Merge planning: groups are valid, bounded and convergent, whatever files a table holds."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from icefloe.errors import InvalidArgumentError
from icefloe.merge.planner import (
    MergeGroup,
    MergePolicy,
    PartitionOrder,
    plan_partition,
    plan_table,
)
from icefloe.metastore.models import LiveFile
from icefloe.spec import SizeTargets

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
LONG_AGO = NOW - timedelta(days=30)

# (path, period start): a few dated partitions, one with a tie on the start, and undated ones.
PARTITIONS: list[tuple[str, datetime | None]] = [
    ("day=2024-01-01", datetime(2024, 1, 1, tzinfo=UTC)),
    ("day=2024-01-02", datetime(2024, 1, 2, tzinfo=UTC)),
    ("day=2024-03-15", datetime(2024, 3, 15, tzinfo=UTC)),
    ("region=eu/day=2024-01-02", datetime(2024, 1, 2, tzinfo=UTC)),
    ("bucket=1", None),
    ("bucket=2", None),
]
START_OF = dict(PARTITIONS)

PROPERTY = settings(max_examples=200, deadline=None)


@dataclass(frozen=True)
class Scenario:
    policy: MergePolicy
    files: list[LiveFile]


def _policy(
    *,
    target: int,
    min_files: int = 4,
    max_files: int = 100,
    ratio: int = 2,
    min_age_seconds: int = 0,
    cap: int | None = None,
) -> MergePolicy:
    return MergePolicy.from_sizes(
        SizeTargets(
            target_file_bytes=target,
            row_group_target_bytes=1,
            min_files_to_merge=min_files,
            max_files_per_merge=max_files,
            max_merge_group_bytes=target if cap is None else cap,
            merge_size_ratio=ratio,
            min_file_age_seconds=min_age_seconds,
        )
    )


def _file(
    file_id: int,
    size: int,
    *,
    partition: str = "day=2024-01-01",
    created_at: datetime = LONG_AGO,
    claimed: bool = False,
    rows: int | None = None,
) -> LiveFile:
    return LiveFile(
        file_id=file_id,
        partition_path=partition,
        partition_start=START_OF.get(partition),
        size_bytes=size,
        row_count=size if rows is None else rows,
        created_at=created_at,
        claimed=claimed,
    )


@st.composite
def policies(draw: st.DrawFn) -> MergePolicy:
    target = draw(st.integers(min_value=8, max_value=5_000))
    min_files = draw(st.integers(min_value=2, max_value=6))
    ratio = draw(st.integers(min_value=2, max_value=4))
    return _policy(
        target=target,
        min_files=min_files,
        # SizeTargets refuses fewer files per merge than the ratio (no group could be valid).
        max_files=draw(st.integers(min_value=max(min_files, ratio), max_value=24)),
        ratio=ratio,
        min_age_seconds=draw(st.sampled_from([0, 0, 60, 600])),
        cap=draw(st.sampled_from([target, 2 * target, 100 * target])),
    )


@st.composite
def scenarios(
    draw: st.DrawFn,
    *,
    partitions: Sequence[str] = tuple(START_OF),
    max_files: int = 40,
    odd_files: bool = True,
) -> Scenario:
    """A policy and files for it in one to three partitions: mostly files far below the
    target (so that groups form), a few near or past it; with ``odd_files`` also claimed
    files and files younger than (or exactly) the minimum age."""
    policy = draw(policies())
    target = policy.target_file_bytes
    chosen = draw(st.lists(st.sampled_from(list(partitions)), min_size=1, max_size=3, unique=True))
    scale = max(1, target // draw(st.sampled_from([1, 4, 16, 64, 256])))
    oddities = 16 if odd_files else 1
    # One integer per file (fast to draw) holds its size, partition and oddity.
    count = draw(st.integers(min_value=0, max_value=max_files))
    small = [
        (code // scale % len(chosen), 1 + code % scale, code // scale // len(chosen))
        for code in draw(
            st.lists(
                st.integers(min_value=0, max_value=scale * len(chosen) * oddities - 1),
                min_size=count,
                max_size=count,
            )
        )
    ]
    big = draw(
        st.lists(
            st.tuples(
                st.integers(min_value=0, max_value=len(chosen) - 1),
                st.integers(min_value=1, max_value=target + target // 4),
                st.integers(min_value=0, max_value=oddities - 1),
            ),
            max_size=4,
        )
    )
    ids = list(range(1, len(small) + len(big) + 1))
    random.Random(draw(st.integers(min_value=0, max_value=2**32))).shuffle(ids)
    files = []
    for file_id, (partition, size, odd) in zip(ids, small + big, strict=True):
        if odd == 1:  # a second too young (or, without a minimum age, brand new)
            created_at = NOW - max(timedelta(0), policy.min_age - timedelta(seconds=1))
        elif odd == 2:  # exactly old enough
            created_at = NOW - policy.min_age
        else:
            created_at = LONG_AGO
        files.append(
            _file(
                file_id,
                size,
                partition=chosen[partition],
                created_at=created_at,
                claimed=odd == 3,
                rows=2 * size + 1,
            )
        )
    return Scenario(policy, files)


def _eligible(f: LiveFile, policy: MergePolicy) -> bool:
    return (
        not f.claimed
        and f.size_bytes < policy.target_file_bytes
        and NOW - f.created_at >= policy.min_age
    )


# --- structure of every group -------------------------------------------------------------


@PROPERTY
@given(scenarios())
def test_a_group_never_mixes_partitions(scenario: Scenario) -> None:
    by_id = {f.file_id: f for f in scenario.files}
    for group in plan_table(scenario.files, policy=scenario.policy, now=NOW):
        # then every input of the group lies in the group's own partition
        assert {by_id[i].partition_path for i in group.file_ids} == {group.partition_path}
        assert group.partition_start == START_OF[group.partition_path]


@PROPERTY
@given(scenarios())
def test_a_group_stays_within_the_byte_and_file_caps_and_reaches_min_files(
    scenario: Scenario,
) -> None:
    policy = scenario.policy
    for group in plan_table(scenario.files, policy=policy, now=NOW):
        assert group.bytes <= policy.max_group_bytes
        assert group.bytes <= policy.target_file_bytes
        assert policy.min_files <= len(group.file_ids) <= policy.max_files


@PROPERTY
@given(scenarios())
def test_a_group_is_at_least_ratio_times_its_largest_file(scenario: Scenario) -> None:
    by_id = {f.file_id: f for f in scenario.files}
    for group in plan_table(scenario.files, policy=scenario.policy, now=NOW):
        largest = max(by_id[i].size_bytes for i in group.file_ids)
        assert group.bytes >= scenario.policy.size_ratio * largest


@PROPERTY
@given(scenarios())
def test_a_group_sums_its_files_bytes_and_rows(scenario: Scenario) -> None:
    by_id = {f.file_id: f for f in scenario.files}
    for group in plan_table(scenario.files, policy=scenario.policy, now=NOW):
        assert group.bytes == sum(by_id[i].size_bytes for i in group.file_ids)
        assert group.rows == sum(by_id[i].row_count for i in group.file_ids)
        assert list(group.file_ids) == sorted(group.file_ids)


@PROPERTY
@given(scenarios())
def test_a_group_holds_only_eligible_input_files_and_each_at_most_once(
    scenario: Scenario,
) -> None:
    by_id = {f.file_id: f for f in scenario.files}
    groups = plan_table(scenario.files, policy=scenario.policy, now=NOW)
    planned = [i for g in groups for i in g.file_ids]
    # no file in two groups (nor twice in one)
    assert len(planned) == len(set(planned))
    for file_id in planned:
        # the id exists in the input
        assert file_id in by_id
        f = by_id[file_id]
        # not claimed, below the target, and old enough
        assert not f.claimed
        assert f.size_bytes < scenario.policy.target_file_bytes
        assert NOW - f.created_at >= scenario.policy.min_age


@PROPERTY
@given(scenarios(), st.randoms(use_true_random=False))
def test_the_plan_does_not_depend_on_the_input_order(
    scenario: Scenario, rnd: random.Random
) -> None:
    shuffled = list(scenario.files)
    rnd.shuffle(shuffled)
    first = plan_table(scenario.files, policy=scenario.policy, now=NOW)
    second = plan_table(shuffled, policy=scenario.policy, now=NOW)
    assert first == second


@PROPERTY
@given(scenarios(), st.sampled_from(["newest_first", "oldest_first"]))
def test_plan_table_is_the_union_of_plan_partition_per_partition(
    scenario: Scenario, order: PartitionOrder
) -> None:
    table_groups = plan_table(scenario.files, policy=scenario.policy, now=NOW, order=order)
    expected: list[MergeGroup] = []
    for path in START_OF:
        part = [f for f in scenario.files if f.partition_path == path]
        expected.extend(plan_partition(part, policy=scenario.policy, now=NOW))
    assert sorted(table_groups, key=lambda g: g.file_ids) == sorted(
        expected, key=lambda g: g.file_ids
    )


@PROPERTY
@given(policies(), st.lists(st.integers(min_value=1, max_value=10**6), max_size=40))
def test_ineligible_files_alone_plan_nothing(policy: MergePolicy, sizes: list[int]) -> None:
    # given only claimed, too young (when there is a minimum age) or target-sized files
    files = []
    for i, size in enumerate(sizes, start=1):
        kind = i % 3
        if kind == 0:
            files.append(_file(i, size, claimed=True))
        elif kind == 1 and policy.min_age:
            files.append(_file(i, size, created_at=NOW - policy.min_age + timedelta(seconds=1)))
        else:
            files.append(_file(i, policy.target_file_bytes + size - 1))
    # then there is nothing to merge
    assert plan_table(files, policy=policy, now=NOW) == []


@PROPERTY
@given(
    policies(),
    st.integers(min_value=1, max_value=50),
    st.integers(min_value=0, max_value=60),
    st.lists(st.sampled_from(["claimed", "young", "big"]), max_size=10),
)
def test_equal_eligible_files_all_merge_but_for_a_leftover_too_small_to_group(
    policy: MergePolicy, size: int, count: int, noise: list[str]
) -> None:
    # given equal files that can form valid groups, plus ineligible ones beside them
    need = max(policy.min_files, policy.size_ratio)
    assume(need <= policy.max_files and need * size <= policy.max_group_bytes)
    assume(size < policy.target_file_bytes)
    files = [_file(i, size) for i in range(1, count + 1)]
    for i, kind in enumerate(noise, start=count + 1):
        if kind == "claimed":
            files.append(_file(i, size, claimed=True))
        elif kind == "young" and policy.min_age:
            files.append(_file(i, size, created_at=NOW))
        else:
            files.append(_file(i, policy.target_file_bytes))
    eligible = {f.file_id for f in files if _eligible(f, policy)}
    assert eligible == set(range(1, count + 1))
    groups = plan_partition(files, policy=policy, now=NOW)
    planned = {i for g in groups for i in g.file_ids}
    # then fewer than one valid group's worth of files is left waiting
    assert planned <= eligible
    assert len(eligible - planned) < need


# --- convergence and write amplification ---------------------------------------------------


def _ceil_log(ratio: int, quotient_num: int, quotient_den: int) -> int:
    """Smallest k >= 0 with den * ratio**k >= num, i.e. ceil(log_ratio(num / den))."""
    k = 0
    while quotient_den * ratio**k < quotient_num:
        k += 1
    return k


@PROPERTY
@given(scenarios(partitions=("day=2024-01-01", "bucket=1"), max_files=64))
def test_repeated_planning_converges_with_bounded_rewrites(scenario: Scenario) -> None:
    policy = scenario.policy
    files = {f.file_id: f for f in scenario.files}
    originals = {f.file_id: f.size_bytes for f in scenario.files}
    contents = {f.file_id: [f.file_id] for f in scenario.files}  # live file -> original ids
    rewrites = Counter[int]()
    total = sum(originals.values())
    next_id = max(files, default=0) + 1
    rounds = 0
    # when each planned group is merged into one file of its byte total, round after round
    while groups := plan_table(files.values(), policy=policy, now=NOW):
        rounds += 1
        assert rounds <= len(originals), "planning did not converge"
        for group in groups:
            merged: list[int] = []
            for file_id in group.file_ids:
                del files[file_id]
                merged.extend(contents.pop(file_id))
            for original in merged:
                rewrites[original] += 1
            files[next_id] = LiveFile(
                file_id=next_id,
                partition_path=group.partition_path,
                partition_start=group.partition_start,
                size_bytes=group.bytes,
                row_count=group.rows,
                created_at=LONG_AGO,
            )
            contents[next_id] = merged
            next_id += 1
    # then the plan ends empty with every byte still there
    assert sum(f.size_bytes for f in files.values()) == total
    assert sorted(i for ids in contents.values() for i in ids) == sorted(originals)
    if not originals:
        return
    smallest = min(originals.values())
    bound = _ceil_log(policy.size_ratio, policy.target_file_bytes, smallest) + 1
    for original, count in rewrites.items():
        assert count <= bound
        # tighter: each rewrite multiplies the holding file by >= ratio, and it never
        # outgrows one group's byte cap
        assert originals[original] * policy.size_ratio**count <= policy.max_group_bytes


@PROPERTY
@given(scenarios(partitions=("day=2024-01-01",), odd_files=False))
def test_after_convergence_no_partition_holds_a_mergeable_tier(scenario: Scenario) -> None:
    # given files merged until the planner stops
    policy = scenario.policy
    files = list(scenario.files)
    next_id = len(files) + 1
    while groups := plan_partition(files, policy=policy, now=NOW):
        planned = {i for g in groups for i in g.file_ids}
        files = [f for f in files if f.file_id not in planned]
        for group in groups:
            files.append(_file(next_id, group.bytes, rows=group.rows))
            next_id += 1
    # then planning once more is a no-op (a fixed point), also for the whole table
    assert plan_partition(files, policy=policy, now=NOW) == []
    assert plan_table(files, policy=policy, now=NOW) == []


# --- partition order ----------------------------------------------------------------------


def _partition_runs(groups: Sequence[MergeGroup]) -> list[str]:
    return [path for path, _ in itertools.groupby(g.partition_path for g in groups)]


@PROPERTY
@given(scenarios(odd_files=False))
def test_newest_first_orders_partitions_by_start_descending_undated_last(
    scenario: Scenario,
) -> None:
    groups = plan_table(scenario.files, policy=scenario.policy, now=NOW, order="newest_first")
    runs = _partition_runs(groups)
    # each partition's groups are adjacent
    assert len(runs) == len(set(runs))
    dated = [p for p in runs if START_OF[p] is not None]
    undated = [p for p in runs if START_OF[p] is None]
    assert runs == dated + undated
    assert dated == sorted(dated, key=lambda p: (START_OF[p], p), reverse=True)
    assert undated == sorted(undated, reverse=True)


@PROPERTY
@given(scenarios(odd_files=False))
def test_oldest_first_orders_partitions_by_start_ascending_undated_last(
    scenario: Scenario,
) -> None:
    groups = plan_table(scenario.files, policy=scenario.policy, now=NOW, order="oldest_first")
    runs = _partition_runs(groups)
    assert len(runs) == len(set(runs))
    dated = [p for p in runs if START_OF[p] is not None]
    undated = [p for p in runs if START_OF[p] is None]
    assert runs == dated + undated
    assert dated == sorted(dated, key=lambda p: (START_OF[p], p))
    assert undated == sorted(undated)


def test_partition_order_example() -> None:
    policy = _policy(target=1_000, min_files=2)
    paths = ["bucket=2", "day=2024-01-01", "bucket=1", "day=2024-03-15", "day=2024-01-02"]
    files = [
        _file(10 * n + k, 10, partition=path) for n, path in enumerate(paths) for k in range(2)
    ]
    newest = plan_table(files, policy=policy, now=NOW, order="newest_first")
    oldest = plan_table(files, policy=policy, now=NOW, order="oldest_first")
    assert [g.partition_path for g in newest] == [
        "day=2024-03-15",
        "day=2024-01-02",
        "day=2024-01-01",
        "bucket=2",
        "bucket=1",
    ]
    assert [g.partition_path for g in oldest] == [
        "day=2024-01-01",
        "day=2024-01-02",
        "day=2024-03-15",
        "bucket=1",
        "bucket=2",
    ]


def test_default_order_is_newest_first() -> None:
    policy = _policy(target=1_000, min_files=2)
    files = [
        _file(i, 10, partition=p)
        for i, p in enumerate(["day=2024-01-01"] * 2 + ["day=2024-03-15"] * 2)
    ]
    assert [g.partition_path for g in plan_table(files, policy=policy, now=NOW)] == [
        "day=2024-03-15",
        "day=2024-01-01",
    ]


# --- examples -----------------------------------------------------------------------------


def test_twelve_equal_small_files_make_one_group() -> None:
    policy = _policy(target=1_000, min_files=4)
    files = [_file(i, 10, rows=3) for i in range(1, 13)]
    assert plan_partition(files, policy=policy, now=NOW) == [
        MergeGroup(
            partition_path="day=2024-01-01",
            partition_start=START_OF["day=2024-01-01"],
            file_ids=tuple(range(1, 13)),
            bytes=120,
            rows=36,
        )
    ]


def test_a_lopsided_set_waits_for_more_small_files() -> None:
    # given three tiny files and one much bigger: merging would mostly rewrite the big one
    policy = _policy(target=1_000, min_files=4, ratio=2)
    files = [_file(1, 1), _file(2, 1), _file(3, 1), _file(4, 40)]
    assert plan_partition(files, policy=policy, now=NOW) == []


def test_a_backlog_bigger_than_the_target_splits_into_target_sized_groups() -> None:
    policy = _policy(target=500, min_files=4)
    files = [_file(i, 100) for i in range(1, 21)]
    groups = plan_partition(files, policy=policy, now=NOW)
    assert [g.file_ids for g in groups] == [
        (1, 2, 3, 4, 5),
        (6, 7, 8, 9, 10),
        (11, 12, 13, 14, 15),
        (16, 17, 18, 19, 20),
    ]
    assert all(g.bytes <= policy.target_file_bytes for g in groups)


def test_an_uneven_backlog_splits_into_several_groups_within_the_target() -> None:
    policy = _policy(target=1_000, min_files=2)
    files = [_file(i, 37 + (i * 7919) % 150) for i in range(1, 41)]
    groups = plan_partition(files, policy=policy, now=NOW)
    assert sum(f.size_bytes for f in files) > policy.target_file_bytes
    assert len(groups) >= 2
    assert all(g.bytes <= policy.target_file_bytes for g in groups)


def test_a_bigger_file_starts_the_next_tier_once_the_small_tier_is_valid() -> None:
    policy = _policy(target=1_000, min_files=4, ratio=2)
    files = [_file(i, 1) for i in range(1, 5)] + [_file(i, 10) for i in range(5, 9)]
    groups = plan_partition(files, policy=policy, now=NOW)
    assert [(g.file_ids, g.bytes) for g in groups] == [((1, 2, 3, 4), 4), ((5, 6, 7, 8), 40)]


def test_small_files_ride_along_with_bigger_neighbours_while_too_few() -> None:
    policy = _policy(target=1_000, min_files=4, ratio=2)
    files = [_file(1, 1), _file(2, 1), _file(3, 5), _file(4, 5), _file(5, 5)]
    groups = plan_partition(files, policy=policy, now=NOW)
    assert [(g.file_ids, g.bytes) for g in groups] == [((1, 2, 3, 4, 5), 17)]


def test_max_files_cuts_groups_and_a_lone_leftover_waits() -> None:
    policy = _policy(target=1_000, min_files=2, max_files=3)
    files = [_file(i, 1) for i in range(1, 11)]
    groups = plan_partition(files, policy=policy, now=NOW)
    assert [g.file_ids for g in groups] == [(1, 2, 3), (4, 5, 6), (7, 8, 9)]


def test_claimed_young_and_target_sized_files_are_left_out() -> None:
    policy = _policy(target=1_000, min_files=2, min_age_seconds=60)
    files = [
        _file(1, 10),
        _file(2, 10),
        _file(3, 10, claimed=True),
        _file(4, 10, created_at=NOW - timedelta(seconds=59)),
        _file(5, 1_000),
        _file(6, 10, created_at=NOW - timedelta(seconds=60)),  # exactly old enough
    ]
    groups = plan_partition(files, policy=policy, now=NOW)
    assert [g.file_ids for g in groups] == [(1, 2, 6)]


def test_plan_partition_rejects_eligible_files_of_two_partitions() -> None:
    policy = _policy(target=1_000, min_files=2)
    files = [_file(1, 10, partition="day=2024-01-01"), _file(2, 10, partition="bucket=1")]
    with pytest.raises(InvalidArgumentError, match="2 partitions"):
        plan_partition(files, policy=policy, now=NOW)


def test_empty_input_plans_nothing() -> None:
    policy = _policy(target=1_000)
    assert plan_partition([], policy=policy, now=NOW) == []
    assert plan_table([], policy=policy, now=NOW) == []


def test_policy_caps_group_bytes_at_the_smaller_of_target_and_group_cap() -> None:
    policy = _policy(target=1_000, cap=5_000, min_files=3, max_files=7, ratio=3, min_age_seconds=9)
    assert policy == MergePolicy(
        target_file_bytes=1_000,
        min_files=3,
        max_files=7,
        max_group_bytes=1_000,
        size_ratio=3,
        min_age=timedelta(seconds=9),
    )


# --- files that lack a generated column ---------------------------------------------------


@PROPERTY
@given(scenario=scenarios(), data=st.data())
def test_every_unclaimed_file_lacking_a_generated_column_is_merged_and_the_rest_plan_as_before(
    scenario: Scenario, data: st.DataObject
) -> None:
    # Some files are of an old spec version (they lack a generated column of the current one)
    stale_ids = set(
        data.draw(st.lists(st.sampled_from([f.file_id for f in scenario.files] or [0])))
    )
    files = [f._replace(spec_version=1 if f.file_id in stale_ids else 2) for f in scenario.files]
    policy = scenario.policy
    plain = plan_table(files, policy=policy, now=NOW)
    groups = plan_table(files, policy=policy, now=NOW, backfill={1})

    # Every group the rules make is still made, unchanged
    assert set(plain) <= set(groups)
    # Each unclaimed stale file is in exactly one group, whatever its size or age
    placed = Counter(i for g in groups for i in g.file_ids)
    assert all(n == 1 for n in placed.values())
    for f in files:
        if f.spec_version == 1 and not f.claimed:
            assert placed[f.file_id] == 1, f
        if f.claimed:
            assert f.file_id not in placed
    # The added groups hold stale files of one partition, within the caps (a file over them
    # alone)
    by_id = {f.file_id: f for f in files}
    for group in set(groups) - set(plain):
        members = [by_id[i] for i in group.file_ids]
        assert {f.spec_version for f in members} == {1}
        assert {f.partition_path for f in members} == {group.partition_path}
        assert group.bytes == sum(f.size_bytes for f in members)
        if len(members) > 1:
            assert len(members) <= policy.max_files
            assert group.bytes <= policy.max_group_bytes
