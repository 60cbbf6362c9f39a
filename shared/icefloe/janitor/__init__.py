"""Garbage collection: snapshot expiry, dead-file deletion, the orphan sweep, claim reaping."""

from __future__ import annotations

from icefloe.janitor.durations import format_duration, parse_duration
from icefloe.janitor.run import (
    DEFAULT_MAX_FILES,
    ORPHAN_GRACE_FLOOR,
    QUERY_GRACE,
    Janitor,
    JanitorReport,
    TableCleanup,
)

__all__ = [
    "DEFAULT_MAX_FILES",
    "ORPHAN_GRACE_FLOOR",
    "QUERY_GRACE",
    "Janitor",
    "JanitorReport",
    "TableCleanup",
    "format_duration",
    "parse_duration",
]
