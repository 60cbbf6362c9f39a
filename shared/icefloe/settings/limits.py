"""What one query, merge or compaction may use: the typed limits the settings are read into,
with their defaults. Plain data at the bottom of the import graph: the query engine, the merge
worker and the compaction launcher take them as given."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from icefloe.errors import ConfigError

MEMORY_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT])(i?)B$")


def memory_bytes(size: str) -> int:
    """A memory size like ``512MB`` or ``2GiB`` in bytes (DuckDB's units: KB = 1000,
    KiB = 1024)."""
    match = MEMORY_SIZE.match(size)
    if match is None:
        raise ConfigError(f"memory size {size!r} is not like 512MB or 2GB")
    base = 1024 if match.group(3) else 1000
    return int(float(match.group(1)) * base ** "KMGT".index(match.group(2)) * base)


# How long a merge claim holds (the orchestrator claims with it, the worker renews with it).
DEFAULT_LEASE = timedelta(minutes=30)
# How long a compaction job's claims hold: longer than the job's run time limit.
DEFAULT_COMPACTION_LEASE = timedelta(hours=6)


@dataclass(frozen=True, slots=True)
class QueryLimits:
    """Resources one query may use."""

    memory_limit: str = "1GB"
    threads: int = 2
    timeout_s: float = 60.0
    max_sql_chars: int = 100_000
    max_result_rows: int = 10_000_000
    # None: half the memory limit (the result is held while it is written out).
    max_result_bytes: int | None = None

    @property
    def memory_bytes(self) -> int:
        """The memory limit in bytes (DuckDB's units: KB = 1000, KiB = 1024)."""
        return memory_bytes(self.memory_limit)

    @property
    def result_bytes(self) -> int:
        """The cap on a result's Arrow bytes."""
        return (
            self.max_result_bytes if self.max_result_bytes is not None else self.memory_bytes // 2
        )

    def __post_init__(self) -> None:
        if not MEMORY_SIZE.match(self.memory_limit):
            raise ConfigError(f"query memory limit {self.memory_limit!r} is not like 512MB or 2GB")
        if self.threads < 1 or self.timeout_s <= 0:
            raise ConfigError("query threads must be at least 1 and the timeout positive")
        if self.max_result_rows < 1 or (
            self.max_result_bytes is not None and self.max_result_bytes < 1
        ):
            raise ConfigError("query result caps must be positive")


@dataclass(frozen=True, slots=True)
class MergeLimits:
    """What one merge may use: DuckDB memory and threads, and where it spills.
    ``sort_in_memory``: an append merge of files small beside the memory limit is sorted in
    Arrow (see :mod:`icefloe.merge.in_memory`); False sends every merge through DuckDB."""

    memory_limit: str = "1GB"
    threads: int = 2
    temp_directory: Path | None = None
    sort_in_memory: bool = True

    @property
    def memory_bytes(self) -> int:
        """The memory limit in bytes (DuckDB's units: KB = 1000, KiB = 1024)."""
        return memory_bytes(self.memory_limit)
