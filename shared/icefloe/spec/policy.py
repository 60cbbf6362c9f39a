"""Per-table policies: file size targets for writers and merges, and retention for the janitor."""

from __future__ import annotations

from dataclasses import dataclass, fields

from icefloe.errors import SpecError
from icefloe.spec._text import show

MIB = 1024 * 1024
GIB = 1024 * MIB
HOUR = 3600
DAY = 24 * HOUR
# The longest retention or grace taken: 100 years. Past it a cut-off would fall before the
# dates Postgres and Python hold (a retention meant as "keep everything" is this).
LONGEST_RETENTION_SECONDS = 36_500 * DAY


@dataclass(frozen=True, slots=True)
class SizeTargets:
    """How big files and row groups should be, and how much one merge may combine."""

    target_file_bytes: int = 128 * MIB
    row_group_target_bytes: int = 16 * MIB
    row_group_max_rows: int = 1_000_000
    min_files_to_merge: int = 4
    max_merge_group_bytes: int = 2 * GIB
    max_files_per_merge: int = 100
    # Bigger groups go to EMR Serverless. From benchmarks/compaction_bench.py: a 3,008 MB,
    # 15-minute merge worker with 10 GB of /tmp fills half its disk with spill and staged
    # output at about 0.7 GB of input (files as inserts now write them); its speed would
    # allow about 3.8 GB.
    lambda_merge_cap_bytes: int = 512 * MIB
    # A merge group's bytes must be at least this many times its largest input's: every row
    # then lands in a file at least this much bigger each time it is rewritten, so it is
    # rewritten at most log_ratio(target / smallest file) times (ClickHouse's "base").
    merge_size_ratio: int = 2
    # Files younger than this are left to gather company (0: merge as soon as planned).
    min_file_age_seconds: int = 0

    def __post_init__(self) -> None:
        _check_ints(self, minimum=1, zero_allowed=("min_file_age_seconds",))
        if self.merge_size_ratio < 2:
            raise SpecError(f"sizes: merge_size_ratio must be >= 2, got {self.merge_size_ratio}")
        if self.max_files_per_merge < self.merge_size_ratio:
            # n files hold at most n times the largest: fewer than the ratio can never merge.
            raise SpecError(
                f"sizes: max_files_per_merge ({self.max_files_per_merge}) must be >= "
                f"merge_size_ratio ({self.merge_size_ratio})"
            )
        if self.row_group_target_bytes > self.target_file_bytes:
            raise SpecError(
                f"sizes: row_group_target_bytes ({self.row_group_target_bytes}) must not exceed "
                f"target_file_bytes ({self.target_file_bytes})"
            )
        if self.target_file_bytes > self.max_merge_group_bytes:
            raise SpecError(
                f"sizes: target_file_bytes ({self.target_file_bytes}) must not exceed "
                f"max_merge_group_bytes ({self.max_merge_group_bytes})"
            )
        if self.min_files_to_merge < 2:
            raise SpecError(
                f"sizes: min_files_to_merge must be >= 2, got {self.min_files_to_merge}"
            )
        if self.max_files_per_merge < self.min_files_to_merge:
            raise SpecError(
                f"sizes: max_files_per_merge ({self.max_files_per_merge}) must be >= "
                f"min_files_to_merge ({self.min_files_to_merge})"
            )


@dataclass(frozen=True, slots=True)
class Retention:
    """How long expired snapshots stay readable, and how old an unnamed object must be to go.

    Any value from zero to 100 years is accepted; the janitor enforces its own floor for the
    orphan grace.
    """

    snapshot_retention_seconds: int = 3 * DAY
    orphan_grace_seconds: int = 1 * DAY

    def __post_init__(self) -> None:
        _check_ints(self, minimum=0)
        for f in fields(self):
            if getattr(self, f.name) > LONGEST_RETENTION_SECONDS:
                raise SpecError(
                    f"retention: {f.name} must be at most {LONGEST_RETENTION_SECONDS} (100 years),"
                    f" got {getattr(self, f.name)}"
                )


def _check_ints(
    obj: SizeTargets | Retention, *, minimum: int, zero_allowed: tuple[str, ...] = ()
) -> None:
    where = "sizes" if isinstance(obj, SizeTargets) else "retention"
    for f in fields(obj):
        value = getattr(obj, f.name)
        least = 0 if f.name in zero_allowed else minimum
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise SpecError(f"{where}: {f.name} must be an integer >= {least}, got {show(value)}")
