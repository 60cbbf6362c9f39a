"""Query: snapshot-pinned, sandboxed SQL over pruned files."""

from icefloe.query.engine import (
    QueryEngine,
    QueryFailedError,
    QueryResult,
    TablePlan,
    TimeRange,
)
from icefloe.query.sandbox import QueryLimits, QueryRefusedError, QueryTimeoutError

__all__ = [
    "QueryEngine",
    "QueryFailedError",
    "QueryLimits",
    "QueryRefusedError",
    "QueryResult",
    "QueryTimeoutError",
    "TablePlan",
    "TimeRange",
]
