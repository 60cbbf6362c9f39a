"""Hive-style partition paths: ``day=2026-11-22/tenant=a%2Fb``, values percent-escaped.

Only ``A-Z a-z 0-9 . _ -`` stay literal; every other character is percent-encoded as its UTF-8
bytes (upper-case hex), so a segment never contains ``/`` and never is ``.`` or ``..``. None is
:data:`NULL_PARTITION`; a real string spelled the same escapes its first ``_`` and stays distinct.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from datetime import datetime
from urllib.parse import unquote_to_bytes

from icefloe.errors import InvalidInputError
from icefloe.spec._text import show
from icefloe.spec.partitioning import PartitionField, PartitionValue

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
_SAFE = frozenset(string.ascii_letters + string.digits + "._-")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def escape_path_value(value: str) -> str:
    """Percent-encode ``value`` for one Hive path segment; :func:`unescape_path_value` inverts it."""
    if value == NULL_PARTITION:
        return "%5F" + value[1:]
    if value in (".", ".."):
        return "%2E" * len(value)
    try:
        return "".join(
            ch if ch in _SAFE else "".join(f"%{b:02X}" for b in ch.encode("utf-8")) for ch in value
        )
    except UnicodeEncodeError as e:
        raise InvalidInputError(f"partition value {show(value)} is not valid Unicode") from e


def unescape_path_value(text: str) -> str:
    """Decode percent escapes; InvalidInputError on a stray ``%`` or bytes that are not UTF-8."""
    if _BAD_PERCENT.search(text):
        raise InvalidInputError(f"partition path value {show(text)} has a malformed '%' escape")
    try:
        return unquote_to_bytes(text).decode("utf-8")
    except UnicodeError as e:
        raise InvalidInputError(f"partition path value {show(text)} is not UTF-8") from e


def partition_path(fields: Sequence[PartitionField], values: Sequence[PartitionValue]) -> str:
    """The relative Hive path of one partition, no trailing slash; ``""`` when unpartitioned."""
    _check_arity(fields, values)
    return "/".join(
        f"{field.name}="
        + (NULL_PARTITION if value is None else escape_path_value(field.to_path_value(value)))
        for field, value in zip(fields, values, strict=True)
    )


def parse_partition_path(
    fields: Sequence[PartitionField],
    path: str,
    *,
    source_types: Mapping[str, str] | None = None,
) -> tuple[PartitionValue, ...]:
    """Inverse of :func:`partition_path`; ``source_types`` (column -> type) types identity and
    truncate values back (integers, DATE, TIMESTAMP(TZ), TIME, BOOLEAN, DECIMAL, UUID); else str."""
    segments = path.split("/") if path else []
    if len(segments) != len(fields):
        raise InvalidInputError(
            f"partition path {show(path)} has {len(segments)} segments, expected {len(fields)}"
        )
    values: list[PartitionValue] = []
    for field, segment in zip(fields, segments, strict=True):
        name, sep, raw = segment.partition("=")
        if not sep or name != field.name:
            raise InvalidInputError(
                f"partition path {show(path)}: segment {show(segment)} is not '{field.name}=...'"
            )
        if raw == NULL_PARTITION:
            values.append(None)
            continue
        source_type = None if source_types is None else source_types.get(field.source)
        values.append(field.from_path_value(unescape_path_value(raw), source_type=source_type))
    return tuple(values)


def partition_start(
    fields: Sequence[PartitionField], values: Sequence[PartitionValue]
) -> datetime | None:
    """Start of the first time field's period (the meta store indexes it); None if absent or null."""
    _check_arity(fields, values)
    for field, value in zip(fields, values, strict=True):
        if field.is_time:
            if value is not None and not isinstance(value, datetime):
                raise InvalidInputError(
                    f"partition {field.name!r}: value {show(value)} is not a period start"
                )
            return value
    return None


def _check_arity(fields: Sequence[PartitionField], values: Sequence[PartitionValue]) -> None:
    if len(fields) != len(values):
        raise InvalidInputError(
            f"partition values {show(tuple(values))} do not match {len(fields)} partition fields"
        )
