"""What a scan filter means for one value, written plainly: the oracle pruning is checked
against."""

from __future__ import annotations

from typing import Any

from icefloe.query.scan_filters import AllOf, AnyOf, Compare, InList, IsNotNull, IsNull, ScanFilter


def passes(value: Any, condition: ScanFilter) -> bool:
    """SQL semantics of a scan filter on one comparison-domain value (None is NULL)."""
    if isinstance(condition, IsNull):
        return value is None
    if isinstance(condition, IsNotNull):
        return value is not None
    if isinstance(condition, AllOf):
        return all(passes(value, c) for c in condition.children)
    if isinstance(condition, AnyOf):
        return any(passes(value, c) for c in condition.children)
    if value is None:
        return False
    if isinstance(condition, InList):
        return value in condition.values
    assert isinstance(condition, Compare)
    v, b = value, condition.value
    results: dict[str, bool] = {
        ">": v > b,
        ">=": v >= b,
        "<": v < b,
        "<=": v <= b,
        "=": v == b,
        "!=": v != b,
    }
    return results[condition.op]
