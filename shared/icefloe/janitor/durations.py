"""Durations as people write them: ``0s``, ``90m``, ``36h``, ``3d``, ``1h30m``."""

from __future__ import annotations

import re
from datetime import timedelta

from icefloe.errors import InvalidInputError
from icefloe.spec.policy import DAY, LONGEST_RETENTION_SECONDS

LONGEST_DURATION = timedelta(seconds=LONGEST_RETENTION_SECONDS)

_PART = re.compile(r"([0-9]+)([smhdw])", re.ASCII)  # ASCII digits only (int() takes others)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_duration(text: str) -> timedelta:
    """A duration from ``<number><unit>`` parts (units s, m, h, d, w), from zero to
    :data:`LONGEST_DURATION` (100 years)."""
    cleaned = text.strip().lower() if isinstance(text, str) else ""
    if not cleaned or _PART.sub("", cleaned) != "":
        raise InvalidInputError(
            f"duration {text!r}: expected a number and a unit (s, m, h, d, w), like 0s, 90m or 3d"
        )
    seconds = sum(int(n) * _UNITS[unit] for n, unit in _PART.findall(cleaned))
    if seconds > LONGEST_RETENTION_SECONDS:  # a refusal, not a crash: a function would retry it
        raise InvalidInputError(
            f"duration {text!r} is too long (at most {LONGEST_RETENTION_SECONDS // DAY}d,"
            " 100 years)"
        )
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The shortest exact form :func:`parse_duration` reads back (``1d12h``, ``0s``)."""
    seconds = int(value.total_seconds())
    if seconds == 0:
        return "0s"
    parts = []
    for unit in ("d", "h", "m", "s"):
        count, seconds = divmod(seconds, _UNITS[unit])
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
