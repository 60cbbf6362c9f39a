"""What every command prints, and the exit codes: one row as JSON, or text for a person
(tables of columns, counts of things)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from datetime import date, datetime
from typing import Any, TextIO
from uuid import UUID

# The exit codes besides 0. EXIT_USAGE: the command line itself is wrong (an unknown command
# or option, a missing argument, an option value of the wrong form or out of range, options
# that conflict or need each other), found by the parser before anything runs. EXIT_ERROR: the
# command ran and the lake refused the request (an unknown table, snapshot or partition; SQL,
# a schema or input data it rejects) or it failed (or part of it did).
EXIT_ERROR = 1
EXIT_USAGE = 2


def emit(out: TextIO, fmt: str, data: Any, text: Callable[[], str]) -> None:
    if fmt == "json":
        json.dump(data, out, default=_json_default, indent=2)
        out.write("\n")
    else:
        print(text(), file=out)


def _json_default(value: object) -> object:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def text_table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers, *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    if not rows:
        lines.append("(none)")
    return "\n".join(lines)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``counted(3, "file")`` is "3 files"; ``counted(1, "batch", "batches")`` is "1 batch"."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"
