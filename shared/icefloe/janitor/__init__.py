"""Garbage collection: snapshot expiry, dead-file deletion, the orphan sweep, claim reaping."""

from __future__ import annotations

from icefloe.janitor.collector import (
    DEFAULT_MAX_FILES,
    ORPHAN_GRACE_FLOOR,
    QUERY_GRACE,
    Janitor,
    JanitorReport,
    TableCollection,
)
from icefloe.janitor.durations import format_duration, parse_duration

__all__ = [
    "DEFAULT_MAX_FILES",
    "ORPHAN_GRACE_FLOOR",
    "QUERY_GRACE",
    "Janitor",
    "JanitorReport",
    "TableCollection",
    "format_duration",
    "parse_duration",
]
