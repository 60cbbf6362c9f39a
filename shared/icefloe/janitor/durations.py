"""Durations as people write them: ``0s``, ``90m``, ``36h``, ``3d``, ``1h30m``."""

from __future__ import annotations

import re
from datetime import timedelta

from icefloe.errors import InvalidInputError

_PART = re.compile(r"([0-9]+)([smhdw])", re.ASCII)  # ASCII digits only (int() takes others)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_duration(text: str) -> timedelta:
    """A non-negative duration from ``<number><unit>`` parts (units s, m, h, d, w)."""
    cleaned = text.strip().lower() if isinstance(text, str) else ""
    if not cleaned or _PART.sub("", cleaned) != "":
        raise InvalidInputError(
            f"duration {text!r}: expected a number and a unit (s, m, h, d, w), like 0s, 90m or 3d"
        )
    seconds = sum(int(n) * _UNITS[unit] for n, unit in _PART.findall(cleaned))
    try:
        return timedelta(seconds=seconds)
    except OverflowError as e:  # a refusal, not a crash: a function would retry it
        raise InvalidInputError(
            f"duration {text!r} is too long (at most {timedelta.max.days} days)"
        ) from e


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
