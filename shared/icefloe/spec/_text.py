"""Small text helpers shared by the spec parsers: error quoting and top-level splitting."""

from __future__ import annotations

from icefloe.errors import SpecError

_MAX_SHOWN = 80
_CLOSERS = {"(": ")", "[": "]"}


def show(value: object) -> str:
    """Return ``repr(value)`` cut to about 80 characters, for error messages."""
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def split_top_level(text: str, *, sep: str, where: str) -> list[str]:
    """Split ``text`` on ``sep`` outside parentheses, brackets and quotes (``DECIMAL(10, 2)``,
    ``STRUCT("a,b" INTEGER)`` and ``AS (coalesce(p, ')'))`` stay whole)."""
    parts: list[str] = []
    stack: list[str] = []
    start = 0
    quote: str | None = None
    for i, ch in enumerate(text):
        if quote is not None:
            if ch == quote:  # a doubled quote closes and opens again: the same result
                quote = None
            continue
        if ch in ("'", '"'):
            quote = ch
        elif ch in _CLOSERS:
            stack.append(_CLOSERS[ch])
        elif ch in (")", "]"):
            if not stack or stack.pop() != ch:
                raise SpecError(f"{where}: unbalanced {ch!r} in {show(text)}")
        elif ch == sep and not stack:
            parts.append(text[start:i])
            start = i + 1
    if quote is not None:
        raise SpecError(f"{where}: unterminated {quote} in {show(text)}")
    if stack:
        raise SpecError(f"{where}: missing {stack[-1]!r} in {show(text)}")
    parts.append(text[start:])
    return parts
