"""Query: snapshot-pinned, sandboxed SQL over pruned files."""

from icefloe.query.engine import (
    QueryEngine,
    QueryFailedError,
    QueryResult,
    ScanStats,
    TablePlan,
)
from icefloe.query.sandbox import QueryLimitError, QueryRefusedError, QueryTimeoutError
from icefloe.query.views import TimeRange
from icefloe.settings.limits import QueryLimits

__all__ = [
    "QueryEngine",
    "QueryFailedError",
    "QueryLimitError",
    "QueryLimits",
    "QueryRefusedError",
    "QueryResult",
    "QueryTimeoutError",
    "ScanStats",
    "TablePlan",
    "TimeRange",
]
