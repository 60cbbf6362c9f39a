"""Size targets and retention: positive, consistent numbers."""

from __future__ import annotations

import pytest

from icefloe.errors import SpecError
from icefloe.spec import Retention, SizeTargets
from icefloe.spec.policy import GIB, MIB


def test_default_size_targets() -> None:
    sizes = SizeTargets()
    assert sizes.target_file_bytes == 128 * MIB
    assert sizes.row_group_target_bytes == 16 * MIB
    assert sizes.max_merge_group_bytes == 2 * GIB
    assert sizes.lambda_merge_cap_bytes == 512 * MIB  # measured: see docs/benchmarks.md


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_file_bytes": 0}, "target_file_bytes must be an integer >= 1"),
        ({"row_group_max_rows": -1}, "row_group_max_rows"),
        ({"max_files_per_merge": 1.5}, "max_files_per_merge"),
        ({"min_files_to_merge": True}, "min_files_to_merge"),
        ({"row_group_target_bytes": 256 * MIB}, "must not exceed target_file_bytes"),
        ({"target_file_bytes": 4 * GIB}, "must not exceed max_merge_group_bytes"),
        ({"min_files_to_merge": 1}, "min_files_to_merge must be >= 2"),
        ({"min_files_to_merge": 10, "max_files_per_merge": 5}, "max_files_per_merge"),
        ({"merge_size_ratio": 1}, "merge_size_ratio must be >= 2"),
        (
            {"min_files_to_merge": 2, "max_files_per_merge": 2, "merge_size_ratio": 3},
            "max_files_per_merge \\(2\\) must be >= merge_size_ratio",
        ),
        ({"min_file_age_seconds": -1}, "min_file_age_seconds must be an integer >= 0"),
    ],
)
def test_invalid_size_targets_name_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        SizeTargets(**kwargs)  # type: ignore[arg-type]


def test_merge_knobs_default_to_doubling_groups_of_any_age() -> None:
    sizes = SizeTargets()
    assert (sizes.merge_size_ratio, sizes.min_file_age_seconds) == (2, 0)
    assert SizeTargets(min_file_age_seconds=0).min_file_age_seconds == 0


def test_retention_accepts_zero_and_refuses_negatives() -> None:
    assert Retention(snapshot_retention_seconds=0, orphan_grace_seconds=0).orphan_grace_seconds == 0
    assert Retention().snapshot_retention_seconds == 3 * 86_400
    with pytest.raises(SpecError, match="retention: orphan_grace_seconds"):
        Retention(orphan_grace_seconds=-1)
    with pytest.raises(SpecError, match="snapshot_retention_seconds"):
        Retention(snapshot_retention_seconds="3d")  # type: ignore[arg-type]


def test_retention_is_at_most_100_years() -> None:
    longest = 36_500 * 86_400
    assert Retention(snapshot_retention_seconds=longest).snapshot_retention_seconds == longest
    with pytest.raises(SpecError, match="snapshot_retention_seconds must be at most 3153600000"):
        Retention(snapshot_retention_seconds=longest + 1)
    with pytest.raises(SpecError, match="orphan_grace_seconds must be at most"):
        Retention(orphan_grace_seconds=10**15)
