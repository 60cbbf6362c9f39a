"""Query: snapshot-pinned, sandboxed SQL over pruned files."""

from icefloe.query.engine import (
    QueryEngine,
    QueryFailedError,
    QueryResult,
    TablePlan,
)
from icefloe.query.sandbox import QueryLimits, QueryRefusedError, QueryTimeoutError
from icefloe.query.views import TimeRange

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
